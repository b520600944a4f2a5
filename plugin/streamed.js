// A request line written as it is made: a first request carries the whole history (83 MB of
// JSON at 20,000 messages), and made whole before it is written, the sidecar waits for all of
// it before it reads a byte. A list in a request's params can be a `Lazy` one, made as it is
// read; `linePieces` gives the line's text piece by piece, a message at a time, and the
// pieces together are exactly `JSON.stringify` of the request (the wire does not change).

/** A list made as it is read, once (its items are kept: read again, or by `JSON.stringify`,
 * it is the same list). */
export class Lazy {
  constructor(items) {
    this.items = items;
    this.made = [];
    this.done = false;
  }

  *[Symbol.iterator]() {
    // Indexed: `made` grows while an earlier reading is still under way.
    for (let i = 0; i < this.made.length; i++) yield this.made[i];
    if (this.done) return;
    for (const item of this.items) {
      this.made.push(item);
      yield item;
    }
    this.done = true;
  }

  toJSON() {
    return [...this];
  }
}

/** Whether `params` holds a `Lazy` list (and is a plain object, whose line `linePieces` makes). */
export function hasLazy(params) {
  if (!params || typeof params !== "object" || Array.isArray(params) || typeof params.toJSON === "function") return false;
  return Object.values(params).some((v) => v instanceof Lazy);
}

/** The text of `JSON.stringify(envelope)` for a request whose `params` is a plain object, in
 * pieces: each item of a `Lazy` list in params is made and written as its own piece. */
export function* linePieces(envelope) {
  let first = true;
  yield "{";
  for (const key of Object.keys(envelope)) {
    const value = envelope[key];
    if (key !== "params" || !hasLazy(value)) {
      const text = JSON.stringify(value);
      // As JSON.stringify leaves out a key whose value it cannot write (undefined, a function).
      if (text === undefined) continue;
      yield `${first ? "" : ","}${JSON.stringify(key)}:${text}`;
    } else {
      yield `${first ? "" : ","}${JSON.stringify(key)}:`;
      yield* paramsPieces(value);
    }
    first = false;
  }
  yield "}";
}

/** A plain object's text in pieces, its `Lazy` lists item by item. */
function* paramsPieces(params) {
  let first = true;
  yield "{";
  for (const key of Object.keys(params)) {
    const value = params[key];
    if (!(value instanceof Lazy)) {
      const text = JSON.stringify(value);
      if (text === undefined) continue;
      yield `${first ? "" : ","}${JSON.stringify(key)}:${text}`;
      first = false;
      continue;
    }
    yield `${first ? "" : ","}${JSON.stringify(key)}:[`;
    let firstItem = true;
    for (const item of value) {
      // In a list, what JSON.stringify cannot write is written as null.
      yield `${firstItem ? "" : ","}${JSON.stringify(item) ?? "null"}`;
      firstItem = false;
    }
    yield "]";
    first = false;
  }
  yield "}";
}
