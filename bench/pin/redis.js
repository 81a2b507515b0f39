// bench:pin store `redis`: a hash per artifact in a throwaway redis-server (redis-server.js),
// pinned and unpinned by Lua scripts through ioredis EVALSHA, one round trip each. ioredis comes
// from bench/peers/ (peers.js) and is required only when the store runs, so the bench loads
// without it.
import { benchKey } from '../common.js';
import { DEVICE_UUID_HEX, META, TARGET, coldNotApplicable } from './cases.js';
import { requirePeer } from './peers.js';
import { redisServerVersion, startRedis } from './redis-server.js';

const PIN_LUA = `
local h = KEYS[1]
if redis.call('HGET', h, 'state') ~= 'ready' then return false end
if #ARGV > 0 then
  local d = redis.call('HMGET', h, 'device', 'arena', 'arena_generation')
  if d[1] ~= ARGV[1] or d[2] ~= ARGV[2] or d[3] ~= ARGV[3] then return false end
end
redis.call('HINCRBY', h, 'pins', 1)
return redis.call('HMGET', h, 'size_bytes', 'location', 'checksum', 'codec_id', 'representation_version')`;
const UNPIN_LUA = `
local n = redis.call('HINCRBY', KEYS[1], 'pins', -1)
if n < 0 then
  redis.call('HINCRBY', KEYS[1], 'pins', 1)
  return -1
end
return n`;

export const notApplicable = (kase) => coldNotApplicable(kase);

export function describe() {
  const redisServer = redisServerVersion();
  let ioredis;
  try {
    ioredis = requirePeer('ioredis/package.json').version;
  } catch {
    return { unavailable: 'ioredis is not installed in bench/peers' };
  }
  if (redisServer === null) return { unavailable: 'redis-server is not installed (not on PATH)' };
  return { version: `redis-server ${redisServer} via ioredis ${ioredis}` };
}

/** The harness starts one server for all redis cases; each case process gets its port. */
export async function startServer() {
  try {
    return await startRedis();
  } catch (error) {
    throw new Error(`redis-server did not start: ${error.message}`);
  }
}

export async function create(ctx, published) {
  ctx.prefix = `wp:${ctx.table}:`;
  const Redis = requirePeer('ioredis');
  const client = new Redis({ host: '127.0.0.1', port: ctx.port, lazyConnect: true, maxRetriesPerRequest: 1 });
  await client.connect();
  for (const key of published) {
    const fields = {
      state: 'ready',
      pins: 0,
      size_bytes: META.sizeBytes,
      location: META.location,
      checksum: META.checksum,
      codec_id: META.codecId,
      representation_version: META.representationVersion,
    };
    if (ctx.device) Object.assign(fields, { device: DEVICE_UUID_HEX, arena: TARGET.arena, arena_generation: TARGET.arenaGeneration, write_seq: 1 });
    await client.hset(ctx.prefix + key.hex, fields);
  }
  return {
    local: null,
    async verify() {
      for (const key of published) {
        const pins = await client.hget(ctx.prefix + key.hex, 'pins');
        if (pins !== '0') throw new Error(`bench miscounted: ${pins} pins left on ${key.hex}`);
      }
    },
    async dispose() {
      await client.del(...published.map((key) => ctx.prefix + key.hex));
      await client.quit();
    },
  };
}

export async function openConsumer(ctx) {
  const key = benchKey(ctx.pinIndex);
  const B = ctx.sizes.batch;
  const expectLease = ctx.expect === 'lease';
  const Redis = requirePeer('ioredis');
  const client = new Redis({ host: '127.0.0.1', port: ctx.port, lazyConnect: true, maxRetriesPerRequest: 1 });
  await client.connect();
  const pinSha = await client.script('LOAD', PIN_LUA);
  const unpinSha = await client.script('LOAD', UNPIN_LUA);
  const name = ctx.prefix + key.hex;
  const device = ctx.device ? [DEVICE_UUID_HEX, String(TARGET.arena), String(TARGET.arenaGeneration)] : [];
  let held = 0;
  return {
    expect: ctx.expect,
    async: true,
    async batch() {
      let e = 0;
      for (let i = 0; i < B; i++) {
        const meta = await client.evalsha(pinSha, 1, name, ...device);
        if (meta === null) {
          e += expectLease ? 0 : 1;
          continue;
        }
        held++;
        if ((await client.evalsha(unpinSha, 1, name)) >= 0) held--;
        e += expectLease ? 1 : 0;
      }
      return e;
    },
    check() {
      if (held !== 0) throw new Error(`bench miscounted: ${held} pins not released`);
    },
    close: () => client.disconnect(),
  };
}
