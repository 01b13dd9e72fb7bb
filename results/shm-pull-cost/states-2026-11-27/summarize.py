import collections, statistics, sys
rows=[l.split() for l in open(sys.argv[1]) if "│" not in l]
d=collections.defaultdict(list)
for i,m,b,c,s,t in rows:
    d[(c,int(s),m)].append((float(b),float(t)))
jobs = {(r[0], r[1], r[3]): float(r[2]) for r in rows}
b = sorted(jobs.values())
print(f"{len(jobs)} jobs; cross-core round trip before them: min {b[0]:.0f}, median {b[len(b)//2]:.0f}, max {b[-1]:.0f} ns")
for c in ["broadcast","allgather","allreduce"]:
    for s in [65536,1048576,4194304]:
        a=[t for b,t in d[(c,s,'default')]]; bb=[t for b,t in d[(c,s,'cma')]]
        if not a or not bb: continue
        print(f"{c:10s} {s:8d} default {statistics.median(a):8.1f} ({min(a):.1f}-{max(a):.1f})  cma {statistics.median(bb):8.1f} ({min(bb):.1f}-{max(bb):.1f})  cma/default {statistics.median(bb)/statistics.median(a):.2f}")
