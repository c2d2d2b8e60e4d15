"""How long a micro-batch's forward and backward took, for the throughput model.

CUDA runs kernels asynchronously: a backward returns once its kernels are queued, so a host
clock around it measures their launch, and every batch size looks about as fast as its
launches. Where CUDA is in use, a micro-batch is timed by events recorded in the stream's order
(its device's time, the work queued before it excluded), read when the sizes are next chosen:
no synchronisation within the steps. Elsewhere, by the host's clock."""

from __future__ import annotations

import time
from typing import Any

from zeus_bso.elastic.goodput import ThroughputModel
from zeus_bso.energy.device_sync import cuda_in_use

READ_AFTER = 256
"""Micro-batches timed on the device before the finished ones are read (their events freed)."""


class MicroBatchTimer:
    """Starts and stops a micro-batch's timing; the times go to a `ThroughputModel`."""

    def __init__(self) -> None:
        self._pending: list[tuple[int, Any, Any]] = []
        """Micro-batches timed on the device and not yet read: size, start and end events."""

    def start(self) -> Any:
        """A micro-batch's start (pass it to `stop`)."""
        cuda = cuda_in_use()
        if cuda is None:
            return time.perf_counter()
        started = cuda.Event(enable_timing=True)
        started.record()
        return started

    def stop(self, started: Any, local_bsz: int, throughput: ThroughputModel) -> None:
        """A micro-batch of ``local_bsz`` samples ends, which ``started`` started."""
        if isinstance(started, float):
            throughput.observe(local_bsz, time.perf_counter() - started)
            return
        cuda = cuda_in_use()
        assert cuda is not None  # started on the device
        ended = cuda.Event(enable_timing=True)
        ended.record()
        self._pending.append((local_bsz, started, ended))
        if len(self._pending) >= READ_AFTER:
            self.read(throughput, wait=False)

    def read(self, throughput: ThroughputModel, wait: bool = True) -> None:
        """The device's times of the micro-batches timed so far, into ``throughput``
        (``wait``: all of them, waiting for the device's work to finish; else those done)."""
        left = []
        for local_bsz, started, ended in self._pending:
            if wait:
                ended.synchronize()
            elif not ended.query():
                left.append((local_bsz, started, ended))
                continue
            throughput.observe(local_bsz, started.elapsed_time(ended) / 1000.0)
        self._pending = left
