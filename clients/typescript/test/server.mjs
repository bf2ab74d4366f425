// Real `stepwise serve` processes for the tests (STEPWISE_BIN), on a free loopback port with a
// SQLite file: started, stopped and started again on the same port and file.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const bin = process.env.STEPWISE_BIN;
if (!bin) throw new Error('set STEPWISE_BIN to a stepwise binary');

export async function freePort() {
  return new Promise((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

async function healthy(url, deadlineMs = 60000) {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    try {
      if ((await fetch(`${url}/healthz`)).ok) return;
    } catch {}
    if (Date.now() > deadline) throw new Error(`no answer from ${url} within ${deadlineMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * A server: `url`, `stop()`, `start()` (again, same port and database), `createKey()` (a key of
 * tenant `ts` made with the CLI; `{user, role}` choose its user and role).
 */
export async function server({ stepMs = 20 } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-ts-'));
  const database = `sqlite://${join(dir, 'stepwise.db')}`;
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  let child = null;
  let log = '';
  const env = { ...process.env, STEPWISE_DEMO_STEP_MS: String(stepMs), STEPWISE_LOG: 'warn' };
  for (const key of ['STEPWISE_LLM_BASE_URL', 'STEPWISE_LLM_MODEL', 'STEPWISE_LLM_API_KEY', 'STEPWISE_CONFIG', 'STEPWISE_DATABASE_URL']) delete env[key];
  const handle = {
    url,
    async start() {
      child = spawn(bin, ['serve', '--listen', `127.0.0.1:${port}`, '--database', database], { env, stdio: ['ignore', 'ignore', 'pipe'] });
      child.stderr.on('data', (d) => { log += d; });
      await healthy(url);
    },
    async stop() {
      if (!child || child.exitCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
      child = null;
    },
    createKey({ user = 'tester', role } = {}) {
      const args = ['keys', 'create', '--database', database, '--tenant', 'ts', '--user', user, '--name', 'ts-client', ...(role ? ['--role', role] : [])];
      return execFileSync(bin, args, { env }).toString().trim().split('\n').pop();
    },
    log: () => log,
  };
  await handle.start();
  return handle;
}
