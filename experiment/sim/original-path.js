// The engine's original path for a wake that missed: load the context's KV from the source tier
// (over the source link and the engine's H2D link) or recompute it (prefill on the engine, first
// come first served behind the recomputes already queued there), whichever the engine's estimate
// as things stand says is faster. A prefill's time counts attention's quadratic term
// (presets.js prefillFlops); the resident shared prefix is neither moved nor recomputed.
import { MODELS, prefillFlops } from '../presets.js';
import { arrive } from './accounting.js';

export class OriginalPath {
  constructor(sim) {
    this.sim = sim;
    this.model = MODELS[sim.preset.model];
    this.gpuBusyUntil = new Array(sim.preset.engines).fill(0);
  }

  /** Seconds of prefill on one engine to rebuild `w`'s context. */
  recomputeSeconds(w) {
    const { preset } = this.sim;
    const cached = preset.sharedPrefixResident ? Math.min(w.sharedTokens, w.tokens) : 0;
    return prefillFlops(this.model, w.tokens, cached) / preset.engineFlopsPerSec;
  }

  /** Starts `w`'s miss path on engine `e`; `arrive(w)` when its KV is on the GPU. */
  run(w, e) {
    const sim = this.sim;
    const { q, preset, net, source, h2d } = sim;
    if (w.bytes === 0) {
      arrive(sim, w);
      return;
    }
    // The engine's estimates as things stand: a load gets its share of the links as they are
    // now busy, a recompute waits behind the recomputes already queued on its engine.
    const loadRate = Math.min(preset.perUnitBytesPerSec, source.bytesPerSec / (source.count + 1), h2d[e].bytesPerSec / (h2d[e].count + 1));
    const loadEstimate = preset.unitOverheadSec + w.bytes / loadRate;
    const recompute = this.recomputeSeconds(w);
    if (loadEstimate <= Math.max(0, this.gpuBusyUntil[e] - q.now) + recompute) {
      w.path = 'load';
      q.after(preset.unitOverheadSec, () => net.transfer(w.bytes, [source, h2d[e]], preset.perUnitBytesPerSec, () => arrive(sim, w)));
    } else {
      w.path = 'recompute';
      this.gpuBusyUntil[e] = Math.max(q.now, this.gpuBusyUntil[e]) + recompute;
      q.at(this.gpuBusyUntil[e], arrive.bind(null, sim), w);
    }
  }
}
