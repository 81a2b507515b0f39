"""An engine's side in Python: pin an artifact, use it, release it.

    PYTHONPATH=python python3 examples/python/engine_pin.py TABLE DIGEST_HEX
    PYTHONPATH=python python3 examples/python/engine_pin.py --token wp1:TABLE:SLOT:GENERATION:DIGEST [--read] [--hold]

With a table and a digest it pins by digest. With --token, a handoff token from the orchestrator
(Node's ``lease.handoffToken()``), it pins exactly the artifact that lease holds, for itself
(``try_pin_exact``): the orchestrator may close its own lease once this prints ``hit``. While it
holds the lease the producer cannot evict the artifact. --read then reads the artifact's bytes:
the arena record ``meta.location`` names, in the arena the table's name gives, its header checked
against the digest and the meta, its payload against the checksum (``waitprep.arena``,
docs/arena-records.md). --hold keeps the lease until a line arrives on stdin, then prints
``released``. A miss prints its reason and exits 1: the engine takes its original path.
"""

import argparse
import sys

import waitprep


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("table", nargs="?", help="table name (with DIGEST_HEX)")
    parser.add_argument("digest", nargs="?", help="the artifact's digest, 64 hex digits")
    parser.add_argument("--token", help="a handoff token: pin exactly the lease it names")
    parser.add_argument("--read", action="store_true", help="read and check the artifact's arena record")
    parser.add_argument("--hold", action="store_true", help="hold the lease until a line on stdin")
    args = parser.parse_args(argv)
    if (args.token is None) == (args.digest is None):
        parser.error("give TABLE DIGEST_HEX, or --token")

    token = waitprep.parse_handoff_token(args.token) if args.token is not None else None
    name = token.table if token is not None else args.table
    with waitprep.open_table(name) as table:
        lease = table.try_pin_exact(token) if token is not None else table.try_pin(bytes.fromhex(args.digest))
        if not isinstance(lease, waitprep.Lease):
            print("miss: %s" % lease, flush=True)
            return 1
        with lease:
            meta = lease.meta
            print("hit: slot %d generation %d, %d bytes at 0x%x, token %s" % (lease.slot, lease.generation, meta.size_bytes, meta.location, lease.handoff_token()), flush=True)
            if args.read:
                record = waitprep.arena.read_arena_record(name, lease.digest, meta)
                if isinstance(record, waitprep.arena.Mismatch):
                    print("record mismatch: %s: %s" % (record.reason, record.message), flush=True)
                else:
                    print("record: %d bytes, %d tokens, format %s, checksum ok" % (len(record.payload), record.header.token_count, record.header.format), flush=True)
            if args.hold:
                sys.stdin.readline()
        if args.hold:
            print("released", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
