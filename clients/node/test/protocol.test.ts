/** The pure parts: command words, replies, the renewal rule, key slots. No server. */
import assert from "node:assert/strict";
import { test } from "node:test";
import { slotOf } from "redis-lock-client";

// The built module itself (not part of the package's API).
const p: typeof import("../src/protocol.js") = await import(
  new URL("../../dist/esm/protocol.js", import.meta.url).href
);
const { Renewals, acquireArgs, movedAway, tokenOf, LEASE_RAN_OUT, UNREACHABLE } = p;

test("LOCK.ACQUIRE words for each mode and wait", () => {
  assert.deepEqual(acquireArgs("k", "o", 30_000, {}, false, undefined), ["LOCK.ACQUIRE", "k", "o", 30000]);
  assert.deepEqual(acquireArgs("k", "o", 1.4, { shared: true }, true, Infinity), [
    "LOCK.ACQUIRE",
    "k",
    "o",
    2, // rounded up: a lease is never shorter than asked
    "SHARED",
    "SESSION",
    "WAIT",
    0,
  ]);
  assert.deepEqual(acquireArgs("k", "o", 10, { limit: 5, permits: 2 }, false, 250.6), [
    "LOCK.ACQUIRE",
    "k",
    "o",
    10,
    "LIMIT",
    5,
    "PERMITS",
    2,
    "WAIT",
    251,
  ]);
  assert.throws(() => acquireArgs("k", "o", 10, { limit: 2, permits: 3 }, false, undefined), RangeError);
  assert.throws(() => acquireArgs("k", "o", 10, { limit: 2, shared: true }, false, undefined), RangeError);
});

test("replies: tokens exact below 2^53, nil, owner-star arrays; moved-away errors", () => {
  assert.equal(tokenOf(1795950867669407), 1795950867669407);
  assert.equal(tokenOf("1795950867669407"), 1795950867669407);
  assert.equal(tokenOf(null), null);
  assert.throws(() => tokenOf("OK"), TypeError, "a reply that is not an integer is not a token");
  assert.equal(tokenOf(["c8da1ac0", 7]), 7);
  for (const e of [
    "READONLY You can't write",
    "MOVED 3999 127.0.0.1:1",
    "TRYAGAIN x",
    "UNBLOCKED x",
    "CLUSTERDOWN x",
    "LOADING x",
  ])
    assert.ok(movedAway(new Error(e)), e);
  assert.ok(!movedAway(new Error("ERR syntax error")));
});

test("the watchdog's rule: renew every ttl/3, lost at 0 or when the lease ends unreachable", () => {
  const r = new Renewals(900, 0);
  assert.equal(r.interval, 300);
  assert.equal(r.answered(300, 1), undefined);
  assert.equal(r.leaseEnd, 1200);
  assert.equal(r.broken(1100), undefined, "retried while the lease lasts");
  assert.equal(r.broken(1200), `${UNREACHABLE}: no answer`);
  r.lastFailure = "connection refused";
  assert.equal(r.broken(1200), `${UNREACHABLE}: connection refused`, "with the last failure's cause");
  assert.equal(r.answered(600, 0), LEASE_RAN_OUT);
  assert.equal(new Renewals(30, 0).timeout, 50, "at least 50 ms to answer");
});

test("key slots, hash tags included (Redis Cluster's CRC16)", () => {
  assert.equal(slotOf("foo"), 12182);
  assert.equal(slotOf("123456789"), 12739);
  assert.equal(slotOf("{user1000}.following"), slotOf("{user1000}.followers"));
  assert.equal(slotOf("{sku:9}:lock"), slotOf("sku:9"));
  assert.equal(slotOf("foo{}{bar}"), slotOf("foo{}{bar}"), "an empty tag hashes the whole key");
  assert.notEqual(slotOf("foo{}{bar}"), slotOf("bar"));
});
