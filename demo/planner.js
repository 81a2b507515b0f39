// The demo's orchestrator with the package's PausePlanner (`waitprep demo --planner`): the trace's
// waits go to the planner instead of straight to the coordinator, the planner admits and
// withdraws through the coordinator, and after each replan the storage worker gets the planner's
// eviction values over its socket ({ op: 'eviction-values' }), so it evicts what no pause likely
// to wake soon wants first, and never an artifact worth as much as the one it makes room for.
//
// The demo has no GPU to keep KV on: every pause is a candidate for preparation, and the arena is
// the storage worker's budget. Its links are nominal (the demo's worker moves a few KiB per unit):
// two units in flight.
import { connect } from 'node:net';
import { PausePlanner, plannedUnitsInFlight } from 'waitprep';

/** How often the demo replans, in wall milliseconds. */
const REPLAN_MS = 100;
/** Nominal link figures: the planner asks for an eighth of the tier over one unit (its default), one, and at least two. */
const LINKS = Object.freeze({ tierBytesPerSec: 8e9, unitBytesPerSec: 1e9 });
/** The units in flight the planner asks for over these links, for the coordinator built before it. */
export const DEMO_PLANNER_UNITS = plannedUnitsInFlight(LINKS, 64, 0.125);

/** Sends one JSON line to the storage worker's socket and resolves its one-line reply. */
function send(socketPath, message) {
  return new Promise((resolve, reject) => {
    const socket = connect(socketPath);
    let buffered = '';
    socket.setEncoding('utf8');
    socket.on('connect', () => socket.write(JSON.stringify(message) + '\n'));
    socket.on('data', (chunk) => {
      buffered += chunk;
      const newline = buffered.indexOf('\n');
      if (newline < 0) return;
      socket.end();
      resolve(JSON.parse(buffered.slice(0, newline)));
    });
    socket.on('error', reject);
  });
}

export class DemoPlanner {
  /**
   * `table`: the consumer side of the storage worker's table (peeked, never pinned, before a
   * pause begins); `bytesOf(key)`: the artifact's bytes; `onError(message)`: a failed send.
   */
  constructor({ coordinator, table, socketPath, budgetBytes, bytesOf, onError }) {
    this.coordinator = coordinator;
    this.table = table;
    this.socketPath = socketPath;
    this.bytesOf = bytesOf;
    this.onError = onError;
    this.planner = new PausePlanner({ coordinator, budgets: { gpuRetainBytes: 0, arenaBytes: budgetBytes }, links: LINKS });
    this.pauses = new Map();
    this.forgotten = 0;
    this.wakesWithoutTicket = 0;
    this.valueUpdates = 0;
    /** A send of values is unanswered (the next tick skips its send); stopped: answers are ignored. */
    this.sending = false;
    this.stopped = false;
    this.timer = setInterval(() => this.replan(), REPLAN_MS);
  }

  /** Units in flight the planner asks for (the driver's `maxInFlight`). */
  get unitsInFlight() {
    return this.planner.unitsInFlight;
  }

  /** A trace event: a wait begins a pause; a wake or cancel ends one. Returns a wake's result, or null. */
  handle(event, key) {
    const id = `${event.agent}#${event.generation}`;
    if (event.event === 'wait') {
      // The eviction fix, as admitWait does it: history of an artifact the worker evicted is forgotten.
      const present = this.table.peek(key);
      if (present.kind === 'miss' && present.reason === 'absent' && this.coordinator.forget(key)) this.forgotten++;
      const consumer = { engine: 'engine-0', request: event.agent, generation: event.generation };
      const plan = this.planner.begin({ consumer, key, toolClass: event.tool ?? 'unknown', bytes: this.bytesOf(key), tag: id });
      if (plan.pause !== null) this.pauses.set(id, plan.pause);
      return null;
    }
    const pause = this.pauses.get(id);
    this.pauses.delete(id);
    if (pause === undefined) return null;
    if (event.event === 'cancel') {
      this.planner.cancel(pause);
      return null;
    }
    const result = this.planner.wake(pause);
    if (result === null) this.wakesWithoutTicket++;
    return result;
  }

  /**
   * Replans, then tells the storage worker the eviction values of the keys open pauses want,
   * unless the last values are still unanswered (a loaded host: the next tick sends fresher ones).
   */
  replan() {
    this.planner.replan();
    if (this.sending) return;
    const values = [];
    const seen = new Set();
    for (const pause of this.pauses.values()) {
      if (!pause.open || seen.has(pause.key.hex)) continue;
      seen.add(pause.key.hex);
      values.push([pause.key.hex, this.planner.evictionValue(pause.key.hex)]);
    }
    this.sending = true;
    send(this.socketPath, { op: 'eviction-values', values }).then(
      (reply) => {
        this.sending = false;
        if (reply.ok) this.valueUpdates++;
        else if (!this.stopped) this.onError(`eviction values refused: ${reply.error}`);
      },
      (error) => {
        this.sending = false;
        // Once the run stops, the storage worker goes away under a send still in flight.
        if (!this.stopped) this.onError(`eviction values not sent: ${error.message}`);
      },
    );
  }

  stop() {
    this.stopped = true;
    clearInterval(this.timer);
  }

  summary() {
    return { ...this.planner.stats(), forgottenAfterEviction: this.forgotten, wakesWithoutTicket: this.wakesWithoutTicket, evictionValueUpdates: this.valueUpdates };
  }
}
