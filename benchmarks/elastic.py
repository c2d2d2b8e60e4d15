"""Elastic batch size against fixed batch sizes on CPU tasks: samples and time to a target.

A 2-layer MLP classifies generated data (labels from a random teacher network). Three ways to
train it: a fixed small batch (32, the base lr), a fixed large batch (512) with linear lr scaling
(x16), and ElasticBatchSize (initial 32, up to 1024, AdaScale lr). Each run stops at the target
validation accuracy or after the epoch budget. Two tasks:

- ``noisy-labels``: noise on the teacher's logits, a small base lr (0.005). The gradient noise is
  large from the start, so a large batch loses nothing and linear scaling is safe.
- ``clean-labels``: no label noise, a base lr tuned high for the small batch (0.2). Early on the
  gradient noise is small, so a large batch wastes samples, and x16 overshoots.

    .venv/bin/python benchmarks/elastic.py [--seeds 0 1 2] [--tasks noisy-labels clean-labels]

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


TASKS: dict[str, dict[str, float]] = {
    "noisy-labels": {"label_noise": 0.3, "base_lr": 0.005, "target": 0.795, "hidden": 64},
    "clean-labels": {"label_noise": 0.0, "base_lr": 0.2, "target": 0.93, "hidden": 64},
    "clean-labels-wide": {"label_noise": 0.0, "base_lr": 0.2, "target": 0.93, "hidden": 1024},
}
METHODS = ("small", "large-linear", "elastic")


def data(seed: int, label_noise: float) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(seed)
    teacher = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    with torch.no_grad():
        x = torch.randn(24_000, 20, generator=g)
        logits = teacher(x) * 3 + label_noise * torch.randn(24_000, 4, generator=g)
        y = logits.argmax(1)
    train = torch.utils.data.TensorDataset(x[:20_000], y[:20_000])
    return train, (x[20_000:], y[20_000:])


def train(method: str, seed: int, task: dict[str, float], epochs: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    train_set, (vx, vy) = data(seed, task["label_noise"])
    target = task["target"]
    hidden = int(task["hidden"])
    model = torch.nn.Sequential(
        torch.nn.Linear(20, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 4)
    )
    base_lr = task["base_lr"]
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
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=list(TASKS))
    parser.add_argument("--epochs", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)  # steadier timings on a shared machine
    runs = [
        {"task": name, **train(method, seed, TASKS[name], args.epochs)}
        for name in args.tasks
        for method in METHODS
        for seed in args.seeds
    ]
    lines = [
        f"MLP on generated data; seeds {args.seeds}; at most {args.epochs} epochs; CPU, one "
        "thread. Medians over seeds (a run that misses the target counts its whole budget).",
    ]
    for name in args.tasks:
        task = TASKS[name]
        lines += [
            "",
            f"**{name}** (label noise {task['label_noise']}, base lr {task['base_lr']}, target "
            f"validation accuracy {task['target']})",
            "",
            "| method | reached target | epochs | samples | seconds | global batch by epoch "
            f"(seed {args.seeds[0]}) |",
            "|---|---|---|---|---|---|",
        ]
        for method in METHODS:
            mine = [r for r in runs if r["task"] == name and r["method"] == method]
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
