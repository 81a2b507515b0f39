// What `waitprep experiment` says it found, and its HTML page as a reader sees it: the findings
// computed from the output (whatever its policies are called), the terminal table ending with
// them, --json staying one object, the page's charts (at most six named policies each, no colour
// twice, the legend in the order of the lines, axes with units, a sentence each, every column
// explained), and the page rendered to PNG in headless Chromium. Reduced sizes; no figure is
// asserted, only what must hold whatever the figures are.
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { findings, isBound } from '../../experiment/findings.js';
import { NAMED_PER_CHART, formatHtml, formatTables } from '../../experiment/report.js';
import { runExperiment } from '../../experiment/run.js';
import { runsIf } from '../skip-reasons.js';

const root = join(import.meta.dirname, '..', '..');
const bin = join(root, 'bin', 'waitprep.js');
const scratch = mkdtempSync(join(tmpdir(), 'waitprep-experiment-report-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

const base = {
  presets: ['8b-pcie5-nvme'], agents: [10], seconds: 300, seeds: [1], trace: 'generator',
  mooncakeFile: '', sharedPrefixTokens: 0, policies: null, sampleSeconds: 10,
};
/** One agent count: the page draws a latency CDF. */
const one = runExperiment(base);
/** Two presets at two agent counts: the page draws hit rate against agents. */
const two = runExperiment({ ...base, presets: ['8b-pcie5-nvme', '70b-pcie5-host'], agents: [10, 30], seconds: 200 });

type Policy = { name: string; summary: { hitRate: { mean: number }; latencyP95: { mean: number } } };
const hitRate = (p: Policy) => p.summary.hitRate.mean;

describe('experiment findings', () => {
  it('recommend, per run, the deployable policy with the most next turns ready, set against the baseline, the default and the bound', () => {
    const list = findings(two);
    expect(list.map((f) => `${f.preset}/${f.agents}`)).toEqual(two.runs.map((r: { preset: string; agents: number }) => `${r.preset}/${r.agents}`));
    two.runs.forEach((run: { policies: Policy[] }, i: number) => {
      const f = list[i]!;
      const deployable = run.policies.filter((p) => !isBound(p));
      const most = Math.max(...deployable.map(hitRate));
      expect(f.recommended!.hitRate).toBeGreaterThan(most - 0.0005);
      expect(isBound({ name: f.recommended!.name })).toBe(false);
      expect(f.baseline!.name).toBe('none');
      expect(f.default!.name).toBe('fifo-1');
      expect(f.bound!.name).toBe('oracle-jit');
      expect(f.ranking).toEqual([...deployable].sort((a, b) => hitRate(b) - hitRate(a)).map((p) => p.name));
    });
  });

  it('hold for other policy names: a bound called oracle-<variant>, a new policy, no baseline or default', () => {
    const run = structuredClone(one.runs[0]) as { policies: Array<Policy & { description: string }> };
    const best = [...run.policies].sort((a, b) => hitRate(b) - hitRate(a));
    // A new deployable policy that beats every other, and the oracle renamed.
    const deployable = best.filter((p) => !isBound(p));
    const planner = { ...structuredClone(deployable[0]!), name: 'planner-x', description: 'a planner' };
    // Every other deployable policy a point below the new one, which stays at most 1.
    for (const p of deployable) p.summary.hitRate.mean = Math.min(hitRate(p), 0.98);
    planner.summary.hitRate.mean = 0.99;
    run.policies = [...run.policies.filter((p) => !['none', 'fifo-1'].includes(p.name)).map((p) => (p.name === 'oracle-jit' ? { ...p, name: 'oracle-x' } : p)), planner];
    const [f] = findings({ ...one, runs: [run] });
    expect(f!.recommended!.name).toBe('planner-x');
    expect(f!.bound!.name).toBe('oracle-x');
    expect(f!.baseline).toBeNull();
    expect(f!.default).toBeNull();
  });

  it('end the terminal table: one finding per run, its recommended configuration, and where the model and its limits are', () => {
    const text = formatTables(one);
    const [f] = findings(one);
    const tail = text.trimEnd().split('\n').slice(-3);
    expect(tail[0]).toMatch(new RegExp(`^Finding, 8b-pcie5-nvme at 10 agents \\(generator trace, \\d+ waits, seeds 1\\): ${f!.recommended!.name.replace(/[+]/g, '\\+')} had the next turn's context ready for \\d+\\.\\d% of wakes`));
    expect(tail[0]).toContain('with no preparation (none)');
    expect(tail[1]).toMatch(/^ {2}Recommended configuration: /);
    expect(tail[2]).toMatch(/docs\/experiment\.md\.$/);
  });

  it('--json prints one object with the findings as data and no sentence; the table prints the sentences', () => {
    const args = ['experiment', '--agents', '10', '--seconds', '200', '--seeds', '1', '--policies', 'none,keep-gpu-2s,fifo-1,oracle-jit', '--quiet'];
    const json = execFileSync(process.execPath, [bin, ...args, '--json'], { encoding: 'utf8', timeout: 120_000 });
    const output = JSON.parse(json);
    expect(output.findings).toHaveLength(1);
    expect(output.findings[0]).toMatchObject({ preset: '8b-pcie5-nvme', agents: 10, baseline: { name: 'none' }, default: { name: 'fifo-1' }, bound: { name: 'oracle-jit' } });
    expect(json).not.toMatch(/Finding|Recommended/);
    const text = execFileSync(process.execPath, [bin, ...args], { encoding: 'utf8', timeout: 120_000 });
    expect(text).toContain(`Recommended configuration: ${output.findings[0].recommended.name}: `);
  });
});

/** The page's charts: per chart its SVG, and what follows it up to its caption's end. */
function charts(page: string): Array<{ svg: string; caption: string }> {
  return [...page.matchAll(/<figure>(<svg[\s\S]*?<\/svg>)<figcaption>([\s\S]*?)<\/figcaption><\/figure>/g)].map((m) => ({ svg: m[1]!, caption: m[2]! }));
}

describe('experiment HTML report', () => {
  const pages = { cdf: formatHtml(one), 'hit-rate': formatHtml(two) };

  it('draws one chart per preset, each with a sentence of what it shows', () => {
    expect(charts(pages.cdf)).toHaveLength(1);
    expect(charts(pages['hit-rate'])).toHaveLength(2);
    for (const page of Object.values(pages)) {
      for (const { caption } of charts(page)) expect(caption).toMatch(/^At [\d,]+ agents .+\./);
      expect(page).not.toMatch(/NaN|undefined/);
    }
  });

  it('names at most six policies per chart, each in its own colour, the others grey; the legend lists them as the lines run', () => {
    for (const page of Object.values(pages)) {
      for (const { svg, caption } of charts(page)) {
        // Legend entries: a short coloured line, then the name.
        const legend = [...svg.matchAll(/<line x1="[\d.]+" y1="([\d.]+)" x2="[\d.]+" y2="[\d.]+" stroke="(#[0-9a-fA-F]{6})" stroke-width="2\.2"[^>]*\/><text[^>]*>([^<]+)<\/text>/g)]
          .map((m) => ({ y: Number(m[1]), color: m[2]!, name: m[3]! }));
        expect(legend.length).toBeGreaterThan(0);
        expect(legend.length).toBeLessThanOrEqual(NAMED_PER_CHART);
        expect(new Set(legend.map((l) => l.color)).size).toBe(legend.length);
        // Each named line is drawn in its legend colour; grey lines are the others, listed in the caption.
        const drawn = [...svg.matchAll(/<path d="([^"]+)" fill="none" stroke="(#[0-9a-fA-F]{6})" stroke-width="([\d.]+)"/g)];
        const named = drawn.filter((m) => m[3] === '2.2');
        expect(new Set(named.map((m) => m[2]))).toEqual(new Set(legend.map((l) => l.color)));
        const grey = drawn.filter((m) => m[3] === '1');
        if (grey.length > 0) expect(caption).toMatch(/Grey, not named: [\w+-]+(, [\w+-]+)*\./);
        // Legend order: the lines top to bottom (smaller y first) where they end (hit rate against
        // agents) or where they leave the left edge (a CDF: the share of wakes that waited nothing).
        const cdf = !svg.includes('ready, against agents');
        const yOf = (color: string) => {
          const points = [...named.find((m) => m[2] === color)![1]!.matchAll(/[ML]([\d.]+),([\d.]+)/g)].map((p) => [Number(p[1]), Number(p[2])] as const);
          return cdf ? Math.min(...points.filter(([x]) => x === points[0]![0]).map(([, y]) => y)) : points.at(-1)![1];
        };
        const order = legend.map((l) => yOf(l.color));
        expect([...order].sort((a, b) => a - b)).toEqual(order);
        // Not all at one height: the check orders something.
        if (legend.length > 2) expect(new Set(order).size).toBeGreaterThan(1);
      }
    }
  });

  it('labels both axes with their units', () => {
    const [cdf] = charts(pages.cdf);
    expect(cdf!.svg).toContain('>next-turn latency: wait for the context on the GPU (log scale; 0 is drawn at 0.1 ms)</text>');
    expect(cdf!.svg).toMatch(/>wakes waiting at most that long \(% of wakes, seed 1\)<\/text>/);
    expect(cdf!.svg).toMatch(/>0\.1 ms<\/text>/);
    const [rate] = charts(pages['hit-rate']);
    expect(rate!.svg).toContain('>agents</text>');
    expect(rate!.svg).toContain('>next turns with context ready (% of wakes)</text>');
    for (const { svg } of [cdf!, rate!]) expect(svg).toMatch(/>100%<\/text>/);
  });

  it('explains every column of its tables on the page', () => {
    for (const page of Object.values(pages)) {
      const headers = new Set([...page.matchAll(/<th>([^<]+)<\/th>/g)].map((m) => m[1]!));
      const explained = [...page.matchAll(/<dt><b>([^<]+)<\/b><\/dt>/g)].flatMap((m) => m[1]!.split(/, /));
      for (const header of headers) if (header !== 'policy') expect(explained, header).toContain(header);
      expect(page).toMatch(/of oracle<\/b><\/dt><dd>[^<]*above 100% means this policy beat it/);
    }
  });
});

/** Chromium's command on this machine, or null. */
const chromium = ['chromium', 'chromium-browser', 'google-chrome'].find((c) => spawnSync(c, ['--version'], { stdio: 'ignore' }).status === 0) ?? null;

describe.runIf(runsIf('experiment report rendered to PNG', [chromium !== null, 'Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)']))('experiment HTML report in headless Chromium', () => {
  // WAITPREP_REPORT_PNG_DIR keeps the pictures (CI's artifacts, or a person's look); else a scratch folder.
  const out = process.env.WAITPREP_REPORT_PNG_DIR ?? join(scratch, 'png');
  mkdirSync(out, { recursive: true });

  it.each([['cdf', one], ['hit-rate', two]] as const)('renders the %s page to a PNG of its full size', (name, output) => {
    const html = join(scratch, `experiment-${name}.html`);
    const png = join(out, `experiment-${name}.png`);
    writeFileSync(html, formatHtml(output));
    const run = spawnSync(chromium!, ['--headless', '--no-sandbox', '--disable-gpu', '--hide-scrollbars', '--window-size=1000,2600', `--screenshot=${png}`, `file://${html}`], { encoding: 'utf8', timeout: 120_000 });
    expect(run.status, run.stderr).toBe(0);
    const bytes = readFileSync(png);
    expect(bytes.subarray(0, 8).toString('hex')).toBe('89504e470d0a1a0a');
    expect([bytes.readUInt32BE(16), bytes.readUInt32BE(20)]).toEqual([1000, 2600]);
    console.log(`experiment report: ${png}`);
  }, 150_000);
});
