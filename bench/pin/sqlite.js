// bench:pin store `sqlite`: better-sqlite3 on a WAL database file, one UPDATE ... RETURNING per
// pin (the row must be READY, and match the device target when asked) and one UPDATE per unpin.
// The module comes from bench/peers/ (peers.js) and is required only when the store runs, so the
// bench loads without it.
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { benchKey } from '../common.js';
import { DEVICE_UUID_HEX, META, TARGET, coldNotApplicable } from './cases.js';
import { requirePeer } from './peers.js';

export const notApplicable = (kase) => coldNotApplicable(kase);

export function describe() {
  try {
    const Database = requirePeer('better-sqlite3');
    const db = new Database(':memory:');
    const version = `better-sqlite3 ${requirePeer('better-sqlite3/package.json').version}, SQLite ${db.prepare('SELECT sqlite_version() AS v').get().v}`;
    db.close();
    return { version };
  } catch (error) {
    return { unavailable: `better-sqlite3 did not load (${String(error.message).split('\n')[0]}); bench/peers builds it from source, which needs a C++ compiler` };
  }
}

export function create(ctx, published) {
  const Database = requirePeer('better-sqlite3');
  ctx.db = join(ctx.dir, `${ctx.table}.sqlite`);
  const db = new Database(ctx.db);
  db.pragma('journal_mode = WAL');
  db.exec(`CREATE TABLE artifacts (
    digest BLOB PRIMARY KEY, state INTEGER NOT NULL, pins INTEGER NOT NULL DEFAULT 0,
    size_bytes INTEGER, location INTEGER, checksum INTEGER, codec_id INTEGER, representation_version INTEGER,
    device BLOB, arena INTEGER, arena_generation INTEGER, write_seq INTEGER
  ) WITHOUT ROWID`);
  const insert = db.prepare(`INSERT INTO artifacts VALUES (?, 2, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
  for (const key of published) {
    const device = ctx.device ? [Buffer.from(DEVICE_UUID_HEX, 'hex'), TARGET.arena, TARGET.arenaGeneration, 1] : [null, null, null, null];
    insert.run(Buffer.from(key.hex, 'hex'), META.sizeBytes, META.location, META.checksum, META.codecId, META.representationVersion, ...device);
  }
  return {
    local: null,
    verify() {
      const { pins, rows } = db.prepare('SELECT SUM(pins) AS pins, COUNT(*) AS rows FROM artifacts').get();
      if (pins !== 0 || rows !== published.length) throw new Error(`bench miscounted: ${pins} pins left over ${rows} rows`);
    },
    dispose() {
      db.close();
      for (const suffix of ['', '-wal', '-shm']) rmSync(ctx.db + suffix, { force: true });
    },
  };
}

export function openConsumer(ctx) {
  const key = benchKey(ctx.pinIndex);
  const B = ctx.sizes.batch;
  const expectLease = ctx.expect === 'lease';
  const Database = requirePeer('better-sqlite3');
  const db = new Database(ctx.db);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('busy_timeout = 10000');
  const digest = Buffer.from(key.hex, 'hex');
  const returning = 'RETURNING size_bytes, location, checksum, codec_id, representation_version';
  const pin = ctx.device
    ? db.prepare(`UPDATE artifacts SET pins = pins + 1 WHERE digest = ? AND state = 2 AND device = ? AND arena = ? AND arena_generation = ? ${returning}`)
    : db.prepare(`UPDATE artifacts SET pins = pins + 1 WHERE digest = ? AND state = 2 ${returning}`);
  const unpin = db.prepare('UPDATE artifacts SET pins = pins - 1 WHERE digest = ? AND pins > 0');
  const args = ctx.device ? [digest, Buffer.from(DEVICE_UUID_HEX, 'hex'), TARGET.arena, TARGET.arenaGeneration] : [digest];
  let held = 0;
  return {
    expect: ctx.expect,
    batch() {
      let e = 0;
      for (let i = 0; i < B; i++) {
        const row = pin.get(...args);
        if (row === undefined) {
          e += expectLease ? 0 : 1;
          continue;
        }
        held++;
        held -= unpin.run(digest).changes;
        e += expectLease ? 1 : 0;
      }
      return e;
    },
    check() {
      if (held !== 0) throw new Error(`bench miscounted: ${held} pins not released`);
    },
    close: () => db.close(),
  };
}
