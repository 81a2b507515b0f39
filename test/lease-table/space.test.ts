// A /dev/shm smaller than the table: creation reserves the segment's pages
// up front and fails with ERR_NO_SPACE, naming the size needed and what is free, instead of the
// creator dying of SIGBUS on its first touch of a page tmpfs cannot supply; the half-created
// segment is gone, so a smaller table can be created under the same name. The demo's arena
// refuses an artifact that does not fit, abandoning its slot. The child runs in a private mount
// namespace whose /dev/shm is an 8 MiB tmpfs, so it needs root, unshare and the addon.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { segmentSize } from '../../lib/lease-table/layout.js';
import { NATIVE, runsIf, type Requirement } from '../skip-reasons.js';

const FIXTURE = join(import.meta.dirname, '..', 'fixtures', 'create-table.mjs');
const LARGE = 1 << 20;
const SMALL = 1024;

/** Runs `script` under sh in a private mount namespace whose /dev/shm is an 8 MiB tmpfs. */
function inSmallShm(script: string, args: string[] = []) {
  return spawnSync('unshare', ['-m', 'sh', '-c', `mount -t tmpfs -o size=8m tmpfs /dev/shm && ${script}`, 'sh', ...args], {
    encoding: 'utf8',
    timeout: 60_000,
  });
}

const ROOT: Requirement = [process.getuid?.() === 0, 'not running as root (mounting a small tmpfs needs it)'];
const probe = ROOT[0] ? inSmallShm('true') : null;
const UNSHARE: Requirement = [probe?.status === 0, `unshare -m with a tmpfs mount failed: ${probe?.error?.message ?? probe?.stderr.trim() ?? 'not tried'}`];

describe.runIf(runsIf('lease table: a small /dev/shm', ROOT, UNSHARE, NATIVE))('lease table: a /dev/shm smaller than the table (native)', () => {
  it('refuses the table with ERR_NO_SPACE, leaves nothing behind, creates a smaller one, and the demo arena refuses a request that does not fit', () => {
    const name = `wp-space-${process.pid}`;
    const run = inSmallShm('exec "$@"', [process.execPath, FIXTURE, name, String(LARGE), String(SMALL)]);
    // Before the reservation the child died of SIGBUS here, inside openLeaseTable.
    expect({ signal: run.signal, status: run.status }, run.stderr).toEqual({ signal: null, status: 0 });
    const report = JSON.parse(run.stdout);

    expect(report.large).toMatchObject({ ok: false, code: 'ERR_NO_SPACE', leftBehind: false });
    expect(report.large.message).toContain(`${segmentSize(LARGE)} bytes`);
    expect(report.large.message).toMatch(/\/dev\/shm has \d+ bytes free/);
    expect(report.small).toEqual({ ok: true, capacity: SMALL });

    expect(report.arena.refused.ok).toBe(false);
    expect(report.arena.refused.error).toMatch(/^ENOSPC: .*\/dev\/shm\/.*-arena.* \d+ bytes/);
    expect(report.arena.filesLeft).toEqual([]);
    expect(report.arena.afterRefusal).toBe('absent');
    expect(report.arena.retried.ok).toBe(true);
  });
});
