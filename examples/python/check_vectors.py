"""Checks waitprep_key.py against a waitprep key-vector file.

    python3 examples/python/check_vectors.py test/vectors/keys.json

Every entry of "vectors" must reproduce its digestHex (and canonicalHex, where
the file has it); every entry of "invalid" must be rejected naming its field.
Prints each failure and "N passed, M failed"; exits 1 when anything failed.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import waitprep_key  # noqa: E402

def check_vector(vector):
    fields = waitprep_key.from_json(vector["fields"])
    try:
        encoded = waitprep_key.encode(fields)
        digest = waitprep_key.digest(fields)
    except waitprep_key.InvalidKeyError as error:
        return "rejected a valid key: %s" % error
    if "canonicalHex" in vector and encoded.hex() != vector["canonicalHex"]:
        return "canonical bytes differ:\n  got      %s\n  expected %s" % (encoded.hex(), vector["canonicalHex"])
    if digest.hex() != vector["digestHex"]:
        return "digest differs: got %s, expected %s" % (digest.hex(), vector["digestHex"])
    return None


def check_invalid(case):
    try:
        waitprep_key.encode(waitprep_key.from_json(case["fields"]))
    except waitprep_key.InvalidKeyError as error:
        if error.field != case["field"]:
            return "rejected naming %r, expected %r (%s)" % (error.field, case["field"], error)
        if case["field"] not in str(error):
            return "the message does not name %r: %s" % (case["field"], error)
        return None
    return "accepted; expected a rejection naming %r" % case["field"]


def main(argv):
    if len(argv) != 2:
        print("usage: check_vectors.py PATH-TO-keys.json", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        data = json.load(f)
    if data.get("encoding") != "WPK1":
        print("unexpected encoding %r (this checker knows WPK1)" % data.get("encoding"), file=sys.stderr)
        return 1
    passed = failed = 0
    cases = [("vector", v, check_vector) for v in data["vectors"]]
    cases += [("invalid", c, check_invalid) for c in data["invalid"]]
    for kind, case, check in cases:
        problem = check(case)
        if problem is None:
            passed += 1
        else:
            failed += 1
            print("FAIL %s %s: %s" % (kind, case["name"], problem))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
