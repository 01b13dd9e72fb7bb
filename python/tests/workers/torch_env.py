"""Started by torchrun (or by hand with env:// variables), not psyrun: init_process_group("psyne")
forms the group through torch's own store."""

import os
import sys

import torch
import torch.distributed as dist

import psyne.torch  # noqa: F401

dist.init_process_group("psyne")
R, S = dist.get_rank(), dist.get_world_size()
assert "PSY_STORE" not in os.environ
t = torch.full((1 << 16,), float(R + 1))
dist.all_reduce(t)
assert torch.all(t == S * (S + 1) / 2), t[:4]
o = torch.empty(S, dtype=torch.int64)
dist.all_gather_into_tensor(o, torch.tensor([R]))
assert o.tolist() == list(range(S)), o
dist.barrier()
print(f"rank {R}/{S}: env OK", flush=True)
dist.destroy_process_group()
sys.exit(0)
