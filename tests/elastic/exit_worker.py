"""One rank of a two-process gloo group whose process ends while a gloo worker thread still
holds Python work (started by test_exit.py).

    python tests/elastic/exit_worker.py RANK STORE_FILE hook|collective on|off

``hook``: ElasticBatchSize's DDP communication hook has handed its callback to the worker.
``collective``: an all-reduce whose tensor the caller dropped, which the worker then frees, as
``broadcast_object_list`` does with its own tensors. The main thread holds the GIL (a long switch
interval, then a C call that sleeps without releasing it) while the all-reduce completes, so the
worker is left waiting for the GIL; the program then ends. The hold lasts `HOLD_S` and burns no
CPU, where 0.5 s of busy waiting took a core from the peer and the workers on a loaded machine.
An object freed while the interpreter finalizes releases the GIL (as a library's destructor that
blocks does), so a worker still waiting then wakes into a finalizing interpreter. ``off`` turns
`zeus_bso.training.clean_exit` and `clean_exit.then` off, to show what happens without them.
"""

from __future__ import annotations

import ctypes
import sys
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from zeus_bso.elastic import ElasticBatchSize
from zeus_bso.training import clean_exit
from zeus_bso.training.collectives import from_rank_zero


class _Bucket:
    """What the hook reads of DDP's GradBucket: its flat gradient buffer and its index."""

    def __init__(self, buffer: Any) -> None:
        self._buffer = buffer

    def buffer(self) -> Any:
        return self._buffer

    def index(self) -> int:
        return 0


class _Model:
    """What ElasticBatchSize.attach reads of a DDP model: register_comm_hook."""

    hook: Any = None

    def register_comm_hook(self, state: Any, hook: Any) -> None:
        self.hook = hook


def _broadcast(value: Any) -> Any:
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


HOLD_S = 2.0
"""How long the main thread holds the GIL after starting the collective (see the module's
docstring): long enough for a peer that a busy machine delays to take its part."""


class _BlocksWhenFreed:
    def __del__(self) -> None:
        time.sleep(0.2)  # releases the GIL while the interpreter finalizes


def main() -> None:
    rank, store, scenario, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    if mode == "off":
        clean_exit.register_at_exit = lambda: None  # type: ignore[assignment]
        clean_exit.then = lambda future, callback: future.then(callback)  # type: ignore[assignment]
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=2,
        timeout=timedelta(seconds=60),
    )
    model = _Model()
    if scenario == "hook":
        ebs = ElasticBatchSize(16, min_accumulation=1)
        ebs.attach(torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1), ddp_model=model)
    else:  # shares a decision as our callbacks do, which registers clean_exit
        from_rank_zero(_broadcast, rank == 0, lambda: "go")
    dist.barrier()
    sys.setswitchinterval(1000.0)  # the worker cannot ask the main thread for the GIL
    if scenario == "hook":
        model.hook(None, _Bucket(torch.ones(8) * (rank + 1)))
    else:
        dist.all_reduce(torch.ones(8) * (rank + 1), async_op=True)  # the tensor is dropped
    # Holds the GIL while the all-reduce completes: ctypes.PyDLL keeps it through the call.
    ctypes.PyDLL(None).usleep(int(HOLD_S * 1e6))
    globals()["blocks_when_freed"] = _BlocksWhenFreed()


if __name__ == "__main__":
    main()
