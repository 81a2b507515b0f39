// The experiment's cost model: every parameter by name, in one place, with the presets.
// docs/experiment.md § Cost model gives the source of each value, or labels it an assumption;
// the `SOURCES` table below is the same list in short, and the report prints it.
//
// Units: bytes, seconds, bytes per second, tokens per second. GB = 1e9 bytes, GiB = 2^30.

const GB = 1e9;
const GiB = 2 ** 30;
const MiB = 2 ** 20;

/**
 * Model geometries. `kvBytesPerToken` derives the KV bytes of one token: for grouped-query or
 * multi-head attention layers x KV heads x head dim x 2 (K and V) x dtype bytes; for MLA
 * (multi-head latent attention) layers x (latent rank + decoupled RoPE dim) x dtype bytes, one
 * compressed latent per token and layer instead of K and V per head.
 */
export const MODELS = Object.freeze({
  'llama-3.1-8b': Object.freeze({ params: 8.0e9, layers: 32, heads: 32, kvHeads: 8, headDim: 128, dtypeBytes: 2 }),
  'llama-3.1-70b': Object.freeze({ params: 70.6e9, layers: 80, heads: 64, kvHeads: 8, headDim: 128, dtypeBytes: 2 }),
  'deepseek-v3': Object.freeze({
    params: 37e9 /* active per token */, totalParams: 671e9, layers: 61, heads: 128, qkHeadDim: 192, vHeadDim: 128,
    mla: Object.freeze({ latentRank: 512, ropeDim: 64 }), dtypeBytes: 2,
  }),
});

/** KV-cache bytes per token of a model geometry (see MODELS). */
export function kvBytesPerToken(model) {
  if (model.mla !== undefined) return model.layers * (model.mla.latentRank + model.mla.ropeDim) * model.dtypeBytes;
  return model.layers * model.kvHeads * model.headDim * 2 * model.dtypeBytes;
}

/**
 * Prefill tokens per second of one GPU from the linear term alone: 2 x (active) parameters FLOPs
 * per token at a model FLOPs utilisation. `prefillFlops` adds attention's quadratic term.
 */
export function prefillTokensPerSecond(model, gpuDenseFlops, mfu) {
  return (gpuDenseFlops * mfu) / (2 * model.params);
}

/**
 * FLOPs of a prefill that computes tokens `cached` to `tokens` of a context whose first `cached`
 * are already on the GPU: 2 x parameters per new token, plus causal attention over everything
 * before each new token, QK^T and AV: layers x heads x (qk dim + v dim) x (tokens^2 - cached^2)
 * (each new token i reads i earlier ones, 2 FLOPs per multiply-add, summed over i). For Llama 3.1
 * 8B the quadratic term adds about 20% at 12k tokens and 100% at 60k.
 */
export function prefillFlops(model, tokens, cached = 0) {
  const fresh = Math.max(0, tokens - cached);
  const qk = model.qkHeadDim ?? model.headDim;
  const v = model.vHeadDim ?? model.headDim;
  return 2 * model.params * fresh + model.layers * model.heads * (qk + v) * (tokens * tokens - cached * cached);
}

/**
 * KV-cache bytes one engine can hold (its "KV capacity"): per GPU, the memory the engine may use
 * (`memoryUtilization` of it, as vLLM's gpu_memory_utilization) less its share of the weights
 * and an activation and workspace reserve, times the GPUs of the engine.
 */
export function kvCapacityPerEngine(p, model) {
  const weightsPerGpu = ((model.totalParams ?? model.params) * model.dtypeBytes) / p.tensorParallel;
  const perGpu = p.gpuMemoryBytes * p.memoryUtilization - weightsPerGpu - p.activationReserveBytesPerGpu;
  return Math.max(0, Math.floor(perGpu)) * p.tensorParallel;
}

/**
 * The presets. Fields:
 *   model            a MODELS name
 *   gpus, tensorParallel   GPUs in the node and GPUs per engine; engines = gpus / tensorParallel,
 *                    agents are spread over engines round-robin
 *   source           where KV lives between turns: tier 'nvme' (drives x perDriveBytesPerSec) or
 *                    'host' (DRAM, aggregateBytesPerSec); every turn's KV is assumed written there
 *   perUnitBytesPerSec   the most one unit (or one foreground load) moves per second: one read
 *                    stream, distinct from the aggregate
 *   h2dBytesPerSecPerGpu  PCIe host-to-device, per GPU (an engine has tensorParallel of them)
 *   gpuDenseFlops, mfu    for recompute (prefill) throughput, per GPU
 *   gpuMemoryBytes, memoryUtilization, activationReserveBytesPerGpu   the engine's KV capacity
 *                    (kvCapacityPerEngine): what running turns, KV retained across waits and the
 *                    device pool's reservation share
 *   unitOverheadSec  fixed cost of one unit or load: submit, metadata, checksum, publish
 *   prepTarget       'host': units stage KV into the pinned host arena and a hit still pays the
 *                    H2D copy; 'device': units copy into a per-engine device pool and a hit costs 0
 *   hostArenaBytes   host arena budget (prepared artifacts + staging buffers)
 *   stagingBytesPerUnit   bounce buffer a unit in flight holds in the host arena
 *   devicePoolBytesPerEngine  GPU memory per engine reserved for device-ready prepared
 *                    artifacts, out of the KV capacity
 *   sharedPrefixResident  the trace's widely shared leading prefix (system prompt) stays in the
 *                    GPU prefix cache, so no policy moves or recomputes it
 */
/** What the two 70B presets share: KV in host DRAM, units copied into a per-engine device pool. */
const HOST_TO_DEVICE = Object.freeze({
  memoryUtilization: 0.9,
  activationReserveBytesPerGpu: 4 * GiB,
  unitOverheadSec: 0.002,
  prepTarget: 'device',
  hostArenaBytes: 16 * GiB,
  stagingBytesPerUnit: 256 * MiB,
  devicePoolBytesPerEngine: 32 * GiB,
  sharedPrefixResident: true,
});

export const PRESETS = Object.freeze({
  '8b-pcie5-nvme': Object.freeze({
    description: 'Llama-3.1-8B bf16, 8 x H100 (PCIe 5.0 x16), KV between turns on 8 local PCIe 5.0 NVMe drives, units stage into a host arena',
    model: 'llama-3.1-8b',
    gpus: 8,
    tensorParallel: 1,
    source: Object.freeze({ tier: 'nvme', drives: 8, perDriveBytesPerSec: 12 * GB }),
    perUnitBytesPerSec: 6 * GB,
    h2dBytesPerSecPerGpu: 50 * GB,
    gpuDenseFlops: 989e12,
    mfu: 0.5,
    gpuMemoryBytes: 80 * GiB,
    memoryUtilization: 0.9,
    activationReserveBytesPerGpu: 4 * GiB,
    unitOverheadSec: 0.002,
    prepTarget: 'host',
    hostArenaBytes: 64 * GiB,
    stagingBytesPerUnit: 64 * MiB,
    devicePoolBytesPerEngine: 0,
    sharedPrefixResident: true,
  }),
  '70b-pcie5-host': Object.freeze({
    description: 'Llama-3.1-70B bf16, 8 x H100 (PCIe 5.0 x16) as 2 engines of TP 4, KV between turns in host DRAM, units copy into a device pool',
    model: 'llama-3.1-70b',
    gpus: 8,
    tensorParallel: 4,
    source: Object.freeze({ tier: 'host', aggregateBytesPerSec: 300 * GB }),
    perUnitBytesPerSec: 100 * GB,
    h2dBytesPerSecPerGpu: 50 * GB,
    gpuDenseFlops: 989e12,
    mfu: 0.5,
    gpuMemoryBytes: 80 * GiB,
    ...HOST_TO_DEVICE,
  }),
  '70b-b300-pcie6': Object.freeze({
    description: 'Llama-3.1-70B bf16, 8 x B300 (PCIe 6.0 x16), one engine per GPU, KV between turns in host DRAM, units copy into a device pool',
    model: 'llama-3.1-70b',
    gpus: 8,
    tensorParallel: 1,
    source: Object.freeze({ tier: 'host', aggregateBytesPerSec: 400 * GB }),
    perUnitBytesPerSec: 50 * GB,
    h2dBytesPerSecPerGpu: 100 * GB,
    gpuDenseFlops: 2.25e15,
    mfu: 0.5,
    gpuMemoryBytes: 288 * GB,
    ...HOST_TO_DEVICE,
  }),
});

/** Where each parameter's value comes from: a source, or "assumption". docs/experiment.md expands it. */
export const SOURCES = Object.freeze({
  'model geometry': 'the models\' published configs (Llama 3.1: 32/80 layers, 8 KV heads, head dim 128; DeepSeek-V3: 61 layers, kv_lora_rank 512, qk_rope_head_dim 64)',
  'kv bytes per token': 'derived from the geometry (formula in presets.js)',
  'perDriveBytesPerSec 12 GB/s': 'PCIe 5.0 enterprise NVMe spec sheets list 13-14 GB/s sequential read; 12 is an assumption of sustained reads',
  'drives 8': 'assumption',
  'host aggregateBytesPerSec': 'assumption (a two-socket DDR5 host, well under its theoretical bandwidth)',
  'perUnitBytesPerSec': 'assumption (one read stream of one artifact)',
  'h2dBytesPerSecPerGpu PCIe 5.0 50 GB/s': 'PCIe 5.0 x16 is 64 GB/s per direction raw; ~50 GB/s pinned H2D is an assumption of what a copy reaches',
  'h2dBytesPerSecPerGpu PCIe 6.0 100 GB/s': 'PCIe 6.0 x16 is 128 GB/s per direction raw; 100 GB/s is an assumption',
  'gpuDenseFlops': 'H100 SXM 989 TFLOPS dense BF16 (NVIDIA datasheet); B300 2.25 PFLOPS dense BF16 is an assumption (B200-class figure)',
  'mfu 0.5': 'assumption',
  'gpuMemoryBytes': 'H100 SXM 80 GB HBM3 (NVIDIA datasheet; taken as 80 GiB, nvidia-smi reports 81,559 MiB); B300 288 GB HBM3e (NVIDIA datasheet)',
  'memoryUtilization 0.9': 'vLLM\'s default gpu_memory_utilization: the other 10% is left to the CUDA context, communication buffers and fragmentation',
  'activationReserveBytesPerGpu 4 GiB': 'assumption (activations of one prefill chunk, sampler and CUDA-graph workspace)',
  'weights': 'parameters x dtype bytes, split evenly over the engine\'s GPUs',
  'unitOverheadSec 2 ms': 'assumption',
  'hostArenaBytes, stagingBytesPerUnit, devicePoolBytesPerEngine': 'assumption',
  'sharedPrefixResident': 'assumption (prefix caching keeps a prompt every agent shares on the GPU)',
});

/** The derived figures of a preset that the replay uses, computed once. */
export function resolvePreset(name, overrides = {}) {
  const given = PRESETS[name];
  if (given === undefined) throw new Error(`unknown preset ${JSON.stringify(name)}; known: ${Object.keys(PRESETS).join(', ')}`);
  const p = { ...given, ...overrides };
  const model = MODELS[p.model];
  if (p.gpus % p.tensorParallel !== 0) throw new Error(`preset ${name}: gpus ${p.gpus} is not a multiple of tensorParallel ${p.tensorParallel}`);
  const sourceBytesPerSec = p.source.tier === 'nvme' ? p.source.drives * p.source.perDriveBytesPerSec : p.source.aggregateBytesPerSec;
  const kvCapacity = kvCapacityPerEngine(p, model);
  if (kvCapacity <= (p.devicePoolBytesPerEngine ?? 0)) throw new Error(`preset ${name}: the device pool does not fit the engine's KV capacity (${kvCapacity} bytes)`);
  return Object.freeze({
    name,
    ...p,
    engines: p.gpus / p.tensorParallel,
    kvBytesPerToken: kvBytesPerToken(model),
    sourceBytesPerSec,
    h2dBytesPerSecPerEngine: p.h2dBytesPerSecPerGpu * p.tensorParallel,
    recomputeTokensPerSecPerEngine: prefillTokensPerSecond(model, p.gpuDenseFlops, p.mfu) * p.tensorParallel,
    engineFlopsPerSec: p.gpuDenseFlops * p.mfu * p.tensorParallel,
    kvCapacityBytesPerEngine: kvCapacity,
    // What running turns and retained KV share once the device pool's reservation is taken out.
    gpuKvBytesPerEngine: kvCapacity - (p.devicePoolBytesPerEngine ?? 0),
  });
}
