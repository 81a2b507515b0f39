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

# 4. PYTHON ROUTE (the engine-adapter wheel, installed with pip and no Node): goes here, run as the
# README shows it, in a fresh virtual environment.
