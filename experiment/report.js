// The experiment's reports: a table per run for the terminal, ending with the run's findings;
// Markdown tables (what docs/experiment.md quotes); and one self-contained HTML page (inline SVG,
// no script, no server) with one chart per preset and a table per run. They read only the output
// object, whatever policies, miss causes and wait-length buckets it holds.
import { BASELINE, DEFAULT_POLICY, findings, findingsText, isBound } from './findings.js';

const pct = (x) => `${(100 * x).toFixed(1)}%`;
const ms = (s) => (s >= 10 ? `${s.toFixed(1)} s` : `${(s * 1000).toFixed(s < 0.01 ? 2 : 0)} ms`);
const gb = (bytes) => `${(bytes / 1e9).toFixed(1)}`;
const range = (s, f) => (s.min === s.max ? f(s.mean) : `${f(s.mean)} (${f(s.min)}-${f(s.max)})`);

/** Miss causes as the replays counted them, in their order: each seed's `misses` has every cause. */
const causesOf = (policy) => Object.keys(policy.seeds[0]?.misses ?? {});

/** The text tables: one per (preset, agent count), then the findings. */
export function formatTables(output) {
  const lines = [];
  for (const run of output.runs) {
    const t = run.trace;
    lines.push('');
    lines.push(`${run.preset}, ${run.agents} agents, ${t.source} trace (${t.waits} waits, ${t.agents} agents, ${Math.round(t.lastT)} s), seeds ${output.options.seeds.join(', ')}: mean (min-max)`);
    const header = ['policy', 'hit rate', 'of oracle-jit', 'bytes hit', 'p50', 'p95', 'p99', 'top miss causes', 'wasted GB', 'wasted %', 'peak host GB', 'peak GPU GB'];
    const rows = run.policies.map((p) => {
      const s = p.summary;
      const misses = causesOf(p).map((c) => [c, p.seeds.reduce((n, r) => n + r.misses[c], 0)]).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]);
      const missTotal = misses.reduce((n, [, k]) => n + k, 0);
      return [
        p.name,
        range(s.hitRate, pct),
        s.hitsOfOracle === null ? '-' : pct(s.hitsOfOracle.mean),
        pct(s.bytesHitRate.mean),
        ms(s.latencyP50.mean),
        ms(s.latencyP95.mean),
        ms(s.latencyP99.mean),
        misses.slice(0, 2).map(([c, n]) => `${c} ${pct(n / missTotal)}`).join(', ') || '-',
        gb(s.wastedBytes.mean),
        pct(s.wastedShare.mean),
        gb(s.peakArenaBytes.mean),
        gb(s.peakGpuBytes.mean),
      ];
    });
    const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
    const format = (r) => r.map((cell, i) => (i === 0 || i === 7 ? cell.padEnd(widths[i]) : cell.padStart(widths[i]))).join('  ');
    lines.push(format(header));
    for (const r of rows) lines.push(format(r));
    const buckets = run.policies.map((p) => `${p.name.padEnd(widths[0])}  ${p.seeds[0].buckets.map((b, i) => {
      const wakes = p.seeds.reduce((n, r) => n + r.buckets[i].wakes, 0);
      const hits = p.seeds.reduce((n, r) => n + r.buckets[i].hits, 0);
      return `${b.name} ${wakes > 0 ? pct(hits / wakes) : '-'}`.padEnd(16);
    }).join('')}`);
    lines.push('hit rate by wait length:');
    lines.push(...buckets);
  }
  lines.push('');
  lines.push('hit rate: wakes whose next turn found its context ready (hits / wakes). of oracle: hits over the oracle\'s on the same seed (above 100% where a policy beats the greedy oracle, which is not an upper bound).');
  lines.push('Latency is the next turn\'s wait for its context on the GPU (hit: 0 on the GPU, else the H2D copy; miss: load or recompute, with queueing). The cost model is an assumption: docs/experiment.md.');
  lines.push('');
  lines.push(findingsText(output.findings ?? findings(output)));
  return lines.join('\n');
}

/**
 * The HTML page's colours: six that stay apart for readers with a colour-vision deficiency
 * (Okabe and Ito's palette without its yellow, too faint on white, and its orange, too near its
 * vermillion on a thin line). Each named policy of a chart gets its own; the others are grey.
 */
const PALETTE = ['#0072B2', '#D55E00', '#009E73', '#CC79A7', '#000000', '#56B4E9'];
const GREY = '#c8c8c8';
/** At most this many policies are named (coloured, in the legend) per chart. */
export const NAMED_PER_CHART = PALETTE.length;

function escape(text) {
  return String(text).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
}

/**
 * The policies a preset's chart names: the recommended one, the baseline, the coordinator's
 * default and any bound, then the rest by hit rate, up to {@link NAMED_PER_CHART}; by hit rate,
 * highest first (each chart then orders its legend as its lines). A policy's hit rate is the one
 * at the largest agent count that ran it: runs merged with --from need not hold the same policies.
 */
function namedPolicies(runs, finding) {
  const rate = new Map();
  const bounds = new Set();
  for (const run of [...runs].sort((a, b) => a.agents - b.agents)) {
    for (const p of run.policies) {
      rate.set(p.name, p.summary.hitRate.mean);
      if (isBound(p)) bounds.add(p.name);
    }
  }
  const ranked = [...rate.keys()].sort((a, b) => rate.get(b) - rate.get(a));
  const wanted = [finding.recommended?.name, BASELINE, DEFAULT_POLICY, ...bounds].filter((name) => rate.has(name));
  const named = new Set([...new Set([...wanted, ...ranked])].slice(0, NAMED_PER_CHART));
  return { named: ranked.filter((name) => named.has(name)), bounds };
}

/** Log-scale ticks: the decades from `lo` up to the first at or above `hi`. */
function decades(lo, hi) {
  const ticks = [];
  for (let e = Math.floor(Math.log10(lo)); ticks.length === 0 || ticks.at(-1) < hi * 0.9999; e++) ticks.push(10 ** e);
  return ticks;
}

/**
 * An SVG line chart. `series`: [{ name, points: [[x, y]], color (null: grey, unnamed), dashed }],
 * drawn grey first; `legend`: the named series' names in the order the legend lists them. y is a
 * share (0..1), printed as a percentage.
 */
function chart({ label, series, legend, xLabel, yLabel, xTicks, xFormat, logX }) {
  const W = 860;
  const H = 400;
  const L = 64;
  const R = 220;
  const T = 16;
  const B = 58;
  const xs = [...xTicks, ...series.flatMap((s) => s.points.map((p) => p[0]))];
  const fx = logX ? (x) => Math.log10(x) : (x) => x;
  const x0 = Math.min(...xs.map(fx));
  const x1 = Math.max(...xs.map(fx));
  const sx = (x) => L + ((fx(x) - x0) / (x1 - x0 || 1)) * (W - L - R);
  const sy = (y) => T + (1 - y) * (H - T - B);
  const parts = [`<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="${escape(label)}" width="${W}" height="${H}" font-family="sans-serif" font-size="12">`];
  for (let i = 0; i <= 5; i++) {
    const y = i / 5;
    parts.push(`<line x1="${L}" y1="${sy(y)}" x2="${W - R}" y2="${sy(y)}" stroke="#eee"/><text x="${L - 6}" y="${sy(y) + 4}" text-anchor="end">${100 * y}%</text>`);
  }
  for (const x of xTicks) {
    parts.push(`<line x1="${sx(x).toFixed(1)}" y1="${H - B}" x2="${sx(x).toFixed(1)}" y2="${H - B + 4}" stroke="#000"/><text x="${sx(x).toFixed(1)}" y="${H - B + 17}" text-anchor="middle">${escape(xFormat(x))}</text>`);
  }
  parts.push(`<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#000"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="#000"/>`);
  parts.push(`<text x="${(L + W - R) / 2}" y="${H - 14}" text-anchor="middle">${escape(xLabel)}</text>`);
  parts.push(`<text x="16" y="${(T + H - B) / 2}" transform="rotate(-90 16 ${(T + H - B) / 2})" text-anchor="middle">${escape(yLabel)}</text>`);
  const path = (s) => s.points.map((p, j) => `${j === 0 ? 'M' : 'L'}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(' ');
  for (const s of series.filter((s) => s.color === null)) parts.push(`<path d="${path(s)}" fill="none" stroke="${GREY}" stroke-width="1"/>`);
  const named = new Map(series.filter((s) => s.color !== null).map((s) => [s.name, s]));
  for (const name of [...legend].reverse()) {
    const s = named.get(name);
    const dots = s.points.length === 1 ? `<circle cx="${sx(s.points[0][0]).toFixed(1)}" cy="${sy(s.points[0][1]).toFixed(1)}" r="3" fill="${s.color}"/>` : '';
    parts.push(`<path d="${path(s)}" fill="none" stroke="${s.color}" stroke-width="2.2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/>${dots}`);
  }
  legend.forEach((name, i) => {
    const s = named.get(name);
    const y = T + 10 + 20 * i;
    parts.push(`<line x1="${W - R + 14}" y1="${y}" x2="${W - R + 40}" y2="${y}" stroke="${s.color}" stroke-width="2.2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/><text x="${W - R + 46}" y="${y + 4}">${escape(name)}</text>`);
  });
  if (series.some((s) => s.color === null)) {
    const y = T + 10 + 20 * legend.length;
    parts.push(`<line x1="${W - R + 14}" y1="${y}" x2="${W - R + 40}" y2="${y}" stroke="${GREY}" stroke-width="1"/><text x="${W - R + 46}" y="${y + 4}" fill="#666">others (below)</text>`);
  }
  parts.push('</svg>');
  return parts.join('');
}

const pctText = (x) => `${(100 * x).toFixed(1)}%`;
const agentsText = (n) => n.toLocaleString('en-US');

/**
 * A preset's one chart: the share of next turns ready against agents when the preset ran at
 * several agent counts, else the next-turn latency CDF at its one count; with the sentence that
 * says what it shows.
 */
function presetChart(preset, runs, finding, colorOf) {
  const last = runs.reduce((a, b) => (b.agents > a.agents ? b : a));
  const { named, bounds } = namedPolicies(runs, finding);
  const names = [...new Set(runs.flatMap((r) => r.policies.map((p) => p.name)))];
  const style = (name) => ({ color: named.includes(name) ? colorOf(name) : null, dashed: bounds.has(name) });
  const grey = names.filter((name) => !named.includes(name));
  const summaryOf = (name) => last.policies.find((p) => p.name === name).summary;
  // A run of bounds alone has nothing to recommend: its sentence then speaks of the bound.
  const r = finding.recommended ?? finding.bound;
  const others = [finding.baseline, finding.default, finding.bound].filter((f) => f !== null && f.name !== r.name);
  let svg;
  let sentence;
  if (runs.length > 1) {
    const counts = runs.map((run) => run.agents).sort((a, b) => a - b);
    const logX = counts[counts.length - 1] / counts[0] >= 10;
    const series = names.map((name) => ({
      name,
      ...style(name),
      // By name: runs merged from several outputs (--from A,B) need not hold the same policies.
      points: runs.flatMap((run) => {
        const policy = run.policies.find((p) => p.name === name);
        return policy === undefined ? [] : [[run.agents, policy.summary.hitRate.mean]];
      }).sort((a, b) => a[0] - b[0]),
    }));
    // The legend lists the lines top to bottom as they end (each at its largest agent count).
    const end = new Map(series.map((line) => [line.name, line.points.at(-1)[1]]));
    const legend = [...named].sort((a, b) => end.get(b) - end.get(a));
    svg = chart({
      label: `${preset}: next turns with their context ready, against agents`,
      xLabel: `agents${logX ? ' (log scale)' : ''}`,
      yLabel: 'next turns with context ready (% of wakes)',
      xTicks: counts,
      xFormat: agentsText,
      logX,
      legend,
      series,
    });
    const first = runs.reduce((a, b) => (b.agents < a.agents ? b : a)).policies.find((p) => p.name === r.name);
    sentence = `At ${agentsText(last.agents)} agents ${r.name} has the most next turns ready, ${pctText(r.hitRate)}` +
      `${others.length > 0 ? `, against ${others.map((f) => `${pctText(f.hitRate)} for ${f.name}`).join(', ')}` : ''}` +
      `${first === undefined ? '' : `; at ${agentsText(counts[0])} agents it has ${pctText(first.summary.hitRate.mean)}`}.`;
  } else {
    const lo = 1e-4;
    const hi = Math.max(lo * 10, ...last.policies.flatMap((p) => p.seeds[0].latency.cdf));
    // The legend lists the lines top to bottom as they rise: by the share of wakes that waited
    // nothing (the first point), then by the median wait.
    const cdfOf = (name) => last.policies.find((p) => p.name === name).seeds[0].latency.cdf;
    const atZero = (name) => cdfOf(name).filter((x) => x <= lo).length / cdfOf(name).length;
    const legend = [...named].sort((a, b) => atZero(b) - atZero(a) || summaryOf(a).latencyP50.mean - summaryOf(b).latencyP50.mean);
    svg = chart({
      label: `${preset}, ${agentsText(last.agents)} agents: next-turn latency CDF`,
      xLabel: 'next-turn latency: wait for the context on the GPU (log scale; 0 is drawn at 0.1 ms)',
      yLabel: `wakes waiting at most that long (% of wakes, seed ${last.policies[0].seeds[0].seed})`,
      xTicks: decades(lo, hi),
      xFormat: (s) => (s < 1 ? `${+(s * 1000).toPrecision(3)} ms` : `${s} s`),
      logX: true,
      legend,
      series: last.policies.map((p) => ({
        name: p.name,
        ...style(p.name),
        points: p.seeds[0].latency.cdf.map((x, j, all) => [Math.max(x, lo), j / (all.length - 1)]),
      })),
    });
    const wait = (s) => (s === 0 ? '0 ms' : ms(s));
    const best = summaryOf(r.name);
    sentence = `At ${agentsText(last.agents)} agents half of ${r.name}'s next turns wait at most ${wait(best.latencyP50.mean)} for their context and 95% at most ${wait(best.latencyP95.mean)}` +
      `${others.length > 0 ? `, against ${others.map((f) => `${wait(summaryOf(f.name).latencyP50.mean)} and ${wait(summaryOf(f.name).latencyP95.mean)} for ${f.name}`).join(', ')}` : ''}. A curve higher and further left is better.`;
  }
  const greyText = grey.length > 0 ? ` Grey, not named: ${grey.join(', ')}.` : '';
  return `<figure>${svg}<figcaption>${escape(sentence)}${escape(greyText)} Dashed: a bound that knows each wait's length, which no deployment can.</figcaption></figure>`;
}

/** What each column of the page's tables means. */
const COLUMNS = [
  ['hit rate', 'the share of wakes whose next turn found its context ready (hits / wakes): kept on the GPU, or prepared into the host arena or device pool before the tool call returned. Mean over the seeds, with (min-max) when they differ.'],
  ['of oracle', "this policy's hits divided by the oracle's hits on the same seed, mean over the seeds. The oracle knows each wait's length and the tier's bandwidth but not the memory later waits will need, so it is a greedy bound, not a ceiling: above 100% means this policy beat it there."],
  ['p50, p95, p99', "next-turn latency percentiles of each seed's wakes, mean over the seeds: the time until the context is on the GPU (0 when kept there, the host-to-device copy for a host hit, the load or recompute with queueing for a miss)."],
  ['wasted GB', 'bytes prepared that no hit used (evicted or never used, or stopped part-way), mean over the seeds.'],
  ['peak host GB, peak GPU GB', "the most the host arena (with staging) and the GPUs (retained KV and device pools) held at once, mean over the seeds' peaks."],
];

/** The HTML page: what was run, the findings, how to read it, then one chart and a table per run for each preset. */
export function formatHtml(output) {
  const found = output.findings ?? findings(output);
  const body = [];
  body.push(`<h1>waitprep experiment</h1><p>${escape(output.experiment)}. Trace: ${escape(output.options.trace)}; seeds ${escape(output.options.seeds.join(', '))}. Every cost is a parameter of the cost model, most of them assumptions (docs/experiment.md); no GPU was measured.</p>`);
  body.push(`<h2>Findings</h2>${findingsText(found).split('\n').map((line) => `<p>${escape(line.trim())}</p>`).join('')}`);
  body.push(`<h2>How to read the tables</h2><dl>${COLUMNS.map(([name, what]) => `<dt><b>${escape(name)}</b></dt><dd>${escape(what)}</dd>`).join('')}</dl>`);
  for (const preset of output.options.presets) {
    const runs = output.runs.filter((r) => r.preset === preset);
    if (runs.length === 0) continue;
    const last = runs.reduce((a, b) => (b.agents > a.agents ? b : a));
    const finding = found.find((f) => f.preset === preset && f.agents === last.agents);
    // One colour per named policy for the whole preset, so the tables can show it too.
    const colors = new Map(namedPolicies(runs, finding).named.map((name, i) => [name, PALETTE[i]]));
    body.push(`<h2>${escape(preset)}</h2><p>${escape(output.presets[preset].description)}</p>`);
    body.push(presetChart(preset, runs, finding, (name) => colors.get(name)));
    for (const run of runs) {
      const rows = run.policies.map((p) => {
        const s = p.summary;
        const swatch = colors.has(p.name) ? `<span style="color:${colors.get(p.name)}">&#9632;</span> ` : '';
        return `<tr><td>${swatch}${escape(p.name)}</td><td>${range(s.hitRate, pct)}</td><td>${s.hitsOfOracle === null ? '-' : pct(s.hitsOfOracle.mean)}</td>` +
          `<td>${ms(s.latencyP50.mean)}</td><td>${ms(s.latencyP95.mean)}</td><td>${ms(s.latencyP99.mean)}</td><td>${gb(s.wastedBytes.mean)}</td><td>${gb(s.peakArenaBytes.mean)}</td><td>${gb(s.peakGpuBytes.mean)}</td></tr>`;
      });
      body.push(`<h3>${escape(preset)}, ${agentsText(run.agents)} agents (${run.trace.waits} waits)</h3>` +
        '<table><tr><th>policy</th><th>hit rate</th><th>of oracle</th><th>p50</th><th>p95</th><th>p99</th><th>wasted GB</th><th>peak host GB</th><th>peak GPU GB</th></tr>' +
        `${rows.join('')}</table>`);
    }
  }
  const css = 'body{font-family:sans-serif;max-width:900px;margin:1em auto;color:#222}table{border-collapse:collapse;font-size:13px}' +
    'td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child,th:first-child{text-align:left}figure{margin:1em 0}figcaption{font-size:14px;max-width:860px}dd{margin:0 0 .5em 1.5em}';
  return `<!doctype html><html><head><meta charset="utf-8"><title>waitprep experiment</title><style>${css}</style></head><body>${body.join('\n')}</body></html>\n`;
}

/**
 * Markdown tables, one per preset (docs/experiment.md quotes them): per agent count the hit rate,
 * mean (min-max) over the seeds, with hits as a fraction of oracle-jit's; then, at the largest
 * agent count, the bytes-weighted hit rate, latency mean and percentiles, wasted bytes (and their
 * share of prepared bytes) and the two commonest miss causes.
 */
export function formatMarkdown(output) {
  const lines = [];
  for (const preset of output.options.presets) {
    const runs = output.runs.filter((r) => r.preset === preset);
    // The largest agent count, wherever it stands in the list.
    const last = runs.reduce((a, b) => (b.agents > a.agents ? b : a));
    lines.push('');
    lines.push(`**${preset}**, ${last.trace.source} trace, seeds ${output.options.seeds.join(', ')}; latency and misses at ${last.agents} agents (${last.trace.waits} waits):`);
    lines.push('');
    lines.push(`| policy | ${runs.map((r) => `hit rate, ${r.agents} agents (of oracle-jit)`).join(' | ')} | bytes hit | mean | p50 | p95 | p99 | wasted GB (share) | commonest miss causes |`);
    lines.push(`|---|${runs.map(() => '---|').join('')}---|---|---|---|---|---|---|`);
    // Every policy of any run, by name, '-' where a run lacks it: runs merged from several outputs may.
    for (const name of [...new Set(runs.flatMap((r) => r.policies.map((p) => p.name)))]) {
      const cells = runs.map((r) => {
        const s = r.policies.find((q) => q.name === name)?.summary;
        if (s === undefined) return '-';
        return `${range(s.hitRate, pct)}${s.hitsOfOracle === null ? '' : ` (${s.hitsOfOracle.mean.toFixed(2)})`}`;
      });
      const p = last.policies.find((q) => q.name === name);
      if (p === undefined) {
        lines.push(`| ${name} | ${cells.join(' | ')} | - | - | - | - | - | - | - |`);
        continue;
      }
      const s = p.summary;
      const misses = causesOf(p).map((c) => [c, p.seeds.reduce((n, r) => n + r.misses[c], 0)]).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]);
      const total = misses.reduce((n, [, k]) => n + k, 0);
      const causes = misses.slice(0, 2).map(([c, n]) => `${c} ${pct(n / total)}`).join(', ') || '-';
      lines.push(`| ${name} | ${cells.join(' | ')} | ${pct(s.bytesHitRate.mean)} | ${ms(s.latencyMean.mean)} | ${ms(s.latencyP50.mean)} | ${ms(s.latencyP95.mean)} | ${ms(s.latencyP99.mean)} | ${gb(s.wastedBytes.mean)} (${pct(s.wastedShare.mean)}) | ${causes} |`);
    }
  }
  return lines.join('\n');
}
