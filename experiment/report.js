// The experiment's two reports: a table per run for the terminal, and one self-contained HTML
// page (inline SVG, no script, no server) with the hit rate against agents per policy and the
// next-turn latency CDF per policy.
import { BUCKETS, CAUSES } from './replay.js';

const pct = (x) => `${(100 * x).toFixed(1)}%`;
const ms = (s) => (s >= 10 ? `${s.toFixed(1)} s` : `${(s * 1000).toFixed(s < 0.01 ? 2 : 0)} ms`);
const gb = (bytes) => `${(bytes / 1e9).toFixed(1)}`;
const range = (s, f) => (s.min === s.max ? f(s.mean) : `${f(s.mean)} (${f(s.min)}-${f(s.max)})`);

/** The text tables: one per (preset, agent count). */
export function formatTables(output) {
  const lines = [];
  for (const run of output.runs) {
    const t = run.trace;
    lines.push('');
    lines.push(`${run.preset}, ${run.agents} agents, ${t.source} trace (${t.waits} waits, ${t.agents} agents, ${Math.round(t.lastT)} s), seeds ${output.options.seeds.join(', ')}: mean (min-max)`);
    const header = ['policy', 'hit rate', 'of oracle-jit', 'bytes hit', 'p50', 'p95', 'p99', 'top miss causes', 'wasted GB', 'wasted %', 'peak host GB', 'peak GPU GB'];
    const rows = run.policies.map((p) => {
      const s = p.summary;
      const misses = CAUSES.map((c) => [c, p.seeds.reduce((n, r) => n + r.misses[c], 0)]).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]);
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
    const buckets = run.policies.map((p) => `${p.name.padEnd(widths[0])}  ${BUCKETS.map((b, i) => {
      const wakes = p.seeds.reduce((n, r) => n + r.buckets[i].wakes, 0);
      const hits = p.seeds.reduce((n, r) => n + r.buckets[i].hits, 0);
      return `${b.name} ${wakes > 0 ? pct(hits / wakes) : '-'}`.padEnd(16);
    }).join('')}`);
    lines.push('hit rate by wait length:');
    lines.push(...buckets);
  }
  lines.push('');
  lines.push('Latency is the next turn\'s wait for its context on the GPU (hit: 0 on the GPU, else the H2D copy; miss: load or recompute, with queueing). The cost model is an assumption: docs/experiment.md.');
  return lines.join('\n');
}

const COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf', '#393b79', '#637939', '#8c6d31', '#843c39', '#7b4173'];

function escape(text) {
  return String(text).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);
}

/** An SVG line chart: series [{ name, points: [[x, y]] }], log x when asked. */
function chart({ title, series, xLabel, yLabel, logX = false, yMax = 1, yFormat = pct }) {
  const W = 640;
  const H = 360;
  const L = 60;
  const R = 200;
  const T = 30;
  const B = 40;
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  const fx = logX ? (x) => Math.log10(Math.max(x, 1e-4)) : (x) => x;
  const x0 = Math.min(...xs.map(fx));
  const x1 = Math.max(...xs.map(fx));
  const sx = (x) => L + ((fx(x) - x0) / (x1 - x0 || 1)) * (W - L - R);
  const sy = (y) => T + (1 - y / yMax) * (H - T - B);
  const parts = [`<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" font-family="sans-serif" font-size="11">`];
  parts.push(`<text x="${L}" y="18" font-size="13" font-weight="bold">${escape(title)}</text>`);
  parts.push(`<line x1="${L}" y1="${H - B}" x2="${W - R}" y2="${H - B}" stroke="#000"/><line x1="${L}" y1="${T}" x2="${L}" y2="${H - B}" stroke="#000"/>`);
  for (let i = 0; i <= 4; i++) {
    const y = (yMax * i) / 4;
    parts.push(`<text x="${L - 4}" y="${sy(y) + 4}" text-anchor="end">${escape(yFormat(y))}</text><line x1="${L}" y1="${sy(y)}" x2="${W - R}" y2="${sy(y)}" stroke="#eee"/>`);
  }
  const ticks = logX ? [...new Set(xs.map((x) => Math.floor(fx(x))))].map((e) => 10 ** e) : [...new Set(xs)];
  for (const x of ticks) parts.push(`<text x="${sx(x)}" y="${H - B + 14}" text-anchor="middle">${escape(logX ? ms(x) : x)}</text>`);
  parts.push(`<text x="${(L + W - R) / 2}" y="${H - 6}" text-anchor="middle">${escape(xLabel)}</text>`);
  parts.push(`<text x="14" y="${(T + H - B) / 2}" transform="rotate(-90 14 ${(T + H - B) / 2})" text-anchor="middle">${escape(yLabel)}</text>`);
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length];
    const d = s.points.map((p, j) => `${j === 0 ? 'M' : 'L'}${sx(p[0]).toFixed(1)},${sy(p[1]).toFixed(1)}`).join(' ');
    parts.push(`<path d="${d}" fill="none" stroke="${color}" stroke-width="1.5"/>`);
    parts.push(`<text x="${W - R + 8}" y="${T + 12 * i + 4}" fill="${color}">${escape(s.name)}</text>`);
  });
  parts.push('</svg>');
  return parts.join('');
}

/** The HTML page. */
export function formatHtml(output) {
  const body = [];
  body.push(`<h1>waitprep experiment</h1><p>${escape(output.experiment)}. Trace: ${escape(output.options.trace)}; seeds ${escape(output.options.seeds.join(', '))}. The cost model is an assumption (docs/experiment.md); no GPU was measured.</p>`);
  for (const preset of output.options.presets) {
    const runs = output.runs.filter((r) => r.preset === preset);
    const names = [...new Set(runs.flatMap((r) => r.policies.map((p) => p.name)))];
    body.push(`<h2>${escape(preset)}</h2><p>${escape(output.presets[preset].description)}</p>`);
    if (runs.length > 1) {
      body.push(chart({
        title: `${preset}: hit rate against agents`,
        xLabel: 'agents',
        yLabel: 'hit rate (mean over seeds)',
        // By name: runs merged from several outputs (--from A,B) need not hold the same policies.
        series: names.map((name) => ({ name, points: runs.flatMap((r) => {
          const policy = r.policies.find((p) => p.name === name);
          return policy === undefined ? [] : [[r.agents, policy.summary.hitRate.mean]];
        }) })),
      }));
    }
    for (const run of runs) {
      body.push(chart({
        title: `${preset}, ${run.agents} agents: next-turn latency CDF (seed ${output.options.seeds[0]})`,
        xLabel: 'next-turn latency (log)',
        yLabel: 'fraction of wakes',
        logX: true,
        series: run.policies.map((p) => ({ name: p.name, points: p.seeds[0].latency.cdf.map((x, j, all) => [Math.max(x, 1e-4), j / (all.length - 1)]) })),
      }));
      const rows = run.policies.map((p) => `<tr><td>${escape(p.name)}</td><td>${pct(p.summary.hitRate.mean)}</td><td>${p.summary.hitsOfOracle === null ? '-' : pct(p.summary.hitsOfOracle.mean)}</td><td>${ms(p.summary.latencyP50.mean)}</td><td>${ms(p.summary.latencyP95.mean)}</td><td>${ms(p.summary.latencyP99.mean)}</td><td>${gb(p.summary.wastedBytes.mean)}</td></tr>`);
      body.push(`<table border="1" cellpadding="3"><tr><th>policy</th><th>hit rate</th><th>of oracle</th><th>p50</th><th>p95</th><th>p99</th><th>wasted GB</th></tr>${rows.join('')}</table>`);
    }
  }
  return `<!doctype html><html><head><meta charset="utf-8"><title>waitprep experiment</title></head><body style="font-family:sans-serif;max-width:900px">${body.join('\n')}</body></html>\n`;
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
      const misses = CAUSES.map((c) => [c, p.seeds.reduce((n, r) => n + r.misses[c], 0)]).filter(([, n]) => n > 0).sort((a, b) => b[1] - a[1]);
      const total = misses.reduce((n, [, k]) => n + k, 0);
      const causes = misses.slice(0, 2).map(([c, n]) => `${c} ${pct(n / total)}`).join(', ') || '-';
      lines.push(`| ${name} | ${cells.join(' | ')} | ${pct(s.bytesHitRate.mean)} | ${ms(s.latencyMean.mean)} | ${ms(s.latencyP50.mean)} | ${ms(s.latencyP95.mean)} | ${ms(s.latencyP99.mean)} | ${gb(s.wastedBytes.mean)} (${pct(s.wastedShare.mean)}) | ${causes} |`);
    }
  }
  return lines.join('\n');
}
