"""Elastic batch size against fixed batch sizes on a CPU task: samples and time to a target.

A 2-layer MLP classifies generated data (a noisy teacher network). Three ways to train it:
a fixed small batch (32, lr 0.005), a fixed large batch (512) with linear lr scaling (x16), and
ElasticBatchSize (initial 32, up to 1024, AdaScale lr). Each run stops at the target validation
accuracy or after the epoch budget.

    .venv/bin/python benchmarks/elastic.py [--seeds 0 1 2] [--target 0.795]

Writes benchmarks/results/elastic.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from zeus_bso.elastic import ElasticBatchSize

RESULTS = Path(__file__).parent / "results"


def data(seed: int) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(seed)
    teacher = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    with torch.no_grad():
        x = torch.randn(24_000, 20, generator=g)
        logits = teacher(x) * 3 + 0.3 * torch.randn(24_000, 4, generator=g)
        y = logits.argmax(1)
    train = torch.utils.data.TensorDataset(x[:20_000], y[:20_000])
    return train, (x[20_000:], y[20_000:])


def train(method: str, seed: int, target: float, epochs: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    train_set, (vx, vy) = data(seed)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    base_lr = 0.005
    ebs = None
    if method == "small":
        batch, lr, accumulation = 32, base_lr, 1
    elif method == "large-linear":
        batch, lr, accumulation = 512, base_lr * 16, 1
    else:
        ebs = ElasticBatchSize(32, max_batch_size=1024, local_bsz_bounds=(16, 512))
        batch, lr, accumulation = 32, base_lr, 1
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    if ebs is not None:
        ebs.attach(optimizer)
    samples, started, reached = 0, time.perf_counter(), None
    sizes = []
    for epoch in range(1, epochs + 1):
        if ebs is not None:
            batch, accumulation = ebs.get_local_bsz(), ebs.accumulation_steps
        sizes.append(batch * accumulation)
        loader = torch.utils.data.DataLoader(
            train_set, batch_size=batch, shuffle=True, drop_last=True
        )
        for i, (x, y) in enumerate(loader):
            if ebs is not None:
                with ebs.timed_microbatch(len(x)):
                    loss = torch.nn.functional.cross_entropy(model(x), y) / accumulation
                    loss.backward()
                ebs.record_microbatch(model.parameters())
            else:
                torch.nn.functional.cross_entropy(model(x), y).backward()
            samples += len(x)
            if (i + 1) % accumulation == 0:
                optimizer.step()
                optimizer.zero_grad()
        with torch.no_grad():
            accuracy = float((model(vx).argmax(1) == vy).float().mean())
        if accuracy >= target:
            reached = epoch
            break
    return {
        "method": method,
        "seed": seed,
        "reached_epoch": reached,
        "accuracy": accuracy,
        "samples": samples,
        "seconds": time.perf_counter() - started,
        "global_batch_per_epoch": sizes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--target", type=float, default=0.795)
    parser.add_argument("--epochs", type=int, default=40)
    args = parser.parse_args()
    runs = [
        train(method, seed, args.target, args.epochs)
        for method in ("small", "large-linear", "elastic")
        for seed in args.seeds
    ]
    lines = [
        f"MLP on generated data, target validation accuracy {args.target}, seeds {args.seeds}, "
        f"at most {args.epochs} epochs (CPU). Median over seeds.",
        "",
        "| method | reached target | epochs | samples | seconds | global batch by epoch (seed 0) |",
        "|---|---|---|---|---|---|",
    ]
    for method in ("small", "large-linear", "elastic"):
        mine = [r for r in runs if r["method"] == method]
        reached = [r for r in mine if r["reached_epoch"] is not None]
        epochs = statistics.median(r["reached_epoch"] or args.epochs for r in mine)
        lines.append(
            f"| {method} | {len(reached)}/{len(mine)} | {epochs:g} "
            f"| {statistics.median(r['samples'] for r in mine):,.0f} "
            f"| {statistics.median(r['seconds'] for r in mine):.1f} "
            f"| {mine[0]['global_batch_per_epoch']} |"
        )
    markdown = "\n".join(lines) + "\n"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "elastic.json").write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1))
    (RESULTS / "elastic.md").write_text(markdown)
    print(markdown)


if __name__ == "__main__":
    main()
