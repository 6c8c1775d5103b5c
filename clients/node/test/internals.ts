/**
 * The package's internals the tests reach (not its API: `index.ts` does not export them), loaded
 * from the same build as the API and typed from the source.
 */
import type * as adapter from "../src/adapter.js";

const load = async <T>(file: string): Promise<T> =>
  (await import(new URL(`../../dist/esm/${file}`, import.meta.url).href)) as T;

export const { adapt } = await load<typeof import("../src/adapt.js")>("adapt.js");
export const protocol = await load<typeof import("../src/protocol.js")>("protocol.js");
export const { Lease } = await load<typeof import("../src/lease.js")>("lease.js");
export const { RENEWAL_CHANNEL } = await load<typeof import("../src/loop.js")>("loop.js");

export type Adapter = adapter.Adapter;
export type Connection = adapter.Connection;
