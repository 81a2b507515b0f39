// What an experiment's output found, computed from the output object alone (a fresh run's or
// saved ones merged with --from), so that it holds for whatever policies the run compared:
// per (preset, agent count), the policy that had the next turn's context ready most often, set
// against the baseline, the coordinator's default configuration and the bound where the run has
// them. The terminal report ends with these as sentences; --json carries them as data.

/** The baseline every policy is set against: nothing prepared, nothing retained. */
export const BASELINE = 'none';
/** The coordinator's default configuration: one FIFO queue, dedup, one unit in flight. */
export const DEFAULT_POLICY = 'fifo-1';

/**
 * A bound no deployment can run: a policy that knows the future (each wait's true length). Such
 * a policy is named `oracle` or `oracle-<variant>`, or says so with `bound: true`.
 */
export const isBound = (policy) => policy.bound === true || policy.oracle === true || /^oracle(-|$)/.test(policy.name);

/** Hit rates closer than this are a tie (they print the same at one decimal of a percent). */
const TIE = 0.0005;

/** The figures a finding quotes of one policy. */
function figures(policy) {
  const s = policy.summary;
  return {
    name: policy.name,
    description: policy.description,
    hitRate: s.hitRate.mean,
    latencyP95: s.latencyP95.mean,
    peakGpuBytes: s.peakGpuBytes.mean,
    wastedBytes: s.wastedBytes.mean,
  };
}

/**
 * The deployable policy to recommend: the highest mean hit rate; on a tie, the shorter p95
 * next-turn latency, then the less wasted preparation, then report order.
 */
function best(policies) {
  return policies.reduce((a, b) => {
    const [x, y] = [a.summary, b.summary];
    if (Math.abs(x.hitRate.mean - y.hitRate.mean) > TIE) return y.hitRate.mean > x.hitRate.mean ? b : a;
    if (x.latencyP95.mean !== y.latencyP95.mean) return y.latencyP95.mean < x.latencyP95.mean ? b : a;
    return y.wastedBytes.mean < x.wastedBytes.mean ? b : a;
  });
}

/** One finding per (preset, agent count) of `output`, in its order. */
export function findings(output) {
  return output.runs.map((run) => {
    const deployable = run.policies.filter((p) => !isBound(p));
    const bounds = run.policies.filter(isBound);
    const find = (name) => run.policies.find((p) => p.name === name);
    const baseline = find(BASELINE);
    const defaultPolicy = find(DEFAULT_POLICY);
    return {
      preset: run.preset,
      agents: run.agents,
      trace: run.trace.source,
      waits: run.trace.waits,
      seeds: output.options.seeds,
      recommended: deployable.length === 0 ? null : figures(best(deployable)),
      baseline: baseline === undefined ? null : figures(baseline),
      default: defaultPolicy === undefined ? null : figures(defaultPolicy),
      bound: bounds.length === 0 ? null : figures(best(bounds)),
      // Deployable policies by hit rate, best first: what the recommendation was chosen from.
      ranking: [...deployable].sort((a, b) => b.summary.hitRate.mean - a.summary.hitRate.mean).map((p) => p.name),
    };
  });
}

const pct = (x) => `${(100 * x).toFixed(1)}%`;
const ms = (s) => (s === 0 ? '0 ms' : s >= 10 ? `${s.toFixed(1)} s` : `${(s * 1000).toFixed(s < 0.01 ? 2 : 0)} ms`);
const gb = (bytes) => `${(bytes / 1e9).toFixed(1)} GB`;

/** The findings as the sentences that end the terminal report. */
export function findingsText(list) {
  const lines = [];
  for (const f of list) {
    const head = `Finding, ${f.preset} at ${f.agents} agents (${f.trace} trace, ${f.waits} waits, seeds ${f.seeds.join(', ')})`;
    const r = f.recommended;
    if (r === null) {
      lines.push(`${head}: the run compared no deployable policy, only bounds.`);
      continue;
    }
    const against = [];
    if (f.baseline !== null && f.baseline.name !== r.name) against.push(`${pct(f.baseline.hitRate)} (p95 ${ms(f.baseline.latencyP95)}) with no preparation (${f.baseline.name})`);
    if (f.default !== null && f.default.name !== r.name) against.push(`${pct(f.default.hitRate)} with the coordinator's default configuration (${f.default.name})`);
    const bound = f.bound === null ? '' : `; ${f.bound.name}, which knows each wait's length (a greedy bound, not a ceiling), ${pct(f.bound.hitRate)}`;
    lines.push(`${head}: ${r.name} had the next turn's context ready for ${pct(r.hitRate)} of wakes (p95 next-turn latency ${ms(r.latencyP95)})` +
      `${against.length > 0 ? `, against ${against.join(' and ')}` : ''}${bound}.`);
    const costs = [];
    if (r.peakGpuBytes > 0) costs.push(`peak GPU memory held ${gb(r.peakGpuBytes)}`);
    if (r.wastedBytes > 0) costs.push(`preparation no hit used ${gb(r.wastedBytes)}`);
    lines.push(`  Recommended configuration: ${r.name}: ${r.description}${costs.length > 0 ? ` (${costs.join('; ')})` : ''}.`);
  }
  lines.push('What the cost model assumes, the findings across traces and presets, and what this does not cover: docs/experiment.md.');
  return lines.join('\n');
}
