"""One rank of a two-process gloo group whose process ends right after ElasticBatchSize's DDP
communication hook handed its callback to a worker thread (started by test_exit.py).

    python tests/elastic/exit_worker.py RANK STORE_FILE tracked|untracked

The main thread holds the GIL (a long switch interval, a busy wait) while the all-reduce
completes, so the worker thread is left waiting for the GIL with the hook's callback still to
run and drop; the program then ends. An object freed while the interpreter finalizes releases
the GIL (as a library's destructor that blocks does), so a worker still waiting then wakes into
a finalizing interpreter. ``untracked`` turns off `callbacks_in_flight.then`, to show what
happens without it.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from zeus_bso.elastic import ElasticBatchSize, callbacks_in_flight


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


class _BlocksWhenFreed:
    def __del__(self) -> None:
        time.sleep(0.2)  # releases the GIL while the interpreter finalizes


def main() -> None:
    rank, store, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    if mode == "untracked":
        callbacks_in_flight.then = lambda future, callback: future.then(callback)  # type: ignore[assignment]
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=2,
        timeout=timedelta(seconds=60),
    )
    ebs = ElasticBatchSize(16, min_accumulation=1)
    model = _Model()
    ebs.attach(torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1), ddp_model=model)
    dist.barrier()
    sys.setswitchinterval(1000.0)  # the worker cannot ask the main thread for the GIL
    model.hook(None, _Bucket(torch.ones(8) * (rank + 1)))
    until = time.monotonic() + 0.5
    while time.monotonic() < until:  # holds the GIL while the all-reduce completes
        pass
    globals()["blocks_when_freed"] = _BlocksWhenFreed()


if __name__ == "__main__":
    main()
