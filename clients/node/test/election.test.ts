/**
 * Elections (rules 21 and 22 of docs/clients.md, and the election rows of its "Same case, same
 * answer" table) on a real server, once per Redis library: candidates and observers are Node
 * processes of their own (election-worker.ts, observe-worker.ts), killed by PID at the end. The
 * bounds carry their margins beside them; the tests wait for states (bounded polling), and
 * changes an observer must see each are spaced 1 s apart. Every run checks that no fenced write
 * of an older term landed after one of a newer term (never two leaders whose writes both pass).
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { describe, test } from "node:test";
import { Locks, NotAcquiredError, type Arg, type Leader, type Leadership } from "redis-lock-client";
import { adapt } from "./internals.js";
import { Clients, FLAVOURS, Server, eventually, recording, sleep, type Flavour } from "./support.js";

const CANDIDATE = new URL("./election-worker.js", import.meta.url).pathname;
const OBSERVER = new URL("./observe-worker.js", import.meta.url).pathname;
const KEY = "{elect}:leader";

interface Event {
  e: string;
  at: number;
  term?: number;
  reason?: string;
  aborted?: boolean;
  name?: string;
  ok?: boolean;
  error?: string;
  released?: boolean;
  leader?: Leader | null;
}

/** How long a process of the test's own may take to start and report: a Node process with both
 * Redis libraries starts in about 0.3 s; 60 s leaves room for a machine whose cores are taken
 * (make test-soak beside other work started one 16 s late). Not what the tests measure. */
const STARTUP_MS = 60_000;

/** A process of the test's own: its JSON events, its commands, its end by PID. */
class Proc {
  readonly events: Event[] = [];
  readonly child: ChildProcessWithoutNullStreams;
  exited = false;

  constructor(
    readonly label: string,
    script: string,
    args: string[],
  ) {
    this.child = spawn(process.execPath, [script, ...args], { stdio: ["pipe", "pipe", "pipe"] });
    let buffer = "";
    this.child.stdout.on("data", (d: Buffer) => {
      buffer += d.toString();
      let nl: number;
      while ((nl = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        if (line.startsWith("{")) this.events.push(JSON.parse(line) as Event);
      }
    });
    this.child.stderr.on("data", (d: Buffer) => process.stderr.write(`[${label}] ${d.toString()}`));
    this.child.on("exit", () => (this.exited = true));
    this.child.stdin.on("error", () => undefined);
  }

  get pid(): number {
    return this.child.pid!;
  }

  of(kind: string): Event[] {
    return this.events.filter((ev) => ev.e === kind);
  }

  send(command: string): void {
    this.child.stdin.write(`${command}\n`);
  }

  signal(sig: NodeJS.Signals): void {
    process.kill(this.pid, sig);
  }

  /** The first event of `kind` (matching `pred`), waited for up to `timeout` ms. */
  async next(kind: string, timeout: number, pred: (ev: Event) => boolean = () => true): Promise<Event> {
    const found = (): Event | undefined => this.events.find((ev) => ev.e === kind && pred(ev));
    if (!(await eventually(() => found() !== undefined, timeout))) {
      throw new Error(`${this.label}: no ${kind} event within ${timeout} ms: ${JSON.stringify(this.events)}`);
    }
    return found()!;
  }

  /** Every event it printed before now has been read (it answered a `ping` sent now). */
  async settled(timeout = 5000): Promise<void> {
    const pongs = this.of("pong").length;
    this.send("ping");
    await this.next("pong", timeout, () => this.of("pong").length > pongs);
  }

  stop(): void {
    if (this.exited) return;
    try {
      process.kill(this.pid, "SIGCONT");
      process.kill(this.pid, "SIGKILL");
    } catch {
      // gone
    }
  }
}

/** A run's server and processes, all stopped (by PID) at its end. */
class Run {
  readonly procs: Proc[] = [];
  constructor(
    readonly flavour: Flavour,
    readonly server: Server,
  ) {}

  /** A candidate `identity` with a `ttl` ms lease; waits until it leads (the first) or waits in
   * the queue behind those before it, so the queue's order is the order of these calls. */
  async candidate(identity: string, ttl: number): Promise<Proc> {
    const queued = await this.server.waiters(KEY);
    const held = (await this.leader()) !== null;
    const p = new Proc(identity, CANDIDATE, [this.flavour.name, String(this.server.port), KEY, identity, String(ttl)]);
    this.procs.push(p);
    if (held) {
      assert.ok(
        await eventually(async () => (await this.server.waiters(KEY)) === queued + 1, STARTUP_MS),
        `${identity} queued`,
      );
    } else {
      await p.next("leader", STARTUP_MS);
    }
    return p;
  }

  /** An observer process, once it reported its first leader (or none). */
  async observer(label: string): Promise<Proc> {
    const p = new Proc(label, OBSERVER, [this.flavour.name, String(this.server.port), KEY]);
    this.procs.push(p);
    await p.next("observed", STARTUP_MS);
    return p;
  }

  /** The server's leader (`LOCK.WATCH`, read by the test itself). */
  async leader(): Promise<Leader | null> {
    const reply = (await this.server.cmd("LOCK.WATCH", KEY)) as unknown[];
    const token = reply[reply.indexOf("token") + 1] as number | null;
    const holders = reply[reply.indexOf("holders") + 1] as unknown[][];
    if (token === null || holders.length === 0) return null;
    const h = holders[holders.length - 1]!;
    return { identity: String(h[h.indexOf("owner") + 1]), term: token };
  }

  /** No fenced write of an older term after one of a newer term: the terms in the writes log
   * never go down (each leader's writes pass only while it is the live holder). */
  async fencedWritesInOrder(): Promise<void> {
    const log = (await this.server.cmd("LRANGE", `${KEY}:writes`, 0, -1)) as string[];
    const terms = log.map((w) => Number(w.split(":")[1]));
    for (let i = 1; i < terms.length; i++) assert.ok(terms[i]! >= terms[i - 1]!, `write ${i} of ${log.join(", ")}`);
    assert.ok(!log.some((w) => w.endsWith(":late")), "no late write with an old term passed");
  }

  stop(): void {
    for (const p of this.procs) p.stop();
    this.server.stop();
  }
}

async function withRun(flavour: Flavour, body: (run: Run) => Promise<void>, ...serverArgs: string[]): Promise<void> {
  const run = new Run(flavour, await Server.start(...serverArgs));
  try {
    await body(run);
    await run.fencedWritesInOrder();
  } finally {
    run.stop();
  }
}

/** The leader events of `procs`, by time. */
const leaders = (procs: Proc[]): { proc: Proc; ev: Event }[] =>
  procs.flatMap((proc) => proc.of("leader").map((ev) => ({ proc, ev }))).sort((a, b) => a.ev.at - b.ev.at);

const report = (what: string, ms: number): void => console.log(`# ${what}: ${ms} ms`);

for (const flavour of FLAVOURS) {
  describe(flavour.name, () => {
    test(
      "rule 21: three candidates in three processes, the leader killed with kill -9: one new leader at once, with a larger term",
      { timeout: 90_000 },
      () =>
        withRun(flavour, async (run) => {
          // A 10 s lease: a handoff by the lease's end would take 6.7 s at least.
          const [first, second, third] = [
            await run.candidate("c1", 10_000),
            await run.candidate("c2", 10_000),
            await run.candidate("c3", 10_000),
          ] as [Proc, Proc, Proc];
          const old = first.of("leader")[0]!;
          const killed = Date.now();
          first.signal("SIGKILL");
          const next = await second.next("leader", 5000);
          // At once (its session closed): typically 10-50 ms; 2 s of margin on a loaded machine,
          // still far below the 6.7 s a lease's end would take.
          const lag = next.at - killed;
          report(`${flavour.name}: kill -9 -> new leader`, lag);
          assert.ok(lag < 2000, `new leader after ${lag} ms`);
          assert.ok(next.term! > old.term!, "a larger term");
          // Exactly one: the server's holder is the second (FIFO), the third still waits.
          assert.deepEqual(await run.leader(), { identity: "c2", term: next.term });
          assert.equal(await run.server.waiters(KEY), 1);
          await third.settled();
          assert.equal(third.of("leader").length, 0);
        }),
    );

    test(
      "rule 21: the leader stopped (SIGSTOP) past its lease: one new leader at the lease's end; continued, it is told once and its fenced write is refused",
      { timeout: 90_000 },
      () =>
        withRun(flavour, async (run) => {
          const TTL = 2000;
          const [first, second, third] = [
            await run.candidate("c1", TTL),
            await run.candidate("c2", TTL),
            await run.candidate("c3", TTL),
          ] as [Proc, Proc, Proc];
          const old = first.of("leader")[0]!;
          // Renewed every 500 ms: after at least one renewal, and writing.
          await sleep(700);
          const stopped = Date.now();
          first.signal("SIGSTOP");
          const next = await second.next("leader", TTL + 5000);
          const lag = next.at - stopped;
          report(`${flavour.name}: SIGSTOP -> new leader (lease ${TTL} ms)`, lag);
          // The lease ends between 2/3 of a ttl (the last renewal was sent at most a third of a ttl
          // before the stop) and a ttl after the stop; 100 ms of margin below (clocks of two
          // processes), 1 s above (the server's expiry and a loaded machine).
          assert.ok(lag >= (2 * TTL) / 3 - 100, `new leader after ${lag} ms: before the lease's end`);
          assert.ok(lag <= TTL + 1000, `new leader after ${lag} ms`);
          assert.ok(next.term! > old.term!);
          assert.deepEqual(await run.leader(), { identity: "c2", term: next.term });
          first.signal("SIGCONT");
          // Told at once when it runs again (its loop sees the lease's end first thing): 2 s margin.
          const lost = await first.next("lost", 2000);
          assert.ok(lost.aborted, "its signal aborted");
          assert.equal(lost.name, "LeadershipLostError");
          assert.match(lost.reason!, /lease/);
          const fenced = await first.next("fenced", 5000);
          assert.equal(fenced.ok, false, "the old term's fenced write was refused");
          assert.match(fenced.error!, /^STALE/);
          await first.settled();
          assert.equal(first.of("lost").length, 1, "told once");
          assert.equal(first.of("leader").length, 1);
          await third.settled();
          assert.equal(third.of("leader").length, 0, "one new leader");
          assert.deepEqual(await run.leader(), { identity: "c2", term: next.term });
        }),
    );

    test("rule 21: the leader resigns: the next candidate in the queue leads at once", { timeout: 90_000 }, () =>
      withRun(flavour, async (run) => {
        const [first, second, third] = [
          await run.candidate("c1", 10_000),
          await run.candidate("c2", 10_000),
          await run.candidate("c3", 10_000),
        ] as [Proc, Proc, Proc];
        const old = first.of("leader")[0]!;
        const asked = Date.now();
        first.send("resign");
        const next = await second.next("leader", 5000);
        // At once (a handoff in the server): typically a few ms; 1 s of margin.
        const lag = next.at - asked;
        report(`${flavour.name}: resign -> new leader`, lag);
        assert.ok(lag < 1000, `new leader after ${lag} ms`);
        assert.ok(next.term! > old.term!);
        assert.equal((await first.next("resigned", 5000)).released, true);
        await first.settled();
        assert.equal(first.of("lost").length, 0, "a resign is not a loss");
        await third.settled();
        assert.equal(third.of("leader").length, 0);
        assert.deepEqual(await run.leader(), { identity: "c2", term: next.term });
      }),
    );

    test(
      "rule 22: observers in two more processes see every leader in order of term, ending with the current one",
      { timeout: 90_000 },
      () =>
        withRun(flavour, async (run) => {
          const observers = [await run.observer("o1"), await run.observer("o2")];
          const candidates: Proc[] = [];
          for (const id of ["c1", "c2", "c3"]) candidates.push(await run.candidate(id, 10_000));
          const [first, second] = candidates as [Proc, Proc, Proc];
          const lags: number[] = [];
          /** Both observers reported `leader` (1 s at most after it led; 5 s of margin), then 1 s
           * passes: the changes are spaced a second apart (a watch may merge closer ones). */
          const seen = async (leader: Leader, since: number): Promise<void> => {
            for (const o of observers) {
              const ev = await o.next("observed", 5000, (ev) => ev.leader?.term === leader.term);
              lags.push(ev.at - since);
            }
            await sleep(1000);
          };
          const t1 = first.of("leader")[0]!;
          await seen({ identity: "c1", term: t1.term! }, t1.at);
          first.signal("SIGKILL");
          const t2 = await second.next("leader", 5000);
          await seen({ identity: "c2", term: t2.term! }, t2.at);
          second.send("resign");
          const t3 = await candidates[2]!.next("leader", 5000);
          await seen({ identity: "c3", term: t3.term! }, t3.at);
          const expected = [null, ...[t1, t2, t3].map((t, i) => ({ identity: `c${i + 1}`, term: t.term! }))];
          for (const o of observers) {
            assert.deepEqual(
              o.of("observed").map((ev) => ev.leader),
              expected,
            );
          }
          assert.deepEqual(await run.leader(), expected[3]);
          report(`${flavour.name}: observer lag, the worst of ${lags.length}`, Math.max(...lags));
          assert.equal(leaders(candidates).length, 3);
        }),
    );

    test(
      "rule 22: an observer across a server restart passes its last cursor and reports the server's latest leader",
      { timeout: 90_000 },
      () =>
        withRun(
          flavour,
          async (run) => {
            const clients = new Clients(flavour);
            const made: Locks[] = [];
            const stop = new AbortController();
            try {
              const server = run.server;
              const sent: Arg[][] = [];
              const watcher = new Locks(recording(adapt(await clients.client(server.port)), sent));
              const a = new Locks(await clients.client(server.port));
              // B's wait breaks with the server after B waited longer than its bound (4 s): it
              // asks again with the same identity for 4 s from the break (the server is back
              // within about 0.2 s).
              const b = new Locks(await clients.client(server.port), { unavailableAfter: 4000 });
              made.push(watcher, a, b);
              const seen: (Leader | null)[] = [];
              let seenAt = 0;
              const observing = (async () => {
                for await (const l of watcher.election(KEY).observe({ signal: stop.signal })) {
                  seen.push(l);
                  seenAt = Date.now();
                }
              })();
              const leaderA = await a.election(KEY, { identity: "A" }).campaign({ ttl: 3000 });
              assert.ok(await eventually(() => seen.at(-1)?.term === leaderA.term, 5000), "A observed");
              const campaignB = b.election(KEY, { identity: "B" }).campaign({ ttl: 3000 });
              let leaderB: Leadership | undefined;
              void campaignB.then((l) => (leaderB = l)).catch(() => undefined);
              assert.ok(await eventually(async () => (await server.waiters(KEY)) === 1, 5000));
              await sleep(4500); // B waits longer than its bound
              const before = sent.length;
              await server.restart(); // kill -9, then the same port and data (its AOF, always fsynced)
              const restarted = Date.now();
              // A's session connection closed with the server: A lost it. The restarted server
              // keeps A's hold until its lease's end (3 s), then B, asking again, leads.
              assert.match(await leaderA.lost, /^the session's connection closed/);
              const elected = await campaignB;
              const electedAt = Date.now();
              assert.ok(elected.term > leaderA.term);
              // The observer reports B: 3 s lease + 5 s of margin.
              assert.ok(
                await eventually(() => seen.at(-1)?.term === elected.term, 8000),
                `B observed: ${JSON.stringify(seen)}`,
              );
              assert.deepEqual(seen.at(-1), { identity: "B", term: elected.term });
              report(`${flavour.name}: server back -> B leads (A's restored 3 s lease)`, electedAt - restarted);
              report(`${flavour.name}: observer lag after the restart`, seenAt - electedAt);
              // Its first watch after the restart named A's hold: the cursor it had.
              const after = sent.slice(before).filter((args) => args[0] === "LOCK.WATCH");
              assert.deepEqual(after[0]?.slice(0, 4), ["LOCK.WATCH", KEY, "AFTER", `${leaderA.term}-1`]);
              assert.ok(
                after.every((args) => args[2] === "AFTER"),
                "every watch after the first passes a cursor",
              );
              // leader(): one LOCK.WATCH without a cursor.
              assert.deepEqual(await watcher.election(KEY).leader(), { identity: "B", term: elected.term });
              // Never the same leader twice in a row, terms only growing.
              for (let i = 1; i < seen.length; i++) assert.notDeepEqual(seen[i], seen[i - 1]);
              const terms = seen.filter((l) => l !== null).map((l) => l.term);
              assert.deepEqual(
                terms,
                [...terms].sort((x, y) => x - y),
              );
              stop.abort();
              await observing;
              assert.equal(await leaderB!.resign(), true);
            } finally {
              stop.abort();
              for (const l of made) l.close();
              await clients.close();
            }
          },
          "--appendonly",
          "yes",
          "--appendfsync",
          "always",
        ),
    );

    test(
      "rule 22: an observer answered a retryable reply (LOADING) connects again and passes its last cursor",
      { timeout: 90_000 },
      () =>
        withRun(flavour, async (run) => {
          const clients = new Clients(flavour);
          const made: Locks[] = [];
          const stop = new AbortController();
          try {
            // The real adapter, but the first watch with a cursor is answered `LOADING` (as a
            // restarted server loading its data answers), without reaching the server.
            const real = adapt(await clients.client(run.server.port));
            const watches: { conn: number; args: Arg[] }[] = [];
            let conns = 0;
            let injected = false;
            const loading = Object.assign(new Error("LOADING Redis is loading the dataset in memory"), {
              name: "ReplyError",
            });
            const adapter: typeof real = {
              name: real.name,
              route: (key) => real.route(key),
              address: (key) => real.address?.(key) ?? real.name,
              send: (key, args) => real.send(key, args),
              connect: async (key, options) => {
                const conn = await real.connect(key, options);
                const n = ++conns;
                return {
                  send: (args) => {
                    if (args[0] === "LOCK.WATCH") watches.push({ conn: n, args: [...args] });
                    if (args[0] === "LOCK.WATCH" && args[2] === "AFTER" && !injected) {
                      injected = true;
                      return Promise.reject(loading);
                    }
                    return conn.send(args);
                  },
                  close: () => conn.close(),
                  ref: (k) => conn.ref(k),
                };
              },
            };
            const watcher = new Locks(adapter);
            const locks = new Locks(await clients.client(run.server.port));
            made.push(watcher, locks);
            const seen: (Leader | null)[] = [];
            const observing = (async () => {
              for await (const l of watcher.election(KEY).observe({ signal: stop.signal })) seen.push(l);
            })();
            assert.ok(await eventually(() => seen.length === 1, 5000), "the first report");
            assert.ok(await eventually(() => conns === 2, 5000), "connected again after LOADING");
            const leadership = await locks.election(KEY, { identity: "A" }).campaign();
            assert.ok(await eventually(() => seen.length === 2, 5000), `A observed: ${JSON.stringify(seen)}`);
            assert.deepEqual(seen, [null, { identity: "A", term: leadership.term }]);
            const first = watches.find((w) => w.conn === 2)!;
            assert.deepEqual(first.args.slice(0, 4), ["LOCK.WATCH", KEY, "AFTER", "free"], "the same cursor");
            stop.abort();
            await observing;
            assert.equal(await leadership.resign(), true);
          } finally {
            stop.abort();
            for (const l of made) l.close();
            await clients.close();
          }
        }),
    );

    test("rule 21: a campaign is bounded by its wait and its signal, and leaves the queue", { timeout: 90_000 }, () =>
      withRun(flavour, async (run) => {
        const clients = new Clients(flavour);
        const locks = new Locks(await clients.client(run.server.port));
        try {
          const election = locks.election(KEY, { identity: "me" });
          assert.equal(await election.leader(), null);
          const leadership = await election.campaign({ ttl: 5000 });
          assert.deepEqual(await election.leader(), { identity: "me", term: leadership.term });
          const other = locks.election(KEY, { identity: "other" });
          await assert.rejects(other.campaign({ wait: 200 }), NotAcquiredError);
          const aborted = other.campaign({ signal: AbortSignal.timeout(200) });
          await assert.rejects(aborted, { name: "TimeoutError" });
          assert.ok(await eventually(async () => (await run.server.waiters(KEY)) === 0, 2000), "left the queue");
          await assert.rejects(other.campaign({ ttl: 0 }), RangeError);
          assert.equal(await leadership.resign(), true);
          assert.equal(await leadership.resign(), false);
          assert.equal(leadership.signal.aborted, false, "a resign is not a loss");
          assert.equal(await election.leader(), null);
          // Lost (an operator takes it away): the signal aborts once, with the reason.
          const again = await election.campaign({ ttl: 600 });
          assert.ok(again.term > leadership.term);
          await run.server.cmd("LOCK.FORCERELEASE", KEY);
          assert.equal(await again.lost, "the lease ran out before it was renewed");
          assert.equal((again.signal.reason as Error).name, "LeadershipLostError");
          assert.equal(again.leading, false);
          assert.equal(await again.resign(), false);
        } finally {
          locks.close();
          await clients.close();
        }
      }),
    );
  });
}
