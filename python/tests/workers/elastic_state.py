"""A loop kept alive by psyne.elastic.State under ``psyrun --on-failure continue``: the last rank
SIGKILLs itself at step 50 (mid-run, before its all-reduce); the survivors catch the error,
recover (revoke, shrink, roll back to the last commit, take the new rank 0's values) and finish.
Every step adds exactly 1 to every weight, so the weights must end equal to the step count on
every survivor, and the group must be one smaller."""

import os
import signal

import numpy as np

import psyne

STEPS = 200
g = psyne.init()
victim = g.size - 1
weights = np.zeros(1000, dtype=np.float64)
state = psyne.elastic.State(g, step=0, weights=weights)
recoveries = 0
while state.step < STEPS:
    try:
        if g.rank == victim and state.step == 50:
            os.kill(os.getpid(), signal.SIGKILL)
        grad = np.ones(1000, dtype=np.float64)
        state.group.all_reduce(grad, op="sum")
        weights += grad / state.group.size
        state.step += 1
        state.commit()
    except (psyne.PeerLostError, psyne.AbortedError, psyne.RevokedError):
        state.recover()
        recoveries += 1

assert state.group.size == g.size - 1, (state.group.size, g.size)
assert np.all(weights == STEPS), weights[:4]
assert recoveries == 1, recoveries
assert psyne.elastic.restart_count() == 0
print(f"OK elastic: rank {g.rank} is rank {state.group.rank} of {state.group.size} after 1 recovery")
