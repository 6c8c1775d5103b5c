/**
 * Rule 20: the extends of one hold (a `Hold`, a `MultiHold`) go one at a time, in the order they
 * were made. An extend made while another of the same hold is in flight waits until that one is
 * answered or has failed, then goes: its send time, which sets the client's deadline, is then
 * after the other's answer, so the server ran it last whatever retries or new connections the
 * other needed. The wait is bounded by the unavailability bound (rule 14): past it, the extend
 * fails as unavailable with nothing sent.
 */
import { LinkTimeout, noop, within } from "./adapter.js";
import type { Reach } from "./reach.js";

export class Turn {
  /** Settles once every extend made so far has settled; undefined when none is in flight. */
  #tail: Promise<void> | undefined;

  /** `work` (one extend of `key`'s hold) once the extends made before it have settled: at once
   * when none is in flight. */
  run<T>(reach: Reach, key: string, work: () => Promise<T>): Promise<T> {
    const before = this.#tail;
    const result = before === undefined ? work() : after(before, reach, key, work);
    // The next extend waits for this one and for every one before it (one that gave up waiting
    // went nowhere, but the one it waited for may still be in flight).
    const settled = result.then(noop, noop);
    const tail = before === undefined ? settled : Promise.all([before, settled]).then(noop);
    this.#tail = tail;
    void tail.then(() => {
      if (this.#tail === tail) this.#tail = undefined;
    });
    return result;
  }
}

async function after<T>(before: Promise<void>, reach: Reach, key: string, work: () => Promise<T>): Promise<T> {
  try {
    await within(before, reach.bound, noop);
  } catch {
    const late = new LinkTimeout(`the extend made before it got no answer within ${Math.round(reach.bound)} ms`);
    throw reach.unavailable(key, late);
  }
  return await work();
}
