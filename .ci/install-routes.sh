#!/usr/bin/env bash
# CI only (from .ci/run; too slow for `npm test`): every install route the README gives, run as a
# user runs it, from fresh clones of this commit (no node_modules, dist/ or build/) into new
# projects, with the compiler this machine has. Each ends with `npx waitprep doctor` in the
# project, which exits non-zero unless the native addon loads. The route without a compiler is
# .ci/run's own stage. Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# The README's commands, as written; npm may use its cache first (the same packages either way).
export npm_config_prefer_offline=true

# A new project, as `npm init -y` makes one.
new_project() {
  mkdir -p "$1"
  (cd "$1" && npm init -y > /dev/null)
}

# The package as the project sees it: the addon loads, and what loaded is said.
doctor() {
  (cd "$1" && npx waitprep doctor)
}

# 1. `npm install /path/to/waitprep`: a link to a fresh clone, which npm builds there.
git clone -q "$repo" "$work/clone-link"
new_project "$work/link"
(cd "$work/link" && npm install "$work/clone-link")
doctor "$work/link"
echo "install route: npm install <fresh clone>: ok"

# 2. `npm pack` in a fresh clone, then `npm install` of the tarball: a copy.
git clone -q "$repo" "$work/clone-pack"
(cd "$work/clone-pack" && npm pack)
new_project "$work/tarball"
(cd "$work/tarball" && npm install "$work/clone-pack/waitprep-$(node -p "require('$repo/package.json').version").tgz")
doctor "$work/tarball"
echo "install route: npm pack, npm install <tarball>: ok"

# 3. The README's Usage section in a brand-new project: its commands (the clone of route 1 for
# /path/to/waitprep), its tsconfig.json and example.ts and nothing else, then its run command,
# whose output must be what the README says it prints.
node .ci/readme-usage.mjs "$work/usage"
mkdir "$work/ts"
(cd "$work/ts" && sh -e -c "$(sed "s#/path/to/waitprep#$work/clone-link#g" "$work/usage/setup.sh")")
project="$(find "$work/ts" -mindepth 1 -maxdepth 1 -type d)"
cp "$work/usage/files/"* "$project/"
(cd "$project" && sh -e "$work/usage/run.sh") > "$work/usage/printed.txt"
diff "$work/usage/expected.txt" "$work/usage/printed.txt"
doctor "$project"
echo "install route: the README's TypeScript example ($(cd "$project" && npx tsc --version)): ok"

# 4. The Python route, as the README gives it: `pip install ./python` from a fresh clone into a new
# virtual environment, with Node and npm hidden from PATH (the build needs CMake and a C compiler,
# which this machine has; .ci/run installs the built wheel where there is none), then the package
# loads the library it carries and pins what it published.
git clone -q "$repo" "$work/clone-python"
mkdir "$work/no-node"
for tool in /usr/bin/* /usr/local/bin/* /bin/*; do
  name="${tool##*/}"
  case "$name" in node | nodejs | npm | npx | corepack) continue ;; esac
  [ -e "$work/no-node/$name" ] || ln -s "$tool" "$work/no-node/$name"
done
(
  export PATH="$work/no-node"
  unset WAITPREP_LIBRARY WAITPREP_LIB
  if command -v node || command -v npm; then echo "python route: Node is still on PATH" >&2; exit 1; fi
  cd "$work/clone-python"
  python3 -m venv "$work/venv"
  "$work/venv/bin/pip" install -q ./python
  cd "$work"
  "$work/venv/bin/python" - <<'PY'
import os, waitprep
lib = waitprep.load_library()._name
assert lib == os.path.join(os.path.dirname(waitprep.__file__), "libwaitprep.so"), lib
name = "waitprep-route-%d" % os.getpid()
producer = waitprep.create_table(name, 64)
try:
    consumer = waitprep.open_table(name)
    digest = bytes(range(32))
    reservation = producer.reserve(digest)
    producer.publish(reservation, 1, 0, 0, 0, 1)
    lease = consumer.try_pin(digest)
    assert not isinstance(lease, str) and lease.meta.size_bytes == 1, lease
    lease.close()
    consumer.close()
finally:
    producer.close()
    waitprep.unlink_table(name)
print("python route: loaded", lib)
PY
)
echo "install route: pip install ./python, no Node: ok"
