/** The pure parts: command words, replies, the renewal rule, key slots. No server. */
import assert from "node:assert/strict";
import { test } from "node:test";

import { Lease, protocol } from "./internals.js";

const { acquireArgs, isRetryableReply, slotOf, tokenOf, LEASE_RAN_OUT, FIXED_LEASE_ENDED, unreachable } = protocol;

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

test("replies: tokens exact below 2^53, nil, owner-star arrays; rule 19's retryable replies", () => {
  assert.equal(tokenOf(1795950867669407), 1795950867669407);
  assert.equal(tokenOf("1795950867669407"), 1795950867669407);
  assert.equal(tokenOf(null), null);
  assert.throws(() => tokenOf("OK"), TypeError, "a reply that is not an integer is not a token");
  assert.equal(tokenOf(["c8da1ac0", 7]), 7);
  assert.deepEqual(
    [...protocol.RETRYABLE_REPLIES],
    ["MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "READONLY", "LOADING", "MASTERDOWN", "UNBLOCKED"],
    "rule 19's list, once",
  );
  for (const e of [
    "READONLY You can't write",
    "MOVED 3999 127.0.0.1:1",
    "ASK 3999 127.0.0.1:1",
    "TRYAGAIN x",
    "UNBLOCKED x",
    "CLUSTERDOWN x",
    "LOADING x",
    "MASTERDOWN x",
  ])
    assert.ok(isRetryableReply(new Error(e)), e);
  for (const e of ["ERR syntax error", "NOPERM no", "STALE x", "ASKING", "WRONGTYPE x"])
    assert.ok(!isRetryableReply(new Error(e)), e);
});

test("the lease: renew every ttl/3, lost at 0 or when it ends unreachable", () => {
  const l = new Lease(900, 0);
  assert.equal(l.interval, 300);
  assert.equal(l.due, 300);
  assert.equal(l.joinFrom, 270, "a tenth of a period early to join a pipeline");
  assert.equal(l.answered(300, 1, 900), undefined);
  assert.equal(l.end, 1200);
  assert.equal(l.due, 600, "the last success's send + ttl/3");
  assert.equal(l.ended(1100, true), undefined, "retried while the lease lasts");
  assert.equal(l.ended(1200, true), unreachable("no answer"));
  assert.equal(l.ended(1200, false), FIXED_LEASE_ENDED);
  l.broken("connection refused", 1100);
  assert.equal(l.due, 1150, "asked again after a pause");
  assert.equal(l.ended(1200, true), unreachable("connection refused"), "with the last failure's cause");
  assert.equal(l.answered(600, 0, 900), LEASE_RAN_OUT);
  assert.equal(new Lease(30, 0).replyWait(0), 30, "never past the lease's end");
  assert.equal(new Lease(90, 0).replyWait(0), 50, "at least 50 ms to answer");
});

test("rule 20: an extend's ttl is the lease's from then; a reply to an earlier command changes nothing", () => {
  const l = new Lease(900, 0);
  assert.equal(l.answered(100, 1, 3000), undefined, "an extend of 3 s sent at 100");
  assert.equal(l.end, 3100);
  assert.equal(l.due, 1100, "renewed by the new ttl");
  assert.equal(l.answered(50, 1, 900), undefined, "a renewal sent before it, answered after");
  assert.equal(l.end, 3100, "unchanged: the server ran it first");
  assert.equal(l.answered(200, 1, 600), undefined, "a shorter extend");
  assert.equal(l.end, 800, "shortens the lease");
});

test("rule 15: an extend without an answer may have run: the lease ends by its send + ttl, renewed at once", () => {
  const l = new Lease(30_000, 0);
  assert.equal(l.unanswered(100, 60_000), false, "a longer extend: the lease as it was");
  assert.equal(l.end, 30_000);
  assert.equal(l.unanswered(100, 1000), true, "an extend of 1 s sent at 100");
  assert.equal(l.end, 1100);
  assert.equal(l.due, 100, "renewed at once");
  assert.equal(l.answered(50, 1, 30_000), undefined, "a renewal sent before it, answered after");
  assert.equal(l.end, 1100, "unchanged: the extend may have run after it");
});

test("key slots, hash tags included (Redis Cluster's CRC16)", () => {
  assert.equal(slotOf("foo"), 12182);
  assert.equal(slotOf("123456789"), 12739);
  assert.equal(slotOf("{user1000}.following"), slotOf("{user1000}.followers"));
  assert.equal(slotOf("{sku:9}:lock"), slotOf("sku:9"));
  assert.equal(slotOf("foo{}{bar}"), slotOf("foo{}{bar}"), "an empty tag hashes the whole key");
  assert.notEqual(slotOf("foo{}{bar}"), slotOf("bar"));
});

test("rule 22: LOCK.WATCH words, and its reply as RESP2 flat arrays, a RESP3 Map or an object", () => {
  const { watchArgs, watchReply } = protocol;
  assert.deepEqual(watchArgs("k"), ["LOCK.WATCH", "k"]);
  assert.deepEqual(watchArgs("k", "17-1", 5000.2), ["LOCK.WATCH", "k", "AFTER", "17-1", "WAIT", 5001]);
  assert.deepEqual(watchArgs("k", "free", Infinity), ["LOCK.WATCH", "k", "AFTER", "free", "WAIT", 0]);
  const holder = { owner: "node-1", token: 1795951911771375, ttl: 9995, permits: 1 };
  const state = { cursor: "1795951911771375-1", mode: "exclusive", token: 1795951911771375, holders: [holder] };
  const resp2 = [
    "cursor",
    "1795951911771375-1",
    "mode",
    "exclusive",
    "token",
    1795951911771375,
    "holders",
    [["owner", "node-1", "token", 1795951911771375, "ttl", 9995, "permits", 1]],
  ];
  assert.deepEqual(watchReply(resp2), state);
  const buffers = resp2.map((x) => (typeof x === "string" ? Buffer.from(x) : x));
  assert.deepEqual(watchReply(buffers), state);
  const resp3 = new Map<unknown, unknown>([
    ["cursor", "1795951911771375-1"],
    ["mode", "exclusive"],
    ["token", 1795951911771375n],
    ["holders", [new Map(Object.entries(holder))]],
  ]);
  assert.deepEqual(watchReply(resp3), state);
  assert.deepEqual(watchReply({ ...state, holders: [holder] }), state);
  assert.deepEqual(watchReply(["cursor", "free", "mode", "free", "token", null, "holders", []]), {
    cursor: "free",
    mode: "free",
    token: null,
    holders: [],
  });
  assert.equal(watchReply(null), null, "nil: nothing new within the wait");
  assert.throws(() => watchReply("OK"), TypeError);
});
