/**
 * Brands: the mark a module puts on the copies it has checked and frozen (consumers, device
 * targets), so that a later check of the same object is one lookup. A brand is a private field
 * stamped onto the object: no key, descriptor or prototype shows it, so the copy stays a plain
 * object (`Object.prototype`, its own fields only) that compares strictly equal to a literal, and
 * nothing outside the module can forge it. A WeakSet entry per object would cost a hash
 * insertion and an ephemeron for the GC.
 */

/** Returns the object it is given, so that a subclass's private field lands on that object. */
class Stamp {
  constructor(target: object) {
    return target as Stamp;
  }
}

export interface Brand {
  /** Stamps `value` (before it is frozen: a frozen object still takes a private field, but the stamp is part of what was checked). */
  mark(value: object): void;
  /** Whether `value` carries this brand. */
  has(value: object): boolean;
}

/** A new brand, distinct from every other: each call declares its own class and private field. */
export function brand(): Brand {
  class Branded extends Stamp {
    #branded = true;

    static has(value: object): boolean {
      return #branded in value;
    }
  }
  return {
    mark: (value) => void new Branded(value),
    has: (value) => Branded.has(value),
  };
}
