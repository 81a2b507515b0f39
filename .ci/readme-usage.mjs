// Writes the README's Usage section out as a user would copy it, for .ci/install-routes.sh:
// <out>/setup.sh (its first sh block: the project's commands), <out>/run.sh (the block that runs
// example.js, less its "# prints" comment), <out>/expected.txt (that comment: what it prints),
// and <out>/files/<name> for each block whose first line names a file (tsconfig.json, example.ts).
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const out = process.argv[2];
const readme = readFileSync(join(import.meta.dirname, '..', 'README.md'), 'utf8');
const start = readme.indexOf('\n## Usage\n');
const end = readme.indexOf('\n## ', start + 1);
if (start < 0) throw new Error('README.md has no "## Usage" section');
const blocks = [...readme.slice(start, end < 0 ? undefined : end).matchAll(/^```(\w+)\n([\s\S]*?)^```$/gm)].map(([, lang, code]) => ({ lang, code }));
const shell = blocks.filter((b) => b.lang === 'sh');
const run = shell.find((b) => b.code.includes('node example.js'));
if (shell.length < 2 || run === undefined) throw new Error("README.md's Usage section lacks its setup or run commands");
const [command, expected] = run.code.trim().split(/\s+#\s+/);
mkdirSync(join(out, 'files'), { recursive: true });
writeFileSync(join(out, 'setup.sh'), shell[0].code);
writeFileSync(join(out, 'run.sh'), `${command}\n`);
writeFileSync(join(out, 'expected.txt'), `${expected}\n`);
for (const { code } of blocks) {
  const name = /^(?:\/\/|#) ([\w.-]+\.(?:ts|py|json))\b/.exec(code);
  if (name !== null) writeFileSync(join(out, 'files', name[1]), code);
}
