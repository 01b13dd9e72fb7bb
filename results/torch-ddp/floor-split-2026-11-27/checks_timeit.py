import timeit, torch, torch.distributed as dist
import psyne.torch as pt
t = torch.ones(2)
opts = dist.AllreduceOptions(); opts.asyncOp = False
RO = dist.ReduceOp.SUM
g = dict(t=t, opts=opts, pt=pt, RO=RO, D=pt._DTYPES, S=torch.strided, det=torch.are_deterministic_algorithms_enabled, RS=pt._RO_SUM)
for stmt in ["opts.asyncOp", "opts.reduceOp", "opts.reduceOp == RS", "det()", "D.get(t.dtype)", "t.is_cpu", "t.layout is S", "t.is_contiguous()", "t.data_ptr()", "t.numel()", "pt._SYNC_DONE"]:
    n = 200000
    dt = min(timeit.repeat(stmt, globals=g, number=n, repeat=5)) / n
    print(f"{stmt:25s} {dt*1e9:7.1f} ns")
print("RS type", type(pt._RO_SUM), type(opts.reduceOp))
