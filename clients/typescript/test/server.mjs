// Real `stepwise serve` processes for the tests (STEPWISE_BIN), on a free loopback port (or a
// Unix socket) with a SQLite file: started, stopped and started again on the same port and file.
import { spawn, execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import { request } from 'node:http';
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

/** Whether `GET /healthz` answers 200 at `url` (`http://...`, or `unix:PATH` once its file is there). */
async function answers(url) {
  if (!url.startsWith('unix:')) return (await fetch(`${url}/healthz`)).ok;
  const socketPath = url.slice('unix:'.length);
  if (!existsSync(socketPath)) return false;
  return new Promise((resolve) => {
    const req = request({ socketPath, path: '/healthz' }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on('error', () => resolve(false));
    req.end();
  });
}

async function healthy(url, exited, deadlineMs = 60000) {
  const deadline = Date.now() + deadlineMs;
  for (;;) {
    try {
      if (await answers(url)) return;
    } catch {}
    // A server that refused its arguments (or failed to start) says why at once.
    const stopped = exited();
    if (stopped) throw new Error(`stepwise serve exited (${stopped}) before answering at ${url}`);
    if (Date.now() > deadline) throw new Error(`no answer from ${url} within ${deadlineMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * A server: `url`, `stop()`, `start()` (again, same port and database), `createKey()` (a key of
 * tenant `ts` made with the CLI; `{user, role}` choose its user and role). `unix: true` listens
 * on a Unix socket (`--listen unix:PATH`) instead: `url` is `unix:PATH`, `socket` its path.
 */
export async function server({ stepMs = 20, unix = false } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-ts-'));
  const database = `sqlite://${join(dir, 'stepwise.db')}`;
  const socket = unix ? join(dir, 's.sock') : null;
  const port = unix ? null : await freePort();
  const listen = unix ? `unix:${socket}` : `127.0.0.1:${port}`;
  const url = unix ? `unix:${socket}` : `http://127.0.0.1:${port}`;
  let child = null;
  let log = '';
  const env = { ...process.env, STEPWISE_DEMO_STEP_MS: String(stepMs), STEPWISE_LOG: 'warn' };
  for (const key of ['STEPWISE_LLM_BASE_URL', 'STEPWISE_LLM_MODEL', 'STEPWISE_LLM_API_KEY', 'STEPWISE_CONFIG', 'STEPWISE_DATABASE_URL']) delete env[key];
  const handle = {
    url,
    socket,
    async start() {
      const started = spawn(bin, ['serve', '--listen', listen, '--database', database], { env, stdio: ['ignore', 'ignore', 'pipe'] });
      child = started;
      let exit = null;
      started.stderr.on('data', (d) => { log += d; });
      started.once('close', (code, signal) => { exit = `${signal ?? `code ${code}`}: ${log.trim().split('\n').slice(-5).join('\n')}`; });
      try {
        await healthy(url, () => exit);
      } catch (error) {
        if (started.exitCode === null) started.kill('SIGKILL');
        throw error;
      }
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
