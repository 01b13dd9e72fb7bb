"""In-place all_gather_into_tensor (the input the output's own chunk, as FSDP2 passes it) against a separate input, on the psyne group: `psyrun -n 2 python3 python/bench/torch_inplace_gather.py`."""
import os, time, statistics, torch, torch.distributed as dist
import psyne.torch
torch.set_num_threads(1)
dist.init_process_group("psyne")
R, S = dist.get_rank(), dist.get_world_size()
def t(fn, n=7):
    fn(); dist.barrier()
    ts=[]
    for _ in range(n):
        t0=time.perf_counter(); fn(); ts.append(time.perf_counter()-t0)
    x=torch.tensor([statistics.median(ts)*1e3],dtype=torch.float64); dist.all_reduce(x,op=dist.ReduceOp.MAX); return float(x)
for numel in [1<<20, 4<<20, 16<<20]:
    out=torch.randn(numel); inp=torch.randn(numel//S); chunk=out.chunk(S)[R]; scratch=torch.empty(numel//S)
    r=[t(lambda: dist.all_gather_into_tensor(out, inp)),
       t(lambda: dist.all_gather_into_tensor(out, chunk)),
       t(lambda: dist.all_gather_into_tensor(out, scratch.copy_(chunk))),
       t(lambda: chunk.clone())]
    if R==0: print(f"{numel*4>>20} MiB  AG {r[0]:.2f}  AG-inplace {r[1]:.2f}  AG-scratch {r[2]:.2f}  clone {r[3]:.2f} ms", flush=True)
dist.barrier(); os._exit(0)
