"""What `ElasticBatchSize` costs a training step on one process: its measurement of each
micro-batch's gradient (`record_microbatch`) and of the step (the wrapped ``optimizer.step``),
beside the micro-batch's own forward and backward.

A stack of linear and layer-norm layers (many parameter tensors, as real models have: the cost
grows with their number), two micro-batches a step. Each figure is the median over repeats of
the mean over the steps of one repeat.

    .venv/bin/python benchmarks/elastic_overhead.py [--layers 60] [--device cpu|cuda]

Writes benchmarks/results/elastic_overhead.{json,md}.
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


def one_repeat(layers: int, width: int, device: str, steps: int) -> dict[str, float]:
    torch.manual_seed(0)
    blocks: list[torch.nn.Module] = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.LayerNorm(width)]
    model = torch.nn.Sequential(*blocks).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    ebs = ElasticBatchSize(32, lr_rule="adascale")  # two micro-batches of 16 a step
    ebs.attach(optimizer)
    x = torch.randn(16, width, device=device)
    target = torch.randn(16, width, device=device)

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    spent = {"forward_backward": 0.0, "record_microbatch": 0.0, "step": 0.0}
    for step in range(steps + 2):  # the first two warm up
        if step == 2:
            spent = dict.fromkeys(spent, 0.0)
        for _ in range(ebs.accumulation_steps):
            sync()
            started = time.perf_counter()
            (torch.nn.functional.mse_loss(model(x), target) / ebs.accumulation_steps).backward()
            sync()
            recorded = time.perf_counter()
            ebs.record_microbatch(model.parameters())
            sync()
            spent["forward_backward"] += recorded - started
            spent["record_microbatch"] += time.perf_counter() - recorded
        sync()
        started = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad()
        sync()
        spent["step"] += time.perf_counter() - started
    micro_batches = steps * ebs.accumulation_steps
    return {
        "forward_backward_ms": 1e3 * spent["forward_backward"] / micro_batches,
        "record_microbatch_ms": 1e3 * spent["record_microbatch"] / micro_batches,
        "step_ms": 1e3 * spent["step"] / steps,
        "parameter_tensors": float(len(list(model.parameters()))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=60)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(1)
    repeats = [
        one_repeat(args.layers, args.width, args.device, args.steps) for _ in range(args.repeats)
    ]
    medians: dict[str, Any] = {
        name: statistics.median(r[name] for r in repeats) for name in repeats[0]
    }
    share = medians["record_microbatch_ms"] / medians["forward_backward_ms"]
    RESULTS.mkdir(exist_ok=True)
    out = {"args": vars(args), "repeats": repeats, "medians": medians}
    (RESULTS / "elastic_overhead.json").write_text(json.dumps(out, indent=1))
    lines = [
        f"Device {args.device}; {args.layers} linear + layer-norm layers of width {args.width} "
        f"({int(medians['parameter_tensors'])} parameter tensors); two micro-batches of 16 a "
        f"step; medians of {args.repeats} repeats of {args.steps} steps.",
        "",
        "| forward + backward (a micro-batch) | record_microbatch | its share | optimizer step "
        "(wrapped) |",
        "|---:|---:|---:|---:|",
        f"| {medians['forward_backward_ms']:.2f} ms | {medians['record_microbatch_ms']:.2f} ms "
        f"| {share:.0%} | {medians['step_ms']:.2f} ms |",
    ]
    (RESULTS / "elastic_overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
