"""An engine's side in Python: pin an artifact the storage worker published, use it, release it.

    PYTHONPATH=python WAITPREP_LIBRARY=... python3 examples/python/engine_pin.py TABLE DIGEST_HEX

Opens the table as a consumer, pins the digest, prints the published metadata while it holds the
lease (the producer cannot evict it meanwhile), and releases it at the end of the ``with`` block.
A miss prints its reason and exits 1: the engine takes its original path.
"""

import sys

import waitprep


def main(argv):
    if len(argv) != 2:
        print("usage: engine_pin.py TABLE DIGEST_HEX", file=sys.stderr)
        return 2
    name, digest = argv[0], bytes.fromhex(argv[1])
    with waitprep.open_table(name) as table:
        lease = table.try_pin(digest)
        if not isinstance(lease, waitprep.Lease):
            print("miss: %s" % lease)
            return 1
        with lease:
            meta = lease.meta
            print("hit: slot %d generation %d, %d bytes at 0x%x" % (lease.slot, lease.generation, meta.size_bytes, meta.location))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
