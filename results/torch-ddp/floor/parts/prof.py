import os, sys, time, timeit
import torch, torch.distributed as dist
from _median_time import best
import psyne.torch
import torch.testing._internal.distributed.fake_pg  # noqa
from psyne import torch as pt
dist.init_process_group("psyne")
R, S = dist.get_rank(), dist.get_world_size()
fake = dist.new_group(list(range(S)), backend="fake")
pg = dist.distributed_c10d._get_default_group()
be = pg
t = torch.ones(2)
n = be._n
call = pt._Call(pt._ALL_REDUCE, pt._DTYPES[t.dtype], (t.data_ptr(), t.numel()), (0, 0), pt._SUM)
opts = dist.AllreduceOptions(); opts.asyncOp = False
L=[t]
res = {}
res["dist.all_reduce psyne"] = best(lambda: dist.all_reduce(t))
res["dist.all_reduce psyne group=pg"] = best(lambda: dist.all_reduce(t, group=pg))
res["dist.all_reduce fake"] = best(lambda: dist.all_reduce(t, group=fake))
res["backend.allreduce([t], opts)"] = best(lambda: be.allreduce(L, opts))
res["ProcessGroupPsyne.allreduce(be,L,opts) py"] = best(lambda: pt.ProcessGroupPsyne.allreduce(be, L, opts))
res["n.run(prebuilt call)"] = best(lambda: n.run(call))
res["n.run_all_reduce"] = best(lambda: n.run_all_reduce(1, t.data_ptr(), 2, pt._SUM))
res["_Call(...) build"] = best(lambda: pt._Call(pt._ALL_REDUCE, 1, (t.data_ptr(), 2), (0, 0), pt._SUM))
res["t.data_ptr()"] = best(lambda: t.data_ptr())
res["_deterministic()"] = best(lambda: pt._deterministic())
if R == 0:
    for k, v in res.items():
        print(f"{k:32s} {v:7.3f} us")
sys.stdout.flush()
os._exit(0)
