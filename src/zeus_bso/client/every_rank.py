"""Whether every process of a run ran out of memory, before `zeus_bso.until_converged` starts
the next attempt after out of memory.

A run of several processes (DDP, FSDP: a process group) can start the next attempt only where
every process ran out: one that did not is waiting in a collective of the failed attempt (the
gradients' all-reduce) for the one that did. Had the processes that ran out started the next
attempt, their first collective (the broadcast of the next batch size) would not match the one
the others wait in, and every process would wait until the process group's timeout (NCCL: 10
to 30 minutes of idle GPUs). So each process that ran out says so in the process group's store
(the rendezvous's key-value store, which a process waiting in a collective does not block) and
waits for the others to say so too (`every_rank_ran_out`); where they do not within
`PATIENCE_S`, it raises its error instead, and the launcher (``torchrun``) ends the run. Its
trial is marked infeasible all the same (`zeus_bso.training.apart`), so the next recurrence
gets a size that fits.
"""

from __future__ import annotations

import itertools
import sys
import time
from typing import Any

PATIENCE_S = 30.0
"""How long a process that ran out of memory waits for every other to say so."""
_POLL_S = 0.05

_ROUNDS = itertools.count(1)
"""This process's count of waits (the same on every process of a run whose processes ran out
together, attempt after attempt)."""


def every_rank_ran_out(patience: float | None = None) -> bool:
    """Whether every process of this run ran out of memory in the attempt under way: True in a
    run of one process (or where the process group has no store); else each says so in the
    store, and this waits up to ``patience`` seconds (None: `PATIENCE_S`) for all to have said
    it (a store that cannot be reached any more, its process gone: False)."""
    patience = PATIENCE_S if patience is None else patience
    store, world = _group_store()
    if store is None or world <= 1:
        return True
    key = f"zeus-bso/until-converged/ran-out/{next(_ROUNDS)}"
    try:
        said = int(store.add(key, 1))
        deadline = time.monotonic() + patience
        while said < world and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            said = int(store.add(key, 0))
    except RuntimeError:  # torch.distributed.DistError: the store's process is gone
        return False
    return said >= world


def _group_store() -> tuple[Any, int]:
    """The default process group's store and its world size; (None, 1) without a group of
    several (torch not imported: none)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None, 1
    world = dist.get_world_size()
    if world <= 1:
        return None, world
    default_store = getattr(dist.distributed_c10d, "_get_default_store", None)
    try:
        return (default_store() if default_store is not None else None), world
    except (RuntimeError, ValueError):  # a group without a store of its own
        return None, world
