#!/usr/bin/env python3
"""Runs psyrun's launch variants alternately (scripts/bench/launch-tree.sh): for each round, every
variant once, the order rotating; prints a CSV row per run:
hosts,variant,width,round,wall_s,cpu_s,ready_ms,running_ms,exit
(cpu_s: psyrun's own user + system time, from wait4).

    launch-tree.py PSYRUN SSH_CONFIG HOSTS RANKS ROUNDS NAME:WIDTH...
"""
import os
import re
import subprocess
import sys
import time


def run_once(psyrun, config, hosts, ranks, width):
    env = dict(os.environ, PSYRUN_REPORT_LAUNCH="1")
    cmd = [psyrun, "--ssh-config", config, "--tree-width", str(width), "-H", hosts,
           "-n", str(ranks), "true"]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = p.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    code = os.waitstatus_to_exitcode(status)
    m = re.search(r"ready after ([0-9.]+) ms, all \d+ ranks running after ([0-9.]+) ms", err)
    ready, running = (m.group(1), m.group(2)) if m else ("", "")
    if code != 0:
        sys.stderr.write(f"width {width}: exit {code}\n{err}\n")
    return wall, usage.ru_utime + usage.ru_stime, ready, running, code


def main():
    psyrun, config, hosts, ranks, rounds = sys.argv[1:6]
    variants = [v.split(":") for v in sys.argv[6:]]
    nhosts = hosts.count(",") + 1
    for r in range(1, int(rounds) + 1):
        shift = (r - 1) % len(variants)
        for name, width in variants[shift:] + variants[:shift]:
            wall, cpu, ready, running, code = run_once(psyrun, config, hosts, int(ranks), width)
            print(f"{nhosts},{name},{width},{r},{wall:.3f},{cpu:.3f},{ready},{running},{code}",
                  flush=True)


if __name__ == "__main__":
    main()
