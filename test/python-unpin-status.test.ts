// The ctypes wrapper over ABI 2: wp_unpin's status comes back from Lease.unpin and Table.unpin,
// so a Python caller sees a second release (or one through a copy of the lease) as False instead
// of nothing, and a lease of another table releases nothing there.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { nativeLibraryPath } from '../lib/index.js';
import { NATIVE, runsIf } from './skip-reasons.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const hasPython = spawnSync('python3', ['--version'], { encoding: 'utf8' }).status === 0;
const libPath = nativeLibraryPath();

const SCRIPT = `
import copy, json, os, sys
sys.path.insert(0, os.path.join(sys.argv[1], "examples", "python"))
import waitprep_table as w
name = "waitprep-py-unpin-%d" % os.getpid()
digest = bytes(range(32))
producer = w.Table.open(name, True, 16)
consumer = w.Table.open(name, False)
try:
    producer.publish(producer.reserve(digest), 1, 2, 3, 4, 5)
    first = consumer.try_pin(digest)
    second = consumer.try_pin(digest)
    twin = w.Lease(consumer, copy.copy(first._raw), "host")  # a copy of the first lease
    foreign = w.Lease(producer, copy.copy(second._raw), "host")  # the consumer's lease, handed to the producer
    result = {
        "first": first.unpin(),
        "again": first.unpin(),
        "copy": twin.unpin(),
        "foreign": foreign.unpin(),
        "pins_after_foreign": consumer.client_pins(second.slot),
        "second": consumer.unpin(second),
        "pins": consumer.client_pins(second.slot),
    }
finally:
    consumer.close()
    producer.close()
    w.unlink(name)
print(json.dumps(result))
`;

describe.runIf(runsIf('python unpin status', NATIVE, [hasPython, 'python3 is not installed'], [libPath !== null, 'libwaitprep.so is not built']))(
  'python: unpin reports whether it released',
  () => {
    it('True once, then False for a second call, a copy, or a lease of another client', () => {
      const run = spawnSync('python3', ['-c', SCRIPT, root], { encoding: 'utf8', env: { ...process.env, WAITPREP_LIB: libPath! }, timeout: 30_000 });
      expect(run.status, run.stderr).toBe(0);
      expect(JSON.parse(run.stdout.trim())).toEqual({ first: true, again: false, copy: false, foreign: false, pins_after_foreign: 1, second: true, pins: 0 });
    });
  },
);
