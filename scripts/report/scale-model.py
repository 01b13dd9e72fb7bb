#!/usr/bin/env python3
"""Issue 19's model: fits the per-rank and per-pair costs measured on this machine
(results/scale/model/inputs.csv from scripts/bench/scale-inputs.py, results/launch-tree/ and
results/launch-tree/small/ from scripts/bench/launch-tree.sh) and predicts group formation with a first
all-reduce, and the launch, for HOSTS hosts of RANKS_PER_HOST ranks (default 1,024 x 4).
Prints the fitted inputs and a Markdown table; results/scale/MODEL.md explains each term.

    scale-model.py [HOSTS] [RANKS_PER_HOST]

Assumptions that are not measured here (there is one machine), each printed with the result:
the launch node's cores for psyrun (P), the network's bandwidth out of psyrun's host (BW) and its
round trip (RTT), and the bytes of one address record and of one range read's request (from
the record format in src/transport/tcp/mesh.rs and op 7 in src/bootstrap/tcp.rs).
"""
import csv
import math
import os
import statistics
import sys
from collections import defaultdict

RECORD = 4 + len("10.200.12.34:45678 node0123 node0123/") + 36 + 2  # length + record
# A range read names the prefix and two bounds (op 7), not every key.
REQUEST = 1 + 4 + len("psyne/job-0123456789abcdef/world/addr/") + 4 + 24


def medians(path, key, value):
    groups = defaultdict(list)
    for row in csv.DictReader(open(path)):
        if row.get("exit", "0") == "0":
            groups[key(row)].append(float(row[value]))
    return {k: statistics.median(v) for k, v in groups.items()}


def fit_linear_quadratic(points):
    """Least squares for y = a*n + b*n^2 over (n, y)."""
    s11 = sum(n * n for n, _ in points)
    s12 = sum(n ** 3 for n, _ in points)
    s22 = sum(n ** 4 for n, _ in points)
    t1 = sum(n * y for n, y in points)
    t2 = sum(n * n * y for n, y in points)
    det = s11 * s22 - s12 * s12
    return (t1 * s22 - t2 * s12) / det, (s11 * t2 - s12 * t1) / det


def fit_line(points):
    """Least squares for y = a + b*n."""
    ns = [n for n, _ in points]
    ys = [y for _, y in points]
    mn, my = statistics.mean(ns), statistics.mean(ys)
    b = sum((n - mn) * (y - my) for n, y in points) / sum((n - mn) ** 2 for n in ns)
    return my - b * mn, b


def depth(hosts, width):
    levels, reach = 0, 0
    while reach < hosts:
        levels += 1
        reach = width * (reach + 1) if levels > 1 else width
    return levels


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # the results/ it reads
    hosts = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    per_host = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    n = hosts * per_host
    inputs = "results/scale/model/inputs.csv"
    cpu = medians(inputs, lambda r: (r["job"], int(r["ranks"])), "psyrun_cpu_s")
    per_rank = medians(inputs, lambda r: (r["job"], int(r["ranks"])), "cpu_per_rank_ms")
    sizes = sorted({k[1] for k in cpu})
    # The store's work: psyrun's CPU in the all-reduce job less in the `true` job.
    store = [(m, cpu[("allreduce", m)] - cpu[("true", m)]) for m in sizes]
    s1, s2 = fit_linear_quadratic(store)
    spawn = fit_line([(m, cpu[("true", m)]) for m in sizes])[1]
    # A rank's own work: its CPU in the all-reduce job less a `true` rank's.
    rank = [(m, per_rank[("allreduce", m)] - per_rank[("true", m)]) for m in sizes]
    r0, r1 = fit_line(rank)

    tree = medians("results/launch-tree/runs.csv",
                   lambda r: (int(r["hosts"]), r["variant"], int(r["width"])), "cpu_s")
    flat16, flat32 = tree[(16, "flat", 100000)], tree[(32, "flat", 100000)]
    conn_cpu = (flat32 - flat16) / 16  # psyrun's CPU per host it reaches itself
    relay_cpu = (tree[(32, "tree", 4)] - tree[(16, "tree", 4)]) / 16  # per relayed host
    small = medians("results/launch-tree/small/runs.csv",
                    lambda r: (int(r["hosts"]), r["variant"]), "ready_ms")
    hop = small[(1, "flat")] / 1e3  # one host from nothing to its agent ready

    print("Fitted from this machine's runs:")
    print(f"  store (psyrun) CPU = {s1 * 1e3:.3f} ms x N + {s2 * 1e6:.3f} us x N^2  "
          f"(points {', '.join(f'{m}: {y:.3f} s' for m, y in store)})")
    print(f"  psyrun CPU per rank started (no store) = {spawn * 1e3:.3f} ms")
    print(f"  rank CPU = {r0:.3f} ms + {r1 * 1e3:.3f} us x N  "
          f"(points {', '.join(f'{m}: {y:.2f} ms' for m, y in rank)})")
    print(f"  launch: one host ready after {hop:.3f} s; psyrun CPU {conn_cpu * 1e3:.2f} ms per "
          f"host reached directly, {relay_cpu * 1e3:.2f} ms per relayed host")
    print(f"  record {RECORD} B, range request {REQUEST} B")
    print()
    print(f"Predictions for {hosts} hosts x {per_host} ranks = {n} ranks:")
    print()
    print("| term | P=2, 10 Gb/s | P=16, 10 Gb/s | P=16, 25 Gb/s |")
    print("|---|---:|---:|---:|")
    rows = defaultdict(list)
    for p, gbps in ((2, 10), (16, 10), (16, 25)):
        bw = gbps * 1e9 / 8
        width = 32
        levels = depth(hosts, width)
        # Each level: one hop's set-up, plus a node's connections to its `width` hosts over its
        # P cores (psyrun or a relay: every host is assumed to have P cores); psyrun handles
        # every relayed host's messages.
        launch_tree = levels * (hop + width * conn_cpu / p) + hosts * relay_cpu / p
        launch_flat = hop + hosts * conn_cpu / p
        store_cpu = (s1 * n + s2 * n * n) / p
        store_out = n * n * RECORD / bw
        store_in = n * REQUEST / bw
        store_t = max(store_cpu, store_out, store_in)
        rank_t = (r0 + r1 * n) / 1e3
        rtt = 50e-6
        first = math.ceil(math.log2(n)) * 3 * rtt
        rows["launch, tree of width 32 (s)"].append(launch_tree)
        rows["launch, flat (s)"].append(launch_flat)
        rows["store CPU / P (s)"].append(store_cpu)
        rows["store bytes out / BW (s)"].append(store_out)
        rows["store bytes in / BW (s)"].append(store_in)
        rows["a rank's own work (s)"].append(rank_t)
        rows["first all-reduce, log2 N x 3 RTT of 50 us (s)"].append(first)
        rows["**formation + first all-reduce after launch (s)**"].append(store_t + rank_t + first)
        rows["**launch (tree) + formation (s)**"].append(launch_tree + store_t + rank_t + first)
    for name, vals in rows.items():
        print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in vals) + " |")
    print()
    table = n * RECORD
    print(f"Per rank: the address table {table / 2**20:.2f} MiB; connections: store, listener and "
          f"{math.ceil(math.log2(n))} peers after a recursive-doubling all-reduce (lazy).")
    print(f"Store load: {2 * n} requests, {n * n * RECORD / 1e9:.2f} GB out (the table, encoded "
          f"once, to every rank), {n * REQUEST / 1e6:.2f} MB in (a range read names only its "
          f"prefix).")


if __name__ == "__main__":
    main()
