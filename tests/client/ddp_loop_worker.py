"""A plain PyTorch loop on every process of torchrun (gloo, on the CPU), as the training scripts
guide writes one: `TrialSession` on every rank, rank 0 talking to the server. First, rank 1
tries a `BatchSizeOptimizer` of its own, which refuses to register a second run. With
``apart``, each rank reports a metric of its own share of the validation set, not gathered (its
accuracy there, which differs between ranks), as hand-written loops often do. Each epoch takes
an optimizer step of a two-layer model (90 parameters): replicated on each rank with ``apart``,
otherwise sharded across the ranks by FSDP's ``fully_shard``, whose parameters each rank holds
half of.

    torchrun --nproc_per_node 2 tests/client/ddp_loop_worker.py SERVER_URL JOB_ID OUT_DIR [apart]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from zeus_bso import JobSpec
from zeus_bso.energy import EstimateMeter
from zeus_bso.errors import ConfigurationError
from zeus_bso.training import BatchSizeOptimizer, TrialSession


def main() -> None:
    server_url, job_id, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    apart = sys.argv[4:] == ["apart"]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    job = JobSpec(
        job_id=job_id,
        job_id_prefix="ddploop",
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=0.5,
        max_epochs=4,
    )
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 2))
    if not apart:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        fully_shard(model, mesh=init_device_mesh("cpu", (dist.get_world_size(),)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    refused = None
    if rank == 1:
        try:
            BatchSizeOptimizer(server_url, job, energy_meter=EstimateMeter(100)).get_batch_size()
        except ConfigurationError as error:
            refused = str(error)
    meter = EstimateMeter(100)
    with TrialSession(
        rank == 0, lambda values, step: None, server_url, job, energy_meter=meter
    ) as session:
        batch_size = session.batch_size
        session.train_begin()
        epochs = 0
        for epoch in range(job.max_epochs):
            time.sleep(0.05)  # an epoch's training
            optimizer.zero_grad()
            model(torch.ones(batch_size, 8)).sum().backward()
            optimizer.step()
            epochs += 1
            share = 0.05 * rank if apart else 0.0  # its share's metric differs from rank 0's
            if session.report(0.2 + 0.2 * epoch + share):  # every rank gets rank 0's answer
                break
    seen = {
        "batch_size": batch_size,
        "epochs": epochs,
        "trial_number": session.trial_number,
        "refused": refused,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(seen))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
