"""Upstream Zeus's MNIST example's loop shape, on zeus-bso's client: ``get_batch_size``,
``on_train_begin``, ``on_evaluate`` every epoch, ``break`` on ``training_finished``; no
``with`` and no ``end()``. With ``raise_if_unconverged=True`` a run that ends without reaching
its target raises ``ZeusBSOTrainFailError`` from ``on_evaluate``, as upstream's client does.

    python upstream_loop.py --job NAME [--target 0.9] [--oom-above N] [--kill-at-epoch N]
        [--attempts N]

A run killed and launched again with the same ``ZEUS_BSO_RUN_KEY`` (as a Kubernetes Job restarts
its pod) continues its trial, as upstream's examples, which save no checkpoint, can. With
``--attempts`` above 1, a recurrence runs the loop until one run delivers a model
(`zeus_bso.until_converged`).
"""

from __future__ import annotations

import argparse

import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.scripts.faults import kill_at_epoch, out_of_memory_above
from zeus_bso import BatchSizeOptimizer, JobSpec, RunOutcome, until_converged
from zeus_bso.scaling import LinearScaler


def dataset(n: int, seed: int) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 7, generator=g)
    return TensorDataset(x, (x[:, 2] - x[:, 3] > 0).long())


def train(model, loader, optimizer, oom_above: int) -> None:
    model.train()
    for x, y in loader:
        out_of_memory_above(oom_above, x)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


def validate(model, data) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(data.tensors[0]).argmax(1) == data.tensors[1]).float().mean())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--target", type=float, default=0.85)
    parser.add_argument("--oom-above", type=int, default=0)
    parser.add_argument("--kill-at-epoch", type=int, default=0)
    parser.add_argument("--attempts", type=int, default=1)
    args = parser.parse_args(argv)
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=4,
    )

    def one_run() -> RunOutcome | None:
        torch.manual_seed(0)
        bso = BatchSizeOptimizer(job=job, raise_if_unconverged=True)
        batch_size = bso.get_batch_size()
        loader = DataLoader(dataset(96, 0), batch_size=batch_size, shuffle=True)
        model = torch.nn.Sequential(torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        # As upstream's examples do: the rate tuned at the default, scaled by hand.
        lr = LinearScaler(initial_lr=0.1, initial_batch_size=16).compute_lr(batch_size)
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        val = dataset(64, 1)
        bso.on_train_begin()
        for epoch in range(job.max_epochs):
            kill_at_epoch(args.kill_at_epoch, epoch)
            train(model, loader, optimizer, args.oom_above)
            bso.on_evaluate(validate(model, val))
            if bso.training_finished:
                break
        return bso.outcome

    if args.attempts > 1:
        until_converged(one_run, attempts=args.attempts)
    else:
        one_run()


if __name__ == "__main__":
    main()
