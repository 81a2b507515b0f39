// `waitprep doctor [--json]`: what a project that installed waitprep got. npm hides what the
// install step prints, so a user who installed waitprep as a dependency cannot see there whether
// the native addon was built; this says it after the fact: which implementation loads and why,
// where libwaitprep.so is (for a Python or C runtime), what the install step recorded, and how
// to get the addon when it is missing. Exit 0 with the addon (or with the fallback chosen by
// WAITPREP_IMPLEMENTATION=js), 1 when the fallback is in use against the default.
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const root = join(import.meta.dirname, '..', '..');
const require = createRequire(import.meta.url);
const HOW_TO_BUILD = require('../../scripts/build-advice.cjs');

export const DOCTOR_USAGE = `usage: waitprep doctor [--json]

Says which implementation of the lease table loads here and why, where libwaitprep.so is (the C
library a Python or C runtime loads), what the install step recorded (build/waitprep-install.json),
and how to get the native addon when it is missing. --json prints one JSON object.
Exit 0 when the addon loads (or WAITPREP_IMPLEMENTATION=js chose the fallback), 1 otherwise.`;

function installRecord() {
  try {
    return JSON.parse(readFileSync(join(root, 'build', 'waitprep-install.json'), 'utf8'));
  } catch {
    return null;
  }
}

/** `waitprep doctor [--json]`. */
export async function doctor(args) {
  const unknown = args.find((a) => a !== '--json');
  if (unknown !== undefined) {
    console.error(`waitprep doctor: unknown option ${JSON.stringify(unknown)}\n\n${DOCTOR_USAGE}`);
    process.exit(2);
  }
  // This command says everything the fallback warning would, and more.
  process.env.WAITPREP_NO_FALLBACK_WARNING ??= '1';
  const { version } = require('../../package.json');
  const report = { version, node: process.version, platform: `${process.platform}-${process.arch}`, package: root };
  try {
    const m = await import('waitprep');
    Object.assign(report, { implementation: m.implementation, reason: m.implementationReason, library: m.nativeLibraryPath() });
  } catch (error) {
    // WAITPREP_IMPLEMENTATION=native without the addon, or a misspelt value: the import refuses.
    Object.assign(report, { implementation: null, reason: `${error.code ?? 'error'}: ${error.message}`, library: null });
  }
  const chosen = process.env.WAITPREP_IMPLEMENTATION === 'js';
  report.install = installRecord();
  report.ok = report.implementation === 'native' || (report.implementation === 'js' && chosen);
  report.toGetTheAddon = report.implementation === 'native' ? null : chosen ? 'unset WAITPREP_IMPLEMENTATION' : HOW_TO_BUILD;
  if (args.includes('--json')) {
    process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  } else {
    const lines = [`waitprep ${version} (${root}), Node ${process.version}, ${report.platform}`];
    lines.push(`implementation: ${report.implementation ?? 'none: the package refuses to load'} (${report.reason})`);
    if (report.implementation === 'js') {
      lines.push('  lease tables live in this process only: no other process (a storage worker, a Python runtime) can share them');
    }
    lines.push(`libwaitprep.so: ${report.library ?? 'not built'}`);
    lines.push(`install step: ${report.install === null ? 'left no record (it did not run)' : `${report.install.outcome}: ${report.install.reason}`}`);
    if (report.toGetTheAddon !== null) lines.push(`to get the addon: ${report.toGetTheAddon}`);
    console.log(lines.join('\n'));
  }
  process.exitCode = report.ok ? 0 : 1;
}
