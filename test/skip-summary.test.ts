// The skip summary (test/skip-summary.ts): groups skipped for one reason across many files, each
// file in its own worker process, come out as one line per reason when the run ends, not one
// line per group.
import { spawnSync } from 'node:child_process';
import { appendFileSync } from 'node:fs';
import { describe, expect, it, vi } from 'vitest';
import setup from './skip-summary.js';

describe('the skip summary', () => {
  it('prints each reason once, with how many groups it skipped and which, however many workers recorded it', () => {
    let log = '';
    const teardown = setup({ provide: (_key: string, value: string) => (log = value) } as never);
    const reason = 'the native implementation is not in use (the Node-API addon was not built at install: no C++ compiler on PATH)';
    // Groups recorded from separate processes, as vitest's workers do.
    for (const what of ['lease table edges: native', 'lease-table conformance', 'handoff']) {
      const child = spawnSync(process.execPath, ['-e', `require('fs').appendFileSync(${JSON.stringify(log)}, ${JSON.stringify(`${what}\t${reason}\n`)})`]);
      expect(child.status).toBe(0);
    }
    appendFileSync(log, 'README Python producer\tno python3 on PATH\n');
    const printed: string[] = [];
    const spy = vi.spyOn(console, 'log').mockImplementation((line: string) => void printed.push(line));
    try {
      teardown();
    } finally {
      spy.mockRestore();
    }
    expect(printed).toEqual([
      `skipped (3 groups: lease table edges: native, lease-table conformance, handoff): ${reason}`,
      'skipped (1 group: README Python producer): no python3 on PATH',
    ]);
  });

  it('prints nothing when nothing was skipped', () => {
    const teardown = setup({ provide: () => {} } as never);
    const spy = vi.spyOn(console, 'log');
    try {
      teardown();
      expect(spy).not.toHaveBeenCalled();
    } finally {
      spy.mockRestore();
    }
  });
});
