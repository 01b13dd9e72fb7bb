# Per size: each variant's median, and the median of the per-round ratios (flat build / base
# build), over all rounds and split by the machine's state (core-bounce round trip under / over
# 300 ns).   python3 table.py DIR   (DIR holds the rounds' JSON and bounce.txt; raw.tar.xz)
import json,statistics as st,sys
D=sys.argv[1].rstrip('/')+'/'
bounce={int(l.split()[0]):float(l.split()[1]) for l in open(D+'bounce.txt')}
R=max(bounce)
for c in ['allreduce','broadcast','allgather','reduce','gather','reducescatter']:
    res={}
    for r in range(1,R+1):
        for v in ['flat','old']:
            try: d=json.load(open(f'{D}{c}-{v}-r{r}.json'))
            except Exception: continue
            for rec in d['records']:
                assert rec['wrong']==0
                res.setdefault((rec['bytes'],v),[]).append((r,rec['time_us_avg'],rec['algo']))
    if not res:
        continue
    for b in sorted({k[0] for k in res}):
        f=res[(b,'flat')]; o=res[(b,'old')]
        fm=st.median(x[1] for x in f); om=st.median(x[1] for x in o)
        # paired ratios per round, normal state only
        fo={x[0]:x[1] for x in f}; oo={x[0]:x[1] for x in o}
        pr=[fo[r]/oo[r] for r in fo if r in oo]
        prn=[fo[r]/oo[r] for r in fo if r in oo and bounce[r]<300]
        prs=[fo[r]/oo[r] for r in fo if r in oo and bounce[r]>=300]
        wins=sum(1 for x in pr if x<1)
        print(f"{c:10s} {b:6d} {f[0][2]:>12s} {fm:7.2f} vs {o[0][2]:>18s} {om:7.2f}  ratio {fm/om:5.2f}  paired med {st.median(pr):5.2f} normal {st.median(prn):5.2f} slow {st.median(prs) if prs else float('nan'):5.2f}  flat wins {wins}/{len(pr)}")
