/**
 * The renewal loop's connections (rule 6): one per server (per node of a cluster), made by the
 * library outside the application's client, whatever that client's settings: no reconnect of
 * their own (a broken one is made again here, through Sentinel or the cluster's map) and no
 * command sent twice. Releases and extends go on them too. A session hold's own connection is
 * a `Link` that is never made again: the hold ends when it closes.
 */
import { CONNECT_TIMEOUT, LinkTimeout, afterReplies, noop, type Adapter, type Connection } from "./adapter.js";
import type { Arg } from "./protocol.js";

/** A session hold's connection that has closed (the server ended the hold with it). */
export class LinkGone extends Error {
  override name = "LinkGone";
}

type Make = (key: string, timeout: number) => Promise<Connection>;

/** One reply of a pipeline, and when it arrived (`performance.now()`). */
export interface Reply {
  result: PromiseSettledResult<unknown>;
  arrived: number;
}

export class Link {
  #conn: Connection | undefined;
  #connecting: Promise<Connection> | undefined;
  /** Commands and pipelines awaiting a reply or a connection: the link is not closed under them. */
  #waiting = 0;
  #closed = false;
  /** When the last reply on this link arrived: a stall is a silence, not a long queue. */
  #lastReply = -Infinity;

  /** `make`: how a new connection is made; undefined for a session hold's, given as `conn`. */
  private constructor(
    readonly make: Make | undefined,
    conn?: Connection,
  ) {
    this.#conn = conn;
  }

  /** A link to one server, connected on first use and again after it broke. */
  static toServer(make: Make): Link {
    return new Link(make);
  }

  /** A session hold's own connection: never made again (`LinkGone` once it closed). */
  static session(conn: Connection): Link {
    return new Link(undefined, conn);
  }

  get isSession(): boolean {
    return this.make === undefined;
  }

  /** Nothing awaits it. */
  get idle(): boolean {
    return this.#waiting === 0;
  }

  /** The open connection, or a new one (made once for every caller waiting on it, within
   * `timeout` ms for the first of them), for `key`'s server. */
  open(key: string, timeout: number): Promise<Connection> {
    const conn = this.#conn;
    if (conn && (conn.isOpen?.() ?? true)) return Promise.resolve(conn);
    if (conn) this.drop(conn);
    if (!this.make) return Promise.reject(new LinkGone("the connection was closed"));
    this.#connecting ??= this.#connect(this.make, key, timeout);
    return this.#connecting;
  }

  async #connect(make: Make, key: string, timeout: number): Promise<Connection> {
    try {
      const conn = await this.track(make(key, Math.max(1, Math.min(CONNECT_TIMEOUT, timeout))));
      conn.ref(false); // renewals never keep the process alive
      if (this.#closed) {
        conn.close();
        throw new LinkGone("the renewal loop's connections were closed");
      }
      this.#conn = conn;
      return conn;
    } finally {
      this.#connecting = undefined;
    }
  }

  /** One command on `conn`; its reply counts as the connection's progress. */
  send(conn: Connection, args: readonly Arg[]): Promise<unknown> {
    return conn.send(args).finally(() => (this.#lastReply = performance.now()));
  }

  /**
   * `commands` written together on `conn` (a pipeline, no MULTI): each one's reply (or error)
   * and when it arrived. When no reply came on the connection for `wait` ms (to these commands
   * or to others before them) the link is stalled (`stalled`) and this rejects with
   * `LinkTimeout`; a long queue whose replies keep coming is not.
   */
  replies(conn: Connection, commands: readonly (readonly Arg[])[], wait: number): Promise<Reply[]> {
    const sent = performance.now();
    const arrived = (result: PromiseSettledResult<unknown>): Reply => ({
      result,
      arrived: (this.#lastReply = performance.now()),
    });
    const each = (conn.pipeline?.(commands) ?? commands.map((args) => conn.send(args))).map((reply) =>
      reply.then(
        (value) => arrived({ status: "fulfilled", value }),
        (reason: unknown) => arrived({ status: "rejected", reason }),
      ),
    );
    const all = this.track(Promise.all(each));
    return new Promise((resolve, reject) => {
      let cancel = noop;
      const check = (): void => {
        const quiet = performance.now() - Math.max(sent, this.#lastReply);
        if (quiet < wait) return void (cancel = afterReplies(wait - quiet, check));
        this.stalled(conn);
        reject(new LinkTimeout(`no answer within ${Math.round(wait)} ms`));
      };
      cancel = afterReplies(wait, check);
      all.then(resolve, reject).finally(() => cancel());
    });
  }

  /** `work`, counted as awaited on this link until it settles. */
  track<T>(work: Promise<T>): Promise<T> {
    this.#waiting++;
    const done = (): void => void this.#waiting--;
    work.then(done, done);
    return work;
  }

  /** `conn` broke: closed, and the next `open` makes another (a session's: `LinkGone`). */
  drop(conn: Connection): void {
    if (this.#conn !== conn) return;
    this.#conn = undefined;
    conn.close();
    if (this.isSession) this.#closed = true;
  }

  /** No reply came in time on `conn`: made again, but for a session's, whose closing would end
   * the hold (its lease ends instead, unless a reply comes). */
  stalled(conn: Connection): void {
    if (!this.isSession) this.drop(conn);
  }

  close(): void {
    this.#closed = true;
    const conn = this.#conn;
    this.#conn = undefined;
    conn?.close();
  }
}

/** The loop's links, one per route (`Adapter.route`: a server, or a node of a cluster). */
export class Links {
  readonly #byRoute = new Map<string, Link>();

  constructor(readonly adapter: Adapter) {}

  /** The link to `key`'s server. */
  forKey(key: string): Link {
    const route = this.adapter.route(key);
    let link = this.#byRoute.get(route);
    if (!link) {
      link = Link.toServer((k, timeout) => this.adapter.connect(k, { timeout }));
      this.#byRoute.set(route, link);
    }
    return link;
  }

  /** Close the links nothing awaits; whether every link is closed. */
  closeIdle(): boolean {
    for (const [route, link] of this.#byRoute) {
      if (!link.idle) continue;
      link.close();
      this.#byRoute.delete(route);
    }
    return this.#byRoute.size === 0;
  }
}
