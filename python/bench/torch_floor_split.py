"""Where the time of an 8-byte `dist.all_reduce` on the psyne backend goes (issue 36): the same
call on torch's `fake` backend (C++, does nothing), and on three Python ProcessGroups that return a
finished Work and do, each, nothing ("empty"), only psyne's native all-reduce with its arguments
computed once ("nativeonly"), or only the checks psyne's hot path makes on the options and the
tensor ("checksonly"); then psyne itself as the default group and as a second group. Alternated
rounds, the slowest rank's mean per call, medians. Every group's all-reduce runs on the same
tensor (the empty ones leave it as it is; the result is not checked: this times dispatch).
With psyne.torch's C++ half loaded (psyne/_torch_hot.py), a third psyne group has it removed
("psyne(python path)": its ``allreduce`` is the Python method), so both halves run in one job.

    psyrun --bind-to none -n 2 python python/bench/torch_floor_split.py
"""
import statistics
import time
import torch, torch.distributed as dist
import psyne.torch as pt
import torch.testing._internal.distributed.fake_pg  # noqa
from psyne import _torch_work
DONE = _torch_work.Done([])
dist.init_process_group("psyne")
S = dist.get_world_size()
default = dist.distributed_c10d._get_default_group()
N = default.psyne_group._n
t = torch.ones(2)
TAG, OP, PTR = pt._DTYPES[t.dtype], pt._SUM, t.data_ptr()

class Base(dist.ProcessGroup):
    def __init__(self, rank, size): super().__init__(rank, size)
    def getBackendName(self): return self.NAME
class Empty(Base):
    NAME = "empty"
    def allreduce(self, tensors, opts=None): return DONE
class NativeOnly(Base):
    NAME = "nativeonly"
    def allreduce(self, tensors, opts=None):
        N.run_all_reduce(TAG, PTR, 2, OP); return DONE
class ChecksOnly(Base):
    """What psyne's blocking all_reduce reads before its native call (psyne/torch.py), and no
    more."""

    NAME = "checksonly"

    def allreduce(self, tensors, opts=None):
        if opts is not None and not opts.asyncOp:
            checked = [opts.reduceOp == pt._RO_SUM, torch.are_deterministic_algorithms_enabled()]
            for x in tensors:
                tag = pt._DTYPES.get(x.dtype)
                if tag is None or not x.is_cpu or x.layout is not torch.strided or not x.is_contiguous():
                    raise ValueError("not a dense CPU tensor of a psyne dtype")
                checked += [x.data_ptr(), x.numel()]
        return DONE


for cls in (Empty, NativeOnly, ChecksOnly):
    dist.Backend.register_backend(cls.NAME, (lambda c: lambda store, rank, size, timeout: c(rank, size))(cls), devices=["cpu"])
groups = {"fake": dist.new_group(list(range(S)), backend="fake")}
for cls in (Empty, NativeOnly, ChecksOnly):
    groups[cls.NAME] = dist.new_group(list(range(S)), backend=cls.NAME)
groups["psyne(default)"] = None
groups["psyne(new_group)"] = dist.new_group(list(range(S)), backend="psyne")
if pt._HOT is not None:
    python_path = dist.new_group(list(range(S)), backend="psyne")
    del python_path.allreduce  # the instance's C++ half: the class's Python method remains
    groups["psyne(python path)"] = python_path
def per_call(group, k=5000):
    for _ in range(500): dist.all_reduce(t, group=group)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(k): dist.all_reduce(t, group=group)
    dt = (time.perf_counter() - t0) / k * 1e6
    x = torch.tensor([dt], dtype=torch.float64); dist.all_reduce(x, op=dist.ReduceOp.MAX); return x.item()
res = {k: [] for k in groups}
ROUNDS = 5
for rnd in range(ROUNDS):
    names = list(groups) if rnd % 2 == 0 else list(reversed(groups))
    for name in names:
        res[name].append(per_call(groups[name]))
if dist.get_rank() == 0:
    for name, v in res.items(): print(f"{name:18s} {statistics.median(v):6.2f} us ({min(v):.2f}-{max(v):.2f})")
dist.destroy_process_group()
