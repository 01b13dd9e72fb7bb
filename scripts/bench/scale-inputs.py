#!/usr/bin/env python3
"""The measured inputs of issue 19's model (results/scale/MODEL.md): where the CPU time of a job
that forms a group and runs one all-reduce goes, as the rank count grows.

For each rank count N and round, two jobs on this machine:
- `psyrun -n N true`: psyrun starting, watching and reaping N ranks that do nothing (its cost per
  rank without any store traffic);
- `psyrun -n N examples/allreduce 1`: every rank forms the group (publishes its address, reads the
  whole table from psyrun's store) and all-reduces one f32.
For each job: the wall time, psyrun's own CPU time (user + system of its threads alone, read from
/proc/PID/stat every 5 ms until it exits, in clock ticks of 10 ms: the store is psyrun's
threads), and the ranks' CPU time in all (wait4's total for psyrun and the ranks it reaped, less
psyrun's own) and per rank.

Prints CSV: job,ranks,round,wall_s,psyrun_cpu_s,ranks_cpu_s,cpu_per_rank_ms

    scale-inputs.py TARGET_DIR ROUNDS N...
"""
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def own_cpu(pid):
    """utime + stime of the process itself (fields 14 and 15 of /proc/PID/stat), seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


def run(cmd):
    """Runs one job: wall time, psyrun's own CPU and the ranks' CPU in all (wait4's total for
    psyrun and the descendants it reaped, less psyrun's own), seconds, and the exit code."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cpu = 0.0
    while True:
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            break
        c = own_cpu(p.pid)
        if c is not None:
            cpu = c
        time.sleep(0.005)
    wall = time.monotonic() - t0
    total = usage.ru_utime + usage.ru_stime
    p.returncode = os.waitstatus_to_exitcode(status)
    return wall, cpu, max(total - cpu, 0.0), p.returncode


def main():
    target, rounds = sys.argv[1], int(sys.argv[2])
    psyrun = os.path.join(target, "psyrun")
    example = os.path.join(target, "examples", "allreduce")
    print("job,ranks,round,wall_s,psyrun_cpu_s,ranks_cpu_s,cpu_per_rank_ms")
    for r in range(1, rounds + 1):
        for n in map(int, sys.argv[3:]):
            for job, prog in (("true", ["true"]), ("allreduce", [example, "1"])):
                wall, cpu, ranks, code = run([psyrun, "-n", str(n)] + prog)
                if code != 0:
                    sys.stderr.write(f"{job} at {n} ranks: exit {code}\n")
                    continue
                print(f"{job},{n},{r},{wall:.3f},{cpu:.2f},{ranks:.3f},{ranks / n * 1e3:.2f}",
                      flush=True)


if __name__ == "__main__":
    main()
