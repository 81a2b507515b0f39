#!/usr/bin/env node
// Fails when the package's modules import each other in a cycle. Run after `npx tsc -p .`:
//
//   node scripts/check-import-cycles.js              # exit 0: "no import cycles (N modules)"
//   node scripts/check-import-cycles.js --root DIR   # check another checkout (the test's fixtures)
//   node scripts/check-import-cycles.js --edges      # also print every edge followed
//
// Two graphs are checked, because each sees edges the other cannot:
//
// - What runs: dist/**/*.js (built from lib/), bin/**/*.js and bench/**/*.js. bin/ and bench/
//   reach dist/ through the package's own name ('waitprep', 'waitprep/trace', ...), resolved here
//   through package.json "exports" the way Node resolves a self-reference. Only dist files built
//   from a current lib/ source are taken as modules: tsc never deletes outputs, so a file left by
//   a moved source would otherwise report cycles that a clean build does not have (an import of
//   one is reported as stale instead).
// - What a reader meets: lib/**/*.ts, where type-only imports are edges too (tsc erases them
//   from dist/, but a reader still has to follow them, and a type cycle still ties two files).
//
// Edges: static imports, `export ... from`, and `import('...')` with a string literal.
// Computed dynamic imports cannot be followed and are listed. require() is not followed: the
// package loads only other packages (and its own package.json) through createRequire.
//
// Parsing: es-module-lexer (the lexer vite and vitest use, installed with vitest) reads both
// JavaScript and TypeScript import syntax with a real tokenizer, so imports inside comments,
// strings and templates are never counted. Exit codes: 0 no cycles, 1 cycles (each printed as a
// path a -> b -> a), 2 the check could not run.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Per strongly connected component: more elementary cycles than this are counted, not printed. */
const MAX_CYCLES_SHOWN = 50;

function usage(message) {
  process.stderr.write(`check-import-cycles: ${message}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  let root = join(dirname(fileURLToPath(import.meta.url)), '..');
  let listEdges = false;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--root' && i + 1 < argv.length) root = resolve(argv[++i]);
    else if (argv[i] === '--edges') listEdges = true;
    else usage(`unknown argument ${JSON.stringify(argv[i])} (usage: check-import-cycles.js [--root DIR] [--edges])`);
  }
  return { root, listEdges };
}

async function loadLexer() {
  try {
    const lexer = await import('es-module-lexer');
    await lexer.init;
    return lexer.parse;
  } catch (error) {
    usage(`cannot load es-module-lexer (installed with vitest, a devDependency; run npm install): ${error.message}`);
  }
}

/** Every file under `dir` (absolute) whose name passes `keep`, sorted; none when `dir` is absent. */
function filesUnder(dir, keep) {
  if (!existsSync(dir)) return [];
  const out = [];
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) {
      if (name !== 'node_modules') out.push(...filesUnder(path, keep));
    } else if (keep(name)) {
      out.push(path);
    }
  }
  return out;
}

/** tsconfig's rootDir and outDir (defaults lib and dist), absolute. */
function sourceAndOutDirs(root) {
  const path = join(root, 'tsconfig.json');
  let options = {};
  if (existsSync(path)) {
    try {
      options = JSON.parse(readFileSync(path, 'utf8')).compilerOptions ?? {};
    } catch (error) {
      usage(`tsconfig.json is not plain JSON (${error.message}); this check reads rootDir and outDir from it`);
    }
  }
  return { src: resolve(root, options.rootDir ?? 'lib'), out: resolve(root, options.outDir ?? 'dist') };
}

// ---- resolving a specifier ---------------------------------------------------------------

/** The target of a conditional-exports value for an ESM import in Node. */
function exportTarget(value) {
  if (typeof value === 'string') return value;
  if (Array.isArray(value)) {
    for (const item of value) {
      const target = exportTarget(item);
      if (target !== null) return target;
    }
    return null;
  }
  if (value !== null && typeof value === 'object') {
    for (const [condition, inner] of Object.entries(value)) {
      if (condition === 'import' || condition === 'node' || condition === 'default') {
        const target = exportTarget(inner);
        if (target !== null) return target;
      }
    }
  }
  return null;
}

/** A self-reference ('name' or 'name/sub') through package.json "exports", as a path; null when not one. */
function selfReference(pkg, root, specifier) {
  if (typeof pkg.name !== 'string' || (specifier !== pkg.name && !specifier.startsWith(`${pkg.name}/`))) return null;
  const subpath = `.${specifier.slice(pkg.name.length)}`;
  let exports = pkg.exports;
  if (exports === undefined) return { unresolved: 'package.json has no "exports"' };
  if (typeof exports === 'string' || Array.isArray(exports) || !Object.keys(exports).some((k) => k.startsWith('.'))) {
    exports = { '.': exports };
  }
  let target = null;
  if (Object.hasOwn(exports, subpath)) {
    target = exportTarget(exports[subpath]);
  } else {
    for (const [pattern, value] of Object.entries(exports)) {
      const star = pattern.indexOf('*');
      if (star < 0) continue;
      const [before, after] = [pattern.slice(0, star), pattern.slice(star + 1)];
      if (subpath.startsWith(before) && subpath.endsWith(after) && subpath.length >= pattern.length - 1) {
        const matched = subpath.slice(before.length, subpath.length - after.length);
        const inner = exportTarget(value);
        target = inner === null ? null : inner.replaceAll('*', matched);
        break;
      }
    }
  }
  if (target === null) return { unresolved: `package.json "exports" has no ${JSON.stringify(subpath)} for an import` };
  return { path: resolve(root, target) };
}

// ---- one graph ---------------------------------------------------------------------------

/**
 * Builds the graph over `modules` (absolute paths). `toModule(path)` maps a resolved path to a
 * module of the graph, or returns { stale } / { outside } for paths that are not.
 */
function buildGraph({ parse, root, pkg, modules, toModule }) {
  const edges = new Map(modules.map((m) => [m, []]));
  const problems = [];
  const computed = [];
  for (const file of modules) {
    const source = readFileSync(file, 'utf8');
    let imports;
    try {
      [imports] = parse(source, file);
    } catch (error) {
      problems.push(`${rel(root, file)}: cannot be lexed (${error.message})`);
      continue;
    }
    for (const imp of imports) {
      if (imp.d === -2 || imp.t === 3) continue; // import.meta
      const specifier = imp.n;
      if (specifier === undefined) {
        computed.push(`${rel(root, file)}:${lineOf(source, imp.ss)}: import(${source.slice(imp.s, imp.e)})`);
        continue;
      }
      let target;
      if (specifier.startsWith('./') || specifier.startsWith('../')) {
        target = resolve(dirname(file), specifier);
      } else {
        const self = selfReference(pkg, root, specifier);
        if (self === null) continue; // node: builtins and other packages
        if (self.unresolved) {
          problems.push(`${rel(root, file)}: ${JSON.stringify(specifier)}: ${self.unresolved}`);
          continue;
        }
        target = self.path;
      }
      const to = toModule(target);
      if (to.module !== undefined) {
        edges.get(file).push({ to: to.module, kind: edgeKind(source, imp) });
      } else if (to.stale) {
        problems.push(`${rel(root, file)}: imports ${rel(root, target)}, a built file without a source in ${to.stale} (stale output)`);
      } else if (to.missing) {
        problems.push(`${rel(root, file)}: imports ${JSON.stringify(specifier)}, which resolves to no file (${rel(root, target)})`);
      }
    }
  }
  return { edges, problems, computed };
}

/** 'dynamic', 'type' (erased by tsc), or 'static'. */
function edgeKind(source, imp) {
  if (imp.d >= 0) return 'dynamic';
  const statement = source.slice(imp.ss, imp.se);
  if (/^(?:import|export)\s+type[\s{*]/.test(statement)) return 'type';
  // `import { type A, type B } from` imports types only as well.
  const braces = /^import\s*\{([^}]*)\}\s*from/.exec(statement);
  if (braces && braces[1].split(',').every((part) => part.trim() === '' || /^type\s/.test(part.trim()))) return 'type';
  return 'static';
}

function lineOf(source, offset) {
  let line = 1;
  for (let i = 0; i < offset; i++) if (source.charCodeAt(i) === 10) line++;
  return line;
}

function rel(root, path) {
  return relative(root, path).split(sep).join('/');
}

// ---- cycles --------------------------------------------------------------------------------

/** Tarjan's strongly connected components (iterative), each as a list of nodes. */
function components(edges) {
  const index = new Map();
  const low = new Map();
  const onStack = new Set();
  const stack = [];
  const out = [];
  let next = 0;
  for (const start of edges.keys()) {
    if (index.has(start)) continue;
    const work = [[start, 0]];
    index.set(start, next);
    low.set(start, next++);
    stack.push(start);
    onStack.add(start);
    while (work.length > 0) {
      const frame = work[work.length - 1];
      const [node, i] = frame;
      const targets = edges.get(node);
      if (i < targets.length) {
        frame[1]++;
        const to = targets[i].to;
        if (!index.has(to)) {
          index.set(to, next);
          low.set(to, next++);
          stack.push(to);
          onStack.add(to);
          work.push([to, 0]);
        } else if (onStack.has(to)) {
          low.set(node, Math.min(low.get(node), index.get(to)));
        }
        continue;
      }
      work.pop();
      if (work.length > 0) {
        const parent = work[work.length - 1][0];
        low.set(parent, Math.min(low.get(parent), low.get(node)));
      }
      if (low.get(node) === index.get(node)) {
        const component = [];
        let member;
        do {
          member = stack.pop();
          onStack.delete(member);
          component.push(member);
        } while (member !== node);
        out.push(component);
      }
    }
  }
  return out;
}

/**
 * The elementary cycles of one component, each once: rooted at its least member (in sorted
 * order), walking only members after the root. Stops after `limit` and says how many it found.
 */
function cyclesOf(component, edges, limit) {
  const members = [...component].sort();
  const rank = new Map(members.map((m, i) => [m, i]));
  const cycles = [];
  let found = 0;
  // A dense component has exponentially many cycles: past this many, stop counting.
  const enough = limit * 20;
  for (const rootNode of members) {
    const r = rank.get(rootNode);
    const path = [rootNode];
    const kinds = [];
    const onPath = new Set([rootNode]);
    const walk = (node) => {
      for (const { to, kind } of edges.get(node)) {
        if (!rank.has(to) || rank.get(to) < r) continue;
        if (to === rootNode) {
          found++;
          if (cycles.length < limit) cycles.push({ nodes: [...path, rootNode], kinds: [...kinds, kind] });
          continue;
        }
        if (onPath.has(to) || found >= enough) continue;
        path.push(to);
        kinds.push(kind);
        onPath.add(to);
        walk(to);
        onPath.delete(to);
        kinds.pop();
        path.pop();
      }
    };
    walk(rootNode);
  }
  return { cycles, found, counted: found < enough };
}

/** Every cycle of the graph, as printable lines. */
function describeCycles(root, edges) {
  const lines = [];
  let count = 0;
  for (const component of components(edges)) {
    const selfLoop = component.length === 1 && edges.get(component[0]).some((e) => e.to === component[0]);
    if (component.length < 2 && !selfLoop) continue;
    const { cycles, found, counted } = cyclesOf(component, edges, MAX_CYCLES_SHOWN);
    count += found;
    for (const { nodes, kinds } of cycles) {
      const marks = kinds.map((k, i) => (k === 'static' ? null : `${rel(root, nodes[i])} -> ${rel(root, nodes[i + 1])} is ${k === 'type' ? 'type-only' : 'a dynamic import'}`)).filter(Boolean);
      lines.push(`  ${nodes.map((n) => rel(root, n)).join(' -> ')}${marks.length ? `   (${marks.join('; ')})` : ''}`);
    }
    if (found > cycles.length) lines.push(`  … and ${counted ? '' : 'at least '}${found - cycles.length} more cycles among ${component.map((n) => rel(root, n)).sort().join(', ')}`);
  }
  return { lines, count };
}

// ---- main ----------------------------------------------------------------------------------

const { root, listEdges } = parseArgs(process.argv.slice(2));
const parse = await loadLexer();
const pkgPath = join(root, 'package.json');
if (!existsSync(pkgPath)) usage(`no package.json in ${root}`);
const pkg = JSON.parse(readFileSync(pkgPath, 'utf8'));
const { src, out } = sourceAndOutDirs(root);
const isTsSource = (name) => name.endsWith('.ts') && !name.endsWith('.d.ts');
const sources = filesUnder(src, isTsSource);
if (sources.length === 0) usage(`no TypeScript sources under ${rel(root, src) || '.'}`);
if (!existsSync(out)) usage(`${rel(root, out)}/ is missing: build first (npx tsc -p .)`);

/** The lib/ source a dist/ .js file is built from. */
const sourceOf = (built) => join(src, relative(out, built)).replace(/\.js$/, '.ts');
const built = filesUnder(out, (name) => name.endsWith('.js')).filter((file) => existsSync(sourceOf(file)));
/** The dist/ .js file a lib/ source is built to. */
const builtOf = (source) => join(out, relative(src, source)).replace(/\.ts$/, '.js');
const unbuilt = sources.filter((file) => !existsSync(builtOf(file)) || statSync(file).mtimeMs > statSync(builtOf(file)).mtimeMs);
if (unbuilt.length > 0) usage(`not built, or edited since the build: ${unbuilt.map((f) => rel(root, f)).join(', ')} (npx tsc -p .)`);
const scripts = ['bin', 'bench'].flatMap((dir) => filesUnder(join(root, dir), (name) => name.endsWith('.js')));

const runtimeModules = [...built, ...scripts];
const runtimeSet = new Set(runtimeModules);
const runtime = buildGraph({
  parse,
  root,
  pkg,
  modules: runtimeModules,
  toModule: (path) => {
    if (runtimeSet.has(path)) return { module: path };
    if (!existsSync(path)) return { missing: true };
    if (path.startsWith(out + sep) && path.endsWith('.js')) return { stale: `${rel(root, src)}/` };
    return { outside: true }; // JSON, native, other files: not modules of these graphs
  },
});

const sourceSet = new Set(sources);
const typed = buildGraph({
  parse,
  root,
  pkg,
  modules: sources,
  toModule: (path) => {
    // NodeNext: a source imports './x.js' for './x.ts'; a self-reference lands in dist/ (its
    // .js or .d.ts), which maps back to the source.
    let candidate = path.startsWith(out + sep) ? join(src, relative(out, path)) : path;
    candidate = candidate.replace(/\.d\.ts$/, '.ts').replace(/\.js$/, '.ts');
    if (sourceSet.has(candidate)) return { module: candidate };
    if (sourceSet.has(path)) return { module: path };
    return existsSync(path) || existsSync(candidate) ? { outside: true } : { missing: true };
  },
});

const problems = [...runtime.problems, ...typed.problems];
const computed = [...new Set([...runtime.computed, ...typed.computed])];
const runtimeCycles = describeCycles(root, runtime.edges);
const typedCycles = describeCycles(root, typed.edges);
const moduleCount = runtimeModules.length + sources.length;

if (listEdges) {
  for (const [title, graph] of [['what runs', runtime], ['TypeScript sources', typed]]) {
    process.stdout.write(`edges (${title}):\n`);
    for (const [from, targets] of graph.edges) {
      for (const { to, kind } of targets) process.stdout.write(`  ${rel(root, from)} -> ${rel(root, to)}${kind === 'static' ? '' : ` (${kind})`}\n`);
    }
  }
}
if (computed.length > 0) {
  process.stdout.write(`computed dynamic imports (not followed):\n${computed.map((c) => `  ${c}`).join('\n')}\n`);
}
if (problems.length > 0) process.stderr.write(`${problems.map((p) => `check-import-cycles: ${p}`).join('\n')}\n`);
if (runtimeCycles.count + typedCycles.count === 0) {
  process.stdout.write(
    `no import cycles (${moduleCount} modules: ${runtimeModules.length} built and scripts in ${rel(root, out)}/, bin/, bench/; ${sources.length} TypeScript sources in ${rel(root, src)}/)\n`,
  );
  process.exit(problems.length > 0 ? 2 : 0);
}
if (runtimeCycles.count > 0) {
  process.stdout.write(`${runtimeCycles.count} import cycle(s) in what runs (${rel(root, out)}/, bin/, bench/):\n${runtimeCycles.lines.join('\n')}\n`);
}
if (typedCycles.count > 0) {
  process.stdout.write(`${typedCycles.count} import cycle(s) in the TypeScript sources (${rel(root, src)}/, type-only imports included):\n${typedCycles.lines.join('\n')}\n`);
}
process.exit(1);
