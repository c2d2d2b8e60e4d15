"""What each rank of tests/elastic/test_replicas.py's two-process gloo groups runs.

A module of its own, apart from the tests: ``torch.multiprocessing.spawn`` imports the module of
the function it runs in every rank it starts, and the test module imports Lightning (some 5 CPU
seconds a process) for a test of its own that these ranks do not need.
"""

from __future__ import annotations

import datetime
import faulthandler
import gc
import json
from pathlib import Path
from typing import Any

import torch

from zeus_bso.elastic import ElasticBatchSize

# The estimates' spread comes mostly from the smoothing (0.998: about a thousand steps' worth), not
# the number of steps past it: over 24 seeds of both ranks' samples, 1000 steps put |G|^2 within
# 13% and tr(S) within 5% of the closed form (2500 steps, over 8 of those seeds: 12% and 2%); the
# test allows 20% and 15%.
D, SIGMA, LOCAL_BATCH, STEPS = 5, 1.0, 8, 1000
DELTA = [0.3, -0.2, 0.1, 0.0, 0.4]


def init(rank: int, world: int, store: str) -> Any:
    # A stuck collective fails after a minute with its stack, instead of hanging the suite.
    faulthandler.dump_traceback_later(90, exit=True)
    dist = torch.distributed
    dist.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    return dist


def run_rank(rank: int, body: Any, world: int, store: str, out: str) -> None:
    """Run ``body(rank, world)`` in a process group and write what it returns to a file.

    The DDP model, its communication hook and the optimizer live only inside ``body``, so they
    are freed while the group is still alive. Freed after ``destroy_process_group``, the last
    reference to the Gloo group goes with the DDP reducer, whose destructor waits for Gloo's
    worker threads while holding the GIL; a worker that still has a Python callback to drop
    needs the GIL, and the rank hangs on exit (seen once in CI).
    """
    dist = init(rank, world, store)
    try:
        result = body(rank, world)
        gc.collect()
        Path(out, f"rank{rank}.json").write_text(json.dumps(result))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def least_squares(rank: int, world: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(100 + rank)  # each replica its own samples
    w_star = torch.zeros(D, 1)
    model = torch.nn.Linear(D, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([DELTA]))  # w = w* + delta, held still (lr 0)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.0)
    ebs = ElasticBatchSize(
        LOCAL_BATCH * world, min_accumulation=1, smoothing=0.998, max_batch_size=1024
    )
    ebs.attach(optimizer, ddp_model=ddp)
    assert ebs.choice.local_bsz == LOCAL_BATCH
    assert ebs.replicas == world
    for _ in range(STEPS):
        x = torch.randn(LOCAL_BATCH, D, generator=g)
        y = x @ w_star + SIGMA * torch.randn(LOCAL_BATCH, 1, generator=g)
        loss = 0.5 * (ddp(x) - y).pow(2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    # Each rank measured a different speed, so each would choose differently on its own.
    for local, seconds in ((8, 0.001 * (1 + rank)), (16, 0.0012 * (1 + 3 * rank))):
        for _ in range(3):
            ebs.throughput.observe(local, seconds)
    choice = ebs.get_local_bsz()
    return {
        "sqr": ebs.noise.sqr,
        "var": ebs.noise.var,
        "choice": [choice, ebs.accumulation_steps, ebs.replicas],
    }


def unsynced(rank: int, world: int) -> dict[str, Any]:
    torch.manual_seed(rank)
    ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
    ebs = ElasticBatchSize(16, min_accumulation=2)
    ebs.attach(optimizer, ddp_model=ddp)
    for _ in range(5):
        for _ in range(ebs.accumulation_steps):  # no ddp.no_sync(): each backward syncs
            ddp(torch.randn(4, 4)).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
    return {"var": ebs.noise.var}


def both(rank: int, world: int) -> dict[str, Any]:
    """`least_squares`, then `unsynced`, in one process group: two more processes, each
    importing torch, would repeat what this one has done."""
    return {"least_squares": least_squares(rank, world), "unsynced": unsynced(rank, world)}
