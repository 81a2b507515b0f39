// The README's Usage section, as a user meets it: its code blocks are taken out of README.md as
// they are written, saved under the names their first lines give, type-checked under `strict`
// and run, in a temporary project where 'waitprep' is installed as a link to this checkout
// (what `npm install /path/to/waitprep` makes). Needs the built dist/.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { implementation, nativeLibraryPath } from '../lib/index.js';
import { NATIVE, runsIf } from './skip-reasons.js';

const root = join(import.meta.dirname, '..');
const TSC = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
const hasPython = spawnSync('python3', ['--version'], { encoding: 'utf8' }).status === 0;

/** The fenced blocks of the README's Usage section (up to the next `## ` heading), by the file name each one's first line gives. */
function usageBlocks(): Map<string, { lang: string; code: string }> {
  const readme = readFileSync(join(root, 'README.md'), 'utf8');
  const start = readme.indexOf('\n## Usage\n');
  expect(start).toBeGreaterThan(0);
  const end = readme.indexOf('\n## ', start + 1);
  const section = readme.slice(start, end < 0 ? undefined : end);
  const blocks = new Map<string, { lang: string; code: string }>();
  for (const [, lang, code] of section.matchAll(/^```(\w+)\n([\s\S]*?)^```$/gm)) {
    const named = /^(?:\/\/|#) (\S+\.(?:ts|py)):/.exec(code!);
    if (named === null) throw new Error(`a ${lang} block of the README's Usage section does not start with "// <file>:" or "# <file>:"`);
    blocks.set(named[1]!, { lang: lang!, code: code! });
  }
  return blocks;
}

const blocks = usageBlocks();
let project = '';

beforeAll(() => {
  project = mkdtempSync(join(tmpdir(), 'waitprep-readme-'));
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'readme-example', private: true, type: 'module' }));
  mkdirSync(join(project, 'node_modules'));
  symlinkSync(root, join(project, 'node_modules', 'waitprep'), 'dir');
  writeFileSync(join(project, 'tsconfig.json'), JSON.stringify({
    compilerOptions: {
      target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', strict: true, skipLibCheck: true,
      types: ['node'], typeRoots: [join(root, 'node_modules', '@types')],
    },
    include: ['*.ts'],
  }));
  for (const [file, { code }] of blocks) writeFileSync(join(project, file), code);
});

afterAll(() => {
  if (project !== '') rmSync(project, { recursive: true, force: true });
});

/** Runs `node <file>` in the project; its stdout, or the failure with both streams. */
function runNode(file: string): string {
  const run = spawnSync(process.execPath, [file], { cwd: project, encoding: 'utf8', timeout: 60_000 });
  if (run.status !== 0) throw new Error(`node ${file} exited ${run.status ?? run.signal}:\n${run.stdout}\n${run.stderr}`);
  return run.stdout;
}

describe("the README's Usage section", () => {
  it('names its blocks: a one-process example, a Python producer and its orchestrator', () => {
    expect([...blocks.keys()].sort()).toEqual(['example.ts', 'orchestrator.ts', 'producer.py']);
    expect(blocks.get('producer.py')!.lang).toBe('python');
    for (const file of ['example.ts', 'orchestrator.ts']) expect(blocks.get(file)!.lang).toBe('ts');
  });

  it('type-checks under strict, importing waitprep as an installed package', () => {
    const out = spawnSync(process.execPath, [TSC, '-p', project], { encoding: 'utf8', timeout: 120_000 });
    expect(out.stdout + out.stderr).toBe('');
    expect(out.status).toBe(0);
  });

  it(`example.ts runs against a real table (${implementation}) and its wake hits`, () => {
    expect(runNode('example.js')).toMatch(/^hit: 4096 bytes at 0, slot \d+$/m);
  });

  it.runIf(runsIf('README Python producer', NATIVE, [hasPython, 'no python3 on PATH'], [nativeLibraryPath() !== null, 'libwaitprep.so is not built']))(
    'orchestrator.ts with producer.py in its own process: the key crosses as bytes, the wake hits what Python published',
    () => {
      execFileSync('python3', ['-m', 'py_compile', join(project, 'producer.py')], { env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' } });
      expect(runNode('orchestrator.js')).toMatch(/^hit: 4096 bytes, published by producer\.py \(pid \d+\)$/m);
    },
  );
});
