// The README's `js` examples, run as they are against a live server (the package import points
// at the build).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { server } from './server.mjs';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const examples = [...readme.matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]);
const dist = fileURLToPath(new URL('../dist/index.js', import.meta.url));

let srv;
before(async () => { srv = await server(); });
after(async () => { await srv?.stop(); });

test('the README has examples', () => {
  assert.ok(examples.length >= 3, `found ${examples.length}`);
});

for (const [i, code] of examples.entries()) {
  test(`README example ${i + 1} runs`, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stepwise-readme-'));
    const file = join(dir, `example-${i + 1}.mjs`);
    writeFileSync(file, code.replaceAll("'@stepwise/client'", JSON.stringify(dist)));
    const output = await new Promise((resolve, reject) => {
      execFile(process.execPath, [file], { env: { ...process.env, STEPWISE_URL: srv.url }, timeout: 60000 }, (error, stdout, stderr) => {
        if (error) reject(new Error(`${error.message}\n${stderr}`));
        else resolve(stdout);
      });
    });
    // Each example prints what its comments say.
    const expected = [...code.matchAll(/console\.log\(.*\); \/\/ (.*)$/gm)].map((m) => m[1]);
    for (const line of expected) assert.ok(output.includes(line), `prints ${line}:\n${output}`);
    assert.ok(output.length > 0);
  });
}
