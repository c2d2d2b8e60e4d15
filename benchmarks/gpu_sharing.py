"""A run on a GPU that another process computes on, on a real GPU: ``gpu_check.py``'s part
``sharing``. Two runs of a job with the default meter (NVML): the first alone, the second while
a process started apart from the run (not one of its processes, nor started by one) computes on
the same GPU. Passed when the first run's outcome names no GPU and the second names its GPU,
with one warning.

``accelerator``: ``"cuda"`` on the GPU machine (the other process multiplies matrices on
``cuda:0``); ``"cpu"`` for the dry run the test suite makes of it
(``tests/integrations/test_gpu_check_parts.py``), where NVML is the test double and ``other``
says the double's GPU has another process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

COMPUTE_APART = """
import os, sys, time
if os.fork():  # the process started ends; its child, apart from the starter's, computes
    os._exit(0)
import torch
x = torch.randn(4096, 4096, device="cuda")
torch.cuda.synchronize()
print(os.getpid(), flush=True)
while True:
    x = (x @ x).tanh()
"""
"""Another user's job on the GPU: a process no process of the run started."""


@contextlib.contextmanager
def computing_apart() -> Iterator[None]:
    """A process apart from this one computing on ``cuda:0`` while the block runs."""
    started = subprocess.Popen(
        [sys.executable, "-c", COMPUTE_APART], stdout=subprocess.PIPE, text=True
    )
    assert started.stdout is not None
    pid = int(started.stdout.readline())
    started.wait()
    try:
        yield
    finally:
        os.kill(pid, signal.SIGKILL)


def _run(url: str, accelerator: str, prefix: str) -> tuple[Any, list[str]]:
    """A run of the job (three epochs of matrix products on ``accelerator``, converging at the
    third), its outcome and the warnings it logged."""
    import torch

    from zeus_bso import BatchSizeOptimizer, JobSpec

    said: list[str] = []

    class Said(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    handler = Said(logging.WARNING)
    logging.getLogger("zeus_bso").addHandler(handler)
    job = JobSpec(job_id_prefix=prefix, batch_sizes=[32, 64], default_batch_size=64,
                  target_metric=0.9, max_epochs=3)  # fmt: skip
    try:
        with BatchSizeOptimizer(url, job) as bso:
            bso.get_batch_size()
            bso.on_train_begin()
            x = torch.randn(1024, 1024, device=accelerator)
            for metric in (0.5, 0.7, 0.95):
                for _ in range(200 if accelerator == "cuda" else 2):
                    x = (x @ x).tanh()
                if accelerator == "cuda":
                    torch.cuda.synchronize()
                if bso.on_evaluate(metric).stop_train:
                    break
        return bso.outcome, said
    finally:
        logging.getLogger("zeus_bso").removeHandler(handler)


def sharing_check(
    url: str,
    accelerator: str,
    other: Callable[[], contextlib.AbstractContextManager[Any]] = computing_apart,
) -> dict[str, Any]:
    """The two runs (alone, then beside ``other``): what each outcome names, and the warnings."""
    prefix = f"gpu-sharing-{uuid.uuid4().hex[:8]}"
    alone, said_alone = _run(url, accelerator, prefix)
    with other():
        shared, said_shared = _run(url, accelerator, prefix)
    gpus = list(shared.shared_gpus)
    warnings = [w for w in said_alone + said_shared if "is shared with" in w]
    return {
        "alone": list(alone.shared_gpus),
        "shared": gpus,
        "warnings": warnings,
        "line": shared.summary(),
        "passed": alone.shared_gpus == () and len(gpus) == 1 and len(warnings) == 1,
    }
