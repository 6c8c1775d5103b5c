#!/usr/bin/env python3
"""What one renewal loop per client costs (docs/clients.md rule 6): each client keeps N holds
alive with its watchdog on one server, and this prints, per client, the connections it added,
the holds lost, the renewal lag, and what the renewals cost the server.

    scripts/bench_renewals.py [--holds N] [--ttl-ms T] [--seconds S] [CLIENT...]   (make bench-renewals)

Each client's program is clients/<client>/bench/renewals, run from the repository root with
`--port P --holds N --ttl-ms T --seconds S`. It acquires N holds (keys `renew:<i>`, the
watchdog on) on one client object, keeps them S seconds, releases one and checks the others
stay renewed, and prints one JSON line last:

    {"client": "go", "holds": 1000, "connections_before": 3, "connections_after": 4,
     "lost": 0, "lag_ms": {"p50": 1.2, "p99": 8.0, "max": 20.1}, "renewals": 9800,
     "others_live_after_release": true}

connections_*: the server's `connected_clients`, before the first hold (the client object
made, one command sent) and the most seen while the holds lived; lag: a renewal's reply
arrival minus when it fell due (the last success's send + ttl/3). The server here is a fresh
redis-server with the module (LOCK_TEST_SERVER, LOCK_MODULE) per client; its cost is read from
INFO: `cmdstat_lock.extend` (calls, usec per call) and `used_cpu_user + used_cpu_sys` over the
run.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENTS = ["python", "rust", "node", "go", "java"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(port: int, *args: str) -> str:
    out = subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=30
    )
    return out.stdout


def info(port: int, section: str) -> dict:
    fields = {}
    for line in command(port, "INFO", section).splitlines():
        if ":" in line:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return fields


def server_cpu(port: int) -> float:
    cpu = info(port, "cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def extend_stats(port: int) -> tuple:
    """(calls, usec per call) of LOCK.EXTEND since the server started."""
    line = info(port, "commandstats").get("cmdstat_lock.extend", "")
    stats = dict(part.split("=") for part in line.split(",") if "=" in part)
    return int(stats.get("calls", 0)), float(stats.get("usec_per_call", 0.0))


class Server:
    """A redis-server with the module, stopped by PID."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="bench-renewals-")
        self.port = free_port()
        server = os.environ.get("LOCK_TEST_SERVER", "redis-server")
        module = os.environ["LOCK_MODULE"]
        self.proc = subprocess.Popen(
            [server, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
             "--save", "", "--appendonly", "no", "--maxclients", "20000",
             "--loadmodule", module],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10  # a cold start under load takes ~1 s
        while "PONG" not in command(self.port, "PING"):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("bench-renewals: redis-server did not start")
            time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def run_client(name: str, args) -> dict:
    program = os.path.join(ROOT, "clients", name, "bench", "renewals")
    if not os.access(program, os.X_OK):
        return {"client": name, "error": f"no {os.path.relpath(program, ROOT)}"}
    server = Server()
    try:
        cpu_before = server_cpu(server.port)
        # The run's own bound: the holds' time plus setup (cold compilers, 10,000 acquires).
        budget = args.seconds + 600
        proc = subprocess.run(
            [program, "--port", str(server.port), "--holds", str(args.holds),
             "--ttl-ms", str(args.ttl_ms), "--seconds", str(args.seconds)],
            cwd=ROOT, capture_output=True, text=True, timeout=budget,
        )
        lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode != 0 or not lines:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            return {"client": name, "error": f"exit {proc.returncode}: " + " | ".join(tail)}
        result = json.loads(lines[-1])
        result["server_cpu_s"] = server_cpu(server.port) - cpu_before
        result["extend_calls"], result["extend_usec_per_call"] = extend_stats(server.port)
        return result
    except subprocess.TimeoutExpired:
        return {"client": name, "error": "did not finish in time"}
    finally:
        server.stop()


def table(results: list, args) -> str:
    rows = [
        f"{args.holds} holds, {args.ttl_ms} ms leases, {args.seconds} s, one server each:",
        "",
        "| client | connections added | lost | lag p50 / p99 / max (ms) | renewals | "
        "LOCK.EXTEND µs/call | server CPU (s) | others live after one release |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            rows.append(f"| {r['client']} | {r['error']} | | | | | | |")
            continue
        lag = r["lag_ms"]
        rows.append(
            f"| {r['client']} | {r['connections_after'] - r['connections_before']} | {r['lost']} | "
            f"{lag['p50']:.1f} / {lag['p99']:.1f} / {lag['max']:.1f} | {r['renewals']} | "
            f"{r['extend_usec_per_call']:.2f} | {r['server_cpu_s']:.2f} | "
            f"{'yes' if r['others_live_after_release'] else 'NO'} |"
        )
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--holds", type=int, default=1000)
    parser.add_argument("--ttl-ms", type=int, default=3000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("clients", nargs="*", default=CLIENTS)
    args = parser.parse_args()
    results = []
    for name in args.clients:
        print(f"bench-renewals: {name} ...", file=sys.stderr, flush=True)
        results.append(run_client(name, args))
    print(table(results, args))
    failed = [r for r in results if "error" in r or r["lost"] or not r["others_live_after_release"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
