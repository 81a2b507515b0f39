// The README's Usage section as a user meets it, and the longer examples of docs/examples.md: a
// brand-new project made with the section's own commands (npm init, npm pkg set type=module,
// installing waitprep and the pinned TypeScript and @types/node), the files saved under the
// names their first lines give and nothing else written, then the section's run command (`npx
// tsc && node example.js`), whose output must be what the README says it prints.
//
// One difference from the README, on purpose: `npm install` runs with --ignore-scripts. The
// project installs this checkout, and its install and prepare steps would rebuild the native
// addon and dist/ in the checkout while other test files use them. The checkout is built (npm
// test builds dist/ first), so the link needs no step; .ci/install-routes.sh runs the same
// commands with the steps, from a fresh clone.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { implementation, nativeLibraryPath } from '../lib/index.js';
import { NATIVE, runsIf } from './skip-reasons.js';

const root = join(import.meta.dirname, '..');
const hasPython = spawnSync('python3', ['--version'], { encoding: 'utf8' }).status === 0;

interface Block { lang: string; code: string }

/** The fenced blocks of `file` from `heading` to the next heading of its level (the whole file when null). */
function blocksOf(file: string, heading: string | null): Block[] {
  const text = readFileSync(join(root, file), 'utf8');
  let section = text;
  if (heading !== null) {
    const start = text.indexOf(`\n${heading}\n`);
    expect(start, `${file} has "${heading}"`).toBeGreaterThan(0);
    const end = text.indexOf(`\n${heading.split(' ')[0]} `, start + 1);
    section = text.slice(start, end < 0 ? undefined : end);
  }
  return [...section.matchAll(/^```(\w+)\n([\s\S]*?)^```$/gm)].map(([, lang, code]) => ({ lang: lang!, code: code! }));
}

/** The files among `blocks`: those whose first line is `// <name>` or `# <name>`, by name. */
function files(blocks: Block[]): Map<string, Block> {
  const named = new Map<string, Block>();
  for (const block of blocks) {
    const name = /^(?:\/\/|#) ([\w.-]+\.(?:ts|py|json))\b/.exec(block.code);
    if (name !== null) named.set(name[1]!, block);
  }
  return named;
}

const usage = blocksOf('README.md', '## Usage');
const shell = usage.filter((b) => b.lang === 'sh');
const setup = shell[0]!;
const runBlock = shell.find((b) => b.code.includes('node example.js'))!;
const readmeFiles = files(usage);
const docFiles = files(blocksOf('docs/examples.md', null));

/**
 * This environment less what `npm test` exports to its scripts: npm_config_local_prefix names
 * this checkout, and an `npm install` in the project would install into the checkout instead.
 */
function userEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if ((/^npm_/i.test(name) && !/^npm_config_(cache|registry|userconfig)$/i.test(name)) || name === 'INIT_CWD') continue;
    env[name] = value;
  }
  return env;
}

let parent = '';
let project = '';

beforeAll(() => {
  parent = mkdtempSync(join(tmpdir(), 'waitprep-readme-'));
  const commands = setup.code
    .replaceAll('/path/to/waitprep', root)
    .replaceAll('npm install ', 'npm install --ignore-scripts --prefer-offline --no-audit --no-fund ');
  const made = spawnSync('sh', ['-e', '-c', `${commands}\npwd`], { cwd: parent, env: userEnv(), encoding: 'utf8', timeout: 240_000 });
  expect(made.status, `${made.stdout}${made.stderr}`).toBe(0);
  project = made.stdout.trim().split('\n').at(-1)!;
  for (const [name, { code }] of [...readmeFiles, ...docFiles]) writeFileSync(join(project, name), code);
}, 300_000);

afterAll(() => {
  if (parent !== '') rmSync(parent, { recursive: true, force: true });
});

/** Runs `node <file>` in the project; its stdout, or the failure with both streams. */
function runNode(file: string): string {
  const run = spawnSync(process.execPath, [file], { cwd: project, encoding: 'utf8', timeout: 60_000 });
  if (run.status !== 0) throw new Error(`node ${file} exited ${run.status ?? run.signal}:\n${run.stdout}\n${run.stderr}`);
  return run.stdout;
}

describe("the README's Usage section", () => {
  it('shows the commands, tsconfig.json and an example of at most 20 lines; docs/examples.md the longer ones', () => {
    expect([...readmeFiles.keys()].sort()).toEqual(['example.ts', 'tsconfig.json']);
    expect(readmeFiles.get('example.ts')!.code.trimEnd().split('\n').length).toBeLessThanOrEqual(20);
    expect(setup.code).toMatch(/npm pkg set type=module/);
    expect(setup.code).toMatch(/typescript@7\.0\.\d+ @types\/node@20\.\d+\.\d+/);
    // waitprep's own declaration files are type-checked with the example, as a user's are.
    expect(readmeFiles.get('tsconfig.json')!.code).not.toMatch(/skipLibCheck/);
    expect([...docFiles.keys()].sort()).toEqual(['handoff.ts', 'orchestrator.ts', 'producer.py']);
  });

  it('made a project with exactly what the commands write: package.json with "type": "module", the pinned compiler and types', () => {
    const pkg = JSON.parse(readFileSync(join(project, 'package.json'), 'utf8'));
    expect(pkg.type).toBe('module');
    expect(pkg.devDependencies).toEqual({ typescript: '7.0.2', '@types/node': expect.stringMatching(/^20\./) });
    expect(Object.keys(pkg.dependencies)).toEqual(['waitprep']);
    // `npx tsc` is the pinned TypeScript, not npm's unrelated `tsc` package.
    expect(execFileSync('npx', ['tsc', '--version'], { cwd: project, env: userEnv(), encoding: 'utf8' }).trim()).toBe('Version 7.0.2');
  });

  it(`its run command compiles every file under strict, with waitprep's .d.ts, and example.js prints what the README says (${implementation})`, () => {
    const [command, printed] = runBlock.code.trim().split(/\s+#\s+/) as [string, string];
    const run = spawnSync('sh', ['-e', '-c', command], { cwd: project, env: userEnv(), encoding: 'utf8', timeout: 180_000 });
    expect(run.stderr, run.stdout).toBe('');
    expect(run.status, run.stdout).toBe(0);
    expect(run.stdout).toBe(`${printed}\n`);
  }, 200_000);

  it('docs/examples.md: handoff.ts runs against a real table and its wake hits', () => {
    expect(runNode('handoff.js')).toMatch(/^hit: 4096 bytes at 0, slot \d+$/m);
  });

  it.runIf(runsIf('README Python producer', NATIVE, [hasPython, 'no python3 on PATH'], [nativeLibraryPath() !== null, 'libwaitprep.so is not built']))(
    'docs/examples.md: orchestrator.ts with producer.py in its own process: the key crosses as bytes, the wake hits what Python published',
    () => {
      execFileSync('python3', ['-m', 'py_compile', join(project, 'producer.py')], { env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' } });
      expect(runNode('orchestrator.js')).toMatch(/^hit: 4096 bytes, published by producer\.py \(pid \d+\)$/m);
    },
  );
});
