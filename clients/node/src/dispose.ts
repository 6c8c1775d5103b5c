/**
 * `Symbol.asyncDispose` for `await using`. Node 20.5+ (and 18.18+) define it, as
 * `Symbol.for("nodejs.asyncDispose")`; older ones get that same symbol here, so holds made by
 * this package and code compiled by TypeScript 5.2+ agree on it. (`await using` itself is
 * compiled by tsc for Node 20, whose V8 does not parse it yet; its `SuppressedError` has a
 * fallback in tsc's helper.)
 */
const S = Symbol as { asyncDispose?: symbol; dispose?: symbol };
S.asyncDispose ??= Symbol.for("nodejs.asyncDispose");
S.dispose ??= Symbol.for("nodejs.dispose");

export {};
