import collections, statistics, sys
rows=[l.split() for l in open(sys.argv[1])]
t=collections.defaultdict(dict); bounce={}
for i,c,p,b,s,us in rows:
    t[(c,int(s))][(int(i),int(p))]=float(us); bounce[(int(i),c,int(p))]=float(b)
slow=sum(1 for v in bounce.values() if v>250); print(f"jobs {len(bounce)}, slow-state (>250 ns) {slow}")
print(f"{'coll':14s}{'size':>6s} {'32K us':>8s} {'128K/32K':>9s} {'256K/32K':>9s}   (paired per-round medians; normal-state pairs only)")
for (c,s),d in sorted(t.items()):
    rounds=sorted({i for i,_ in d})
    def ratio(p):
        r=[d[(i,p)]/d[(i,32768)] for i in rounds if (i,p) in d and (i,32768) in d and bounce[(i,c,p)]<250 and bounce[(i,c,32768)]<250]
        return (statistics.median(r), len(r)) if r else (float('nan'),0)
    base=[d[(i,32768)] for i in rounds if (i,32768) in d and bounce[(i,c,32768)]<250]
    r1,n1=ratio(131072); r2,n2=ratio(262144)
    print(f"{c:14s}{s>>10:5d}K {statistics.median(base) if base else float('nan'):8.1f} {r1:9.2f} {r2:9.2f}   n={n1},{n2}")
