// No import cycles: scripts/check-import-cycles.js over this checkout (the built dist/ with bin/
// and bench/, and the lib/ sources with their type-only imports), and over small fixture trees
// that show the check finds what it claims to (so a broken check cannot pass by finding nothing).
// `npm test` builds dist/ first; run alone, build with `npx tsc -p .`.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';

const SCRIPT = fileURLToPath(new URL('../scripts/check-import-cycles.js', import.meta.url));

function check(...args: string[]): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(process.execPath, [SCRIPT, ...args], { encoding: 'utf8' });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('import cycles', () => {
  it('this package has none (built JavaScript, bin/, bench/, and the lib/ sources)', () => {
    const result = check();
    // On failure the message is the checker's own report: every cycle as a path.
    expect(result.status, `${result.stdout}${result.stderr}`).toBe(0);
    expect(result.stdout).toMatch(/^no import cycles \(\d+ modules/m);
  });
});

// ---- fixtures ------------------------------------------------------------------------------

const made: string[] = [];
afterAll(() => {
  for (const dir of made) fs.rmSync(dir, { recursive: true, force: true });
});

const PACKAGE = {
  name: 'fixture-pkg',
  type: 'module',
  exports: {
    '.': { types: './dist/index.d.ts', default: './dist/index.js' },
    './sub': { types: './dist/sub.d.ts', import: './dist/sub.js' },
    './parts/*': './dist/parts/*.js',
  },
};
const TSCONFIG = { compilerOptions: { rootDir: 'lib', outDir: 'dist' } };

/**
 * A package tree in a fresh directory: package.json, tsconfig.json and `files`. Each lib/*.ts
 * gets a dist/*.js unless `files` gives one, so the check finds a build; sources are written
 * first, so no build is older than its source.
 */
function tree(files: Record<string, string>): string {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'wp-cycles-'));
  made.push(root);
  const all: Record<string, string> = { 'package.json': JSON.stringify(PACKAGE), 'tsconfig.json': JSON.stringify(TSCONFIG), ...files };
  for (const [file, text] of Object.entries(files)) {
    const built = file.replace(/^lib\//, 'dist/').replace(/\.ts$/, '.js');
    if (file.startsWith('lib/') && !(built in all)) all[built] = '';
  }
  const order = Object.keys(all).sort((a, b) => Number(a.startsWith('dist/')) - Number(b.startsWith('dist/')));
  for (const file of order) {
    fs.mkdirSync(path.dirname(path.join(root, file)), { recursive: true });
    fs.writeFileSync(path.join(root, file), all[file]!);
  }
  return root;
}

describe('check-import-cycles on fixture trees', () => {
  it('passes an acyclic tree and counts its modules', () => {
    const root = tree({
      'lib/index.ts': "export { b } from './b.js';\nimport type { C } from './c.js';\n",
      'lib/b.ts': "import { c } from './c.js';\nexport const b = c;\n",
      'lib/c.ts': 'export const c = 1;\nexport type C = number;\n',
      'bin/cli.js': "import { b } from 'fixture-pkg';\nimport './helper.js';\n",
      'bin/helper.js': "import 'node:fs';\nimport 'some-other-package';\n",
    });
    const result = check('--root', root);
    expect(result.status, result.stdout + result.stderr).toBe(0);
    // 3 built + 2 bin scripts, then the 3 sources.
    expect(result.stdout).toMatch(/no import cycles \(8 modules: 5 built and scripts .*; 3 TypeScript sources/);
  });

  it('reports a static cycle as a path, in both graphs', () => {
    const root = tree({
      'lib/a.ts': "import { b } from './b.js';\nexport const a = 1;\n",
      'lib/b.ts': "import { a } from './a.js';\nexport const b = a;\n",
      'dist/a.js': "import { b } from './b.js';\nexport const a = 1;\n",
      'dist/b.js': "import { a } from './a.js';\nexport const b = a;\n",
    });
    const result = check('--root', root);
    expect(result.status).toBe(1);
    expect(result.stdout).toContain('in what runs');
    expect(result.stdout).toContain('  dist/a.js -> dist/b.js -> dist/a.js\n');
    expect(result.stdout).toContain('  lib/a.ts -> lib/b.ts -> lib/a.ts\n');
  });

  it('counts type-only imports in lib/ sources, which the build erases', () => {
    const root = tree({
      'lib/key.ts': "import type { Info } from './types.js';\nexport const key = 1;\n",
      'lib/types.ts': "import { key } from './key.js';\nexport type Info = typeof key;\n",
    });
    const result = check('--root', root);
    expect(result.status).toBe(1);
    expect(result.stdout).not.toContain('in what runs');
    expect(result.stdout).toContain('lib/key.ts -> lib/types.ts -> lib/key.ts   (lib/key.ts -> lib/types.ts is type-only)');
  });

  it('follows export-from, string dynamic imports and self-references through "exports" (subpaths and patterns)', () => {
    const root = tree({
      'lib/index.ts': "export * from './sub.js';\n",
      'dist/index.js': "export * from './sub.js';\n",
      'lib/sub.ts': 'export const sub = 1;\n',
      'lib/parts/p.ts': 'export const p = 1;\n',
      'bin/a.js': "export { x } from './b.js';\nimport 'fixture-pkg/parts/p';\n",
      'bin/b.js': "export const x = 1;\nexport async function later() { return import('./c.js'); }\n",
      'bin/c.js': "import { sub } from 'fixture-pkg/sub';\nimport * as all from 'fixture-pkg';\nexport { x as y } from './a.js';\n",
    });
    const result = check('--root', root);
    expect(result.status).toBe(1);
    expect(result.stdout).toContain('  bin/a.js -> bin/b.js -> bin/c.js -> bin/a.js   (bin/b.js -> bin/c.js is a dynamic import)\n');
    const edges = check('--root', root, '--edges').stdout;
    expect(edges).toContain('  bin/a.js -> dist/parts/p.js\n');
    expect(edges).toContain('  bin/c.js -> dist/sub.js\n');
    expect(edges).toContain('  bin/c.js -> dist/index.js\n');
    expect(edges).toContain('  dist/index.js -> dist/sub.js\n');
    expect(edges).toContain('  lib/index.ts -> lib/sub.ts\n');
  });

  it('does not count imports written in comments, strings, templates or regular expressions', () => {
    const root = tree({
      'lib/a.ts': "import { b } from './b.js';\nexport const a = b;\n",
      'lib/b.ts': [
        "// import { a } from './a.js';",
        "/* export * from './a.js'; */",
        "const s = \"import { a } from './a.js'\";",
        "const t = `import('./a.js') ${s}`;",
        "const r = /import '.\\/a.js'/;",
        'export const b = [s, t, r].length;',
        '',
      ].join('\n'),
    });
    const result = check('--root', root);
    expect(result.status, result.stdout + result.stderr).toBe(0);
  });

  it('reports a module importing itself, and lists computed dynamic imports it cannot follow', () => {
    const root = tree({
      'lib/index.ts': 'export {};\n',
      'bin/self.js': "import './self.js';\nconst name = './other.js';\nawait import(name);\n",
    });
    const result = check('--root', root);
    expect(result.status).toBe(1);
    expect(result.stdout).toContain('  bin/self.js -> bin/self.js\n');
    expect(result.stdout).toMatch(/computed dynamic imports \(not followed\):\n {2}bin\/self\.js:3: import\(name\)/);
  });

  it('refuses to judge a stale build: an import of a built file without a source, or a source newer than its build', () => {
    const stale = tree({
      'lib/index.ts': 'export {};\n',
      'dist/moved.js': 'export {};\n',
      'bin/cli.js': "import '../dist/moved.js';\n",
    });
    const result = check('--root', stale);
    expect(result.status).toBe(2);
    expect(result.stderr).toContain('bin/cli.js: imports dist/moved.js, a built file without a source in lib/ (stale output)');

    const edited = tree({ 'lib/index.ts': 'export {};\n' });
    const later = new Date(Date.now() + 60_000);
    fs.utimesSync(path.join(edited, 'lib', 'index.ts'), later, later);
    const second = check('--root', edited);
    expect(second.status).toBe(2);
    expect(second.stderr).toContain('edited since the build: lib/index.ts');
  });
});
