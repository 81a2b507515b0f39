// The example's Python: a virtual environment at examples/transformers-engine/.venv with torch and
// transformers, installed from whatever package index the machine's pip is set up to reach (no
// index of its own: a host without torch gets a clear "cannot install" and nothing else changes).
// TFENGINE_PYTHON names another interpreter that already has both (then nothing is created).
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export const EXAMPLE_DIR = fileURLToPath(new URL('.', import.meta.url));
export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));
export const VENV_DIR = fileURLToPath(new URL('./.venv', import.meta.url));
/** What the engine imports; the storage tier needs none of it. */
export const REQUIREMENTS = ['torch', 'transformers'];

/** The interpreter the example uses: TFENGINE_PYTHON, else the venv's. */
export function venvPython() {
  return process.env.TFENGINE_PYTHON || `${VENV_DIR}/bin/python`;
}

/** The environment a Python child of the example gets: the checkout's python/ (the waitprep package) and the example on PYTHONPATH. */
export function pythonEnv(extra = {}) {
  const path = [`${REPO_ROOT}python`, EXAMPLE_DIR, process.env.PYTHONPATH].filter(Boolean).join(':');
  return { ...process.env, PYTHONPATH: path, PYTHONDONTWRITEBYTECODE: '1', ...extra };
}

/**
 * Whether `python` imports torch and transformers: `{ ok: true, versions }` or `{ ok: false, reason }`.
 * The reason is one line, fit for a skip message.
 */
export function probe(python = venvPython()) {
  if (!existsSync(python)) return { ok: false, reason: `no interpreter at ${python} (npm run e2e:transformers creates the venv)` };
  const run = spawnSync(python, ['-c', 'import torch, transformers; print(torch.__version__, transformers.__version__)'], { encoding: 'utf8', timeout: 120_000 });
  if (run.status !== 0) {
    const last = `${run.stderr}`.trim().split('\n').pop() || `exit ${run.status}`;
    return { ok: false, reason: `${python} cannot import torch and transformers: ${last}` };
  }
  const [torch, transformers] = run.stdout.trim().split(/\s+/);
  return { ok: true, versions: { torch, transformers } };
}

/**
 * Makes sure the venv exists and imports both packages, creating and installing it when it does
 * not. pip's retries are off: on a host where the public index is unreachable each retry only
 * waits, and whatever the configured local indexes hold installs at once.
 */
export function ensureVenv(log = (line) => console.error(line)) {
  const found = probe();
  if (found.ok || process.env.TFENGINE_PYTHON) return found;
  if (!existsSync(`${VENV_DIR}/bin/python`)) {
    log(`creating ${VENV_DIR}`);
    const made = spawnSync('python3', ['-m', 'venv', VENV_DIR], { stdio: 'inherit' });
    if (made.status !== 0) return { ok: false, reason: `python3 -m venv ${VENV_DIR} failed (exit ${made.status}): is python3-venv installed?` };
  }
  log(`installing ${REQUIREMENTS.join(' ')} into it (a few minutes on first run)`);
  const pip = spawnSync(`${VENV_DIR}/bin/python`, ['-m', 'pip', 'install', '--retries', '0', '--timeout', '10', ...REQUIREMENTS], { stdio: ['ignore', 'inherit', 'inherit'] });
  if (pip.status !== 0) return { ok: false, reason: `pip could not install ${REQUIREMENTS.join(' ')} from the indexes this machine reaches (exit ${pip.status})` };
  return probe();
}
