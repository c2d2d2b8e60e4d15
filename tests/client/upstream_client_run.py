"""One recurrence of a job through upstream Zeus 0.16's own client (``zeus.optimizer.batch_size
.client.BatchSizeOptimizer``, its ``ZeusMonitor`` measuring the GPU), as upstream's example
trains: ``get_batch_size``, ``on_train_begin``, ``on_evaluate`` after each epoch, until
``training_finished``. Run by upstream's Python (``.upstream``), not ours, over the NVML double.

    python upstream_client_run.py URL JOB_ID [--fail] [--no-id]

An epoch sleeps ``EPOCH_S x default / batch size`` (larger batches take fewer, as on a GPU);
the metric reaches 0.5 after ``2 x batch size / default`` epochs (larger batches need more), or
never with ``--fail``. With ``--no-id`` the job is given as upstream's docs give it, without
a ``job_id`` (JOB_ID's prefix alone). Prints one JSON line: the job's id as registered, the batch
size, the epochs, and ``failed`` where ``on_evaluate`` raised ``ZeusBSOTrainFailError``."""

from __future__ import annotations

import json
import math
import sys
import time

import torch

# The hardware this machine lacks, doubled as the NVML double doubles the GPU itself: CUDA, whose
# synchronisation ZeusMonitor calls at each window's edges (torch.cuda.synchronize), is there.
torch.cuda.is_available = lambda: True
torch.cuda.synchronize = lambda device=None: None

from zeus.monitor import ZeusMonitor  # noqa: E402
from zeus.optimizer.batch_size.client import BatchSizeOptimizer  # noqa: E402
from zeus.optimizer.batch_size.common import JobSpec  # noqa: E402
from zeus.optimizer.batch_size.exceptions import ZeusBSOTrainFailError  # noqa: E402

EPOCH_S = 0.1
DEFAULT = 32


def main() -> int:
    url, job_id = sys.argv[1], sys.argv[2]
    never = "--fail" in sys.argv
    monitor = ZeusMonitor(gpu_indices=[0])
    job = JobSpec(
        job_id=None if "--no-id" in sys.argv else job_id,
        job_id_prefix=job_id.rsplit("-", 1)[0],
        batch_sizes=[8, 16, 32, 64],
        default_batch_size=DEFAULT,
        target_metric=0.5,
        max_epochs=6,
    )
    bso = BatchSizeOptimizer(monitor=monitor, server_url=url, job=job)
    batch_size = bso.get_batch_size()
    needed = math.ceil(2 * batch_size / DEFAULT)
    bso.on_train_begin()
    epochs, failed = 0, False
    for epoch in range(1, job.max_epochs + 1):
        time.sleep(EPOCH_S * DEFAULT / batch_size)
        epochs = epoch
        try:
            bso.on_evaluate(0.0 if never else min(1.0, 0.5 * epoch / needed))
        except ZeusBSOTrainFailError:
            failed = True
            break
        if bso.training_finished:
            break
    ran = {"job_id": bso.job.job_id, "batch_size": batch_size, "epochs": epochs, "failed": failed}
    print(json.dumps(ran))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
