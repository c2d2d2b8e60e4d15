"""A loop counted in iterations, as nanoGPT's ``train.py`` and the LLM pretraining loops after it
are written: batches drawn at random from the training data (``get_batch``), no epochs, a
warm-up and a cosine decay computed by hand each iteration (``get_lr``), an evaluation every
``eval_interval`` iterations up to ``max_iters``. Those counts are tuned at the job's default
batch size, and the script takes this run's for them from ``bso.steps_for``, so that every
evaluation (one of the job's epochs) is the same samples at every batch size.

    python iteration_loop.py --job NAME [--target 0.9]
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

from zeus_bso import BatchSizeOptimizer, JobSpec

EVAL_INTERVAL = 6  # iterations of the default's 16 samples
MAX_ITERS = 48
WARMUP_ITERS = 4
LEARNING_RATE = 0.2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--job", required=True)
    parser.add_argument("--target", type=float, default=0.85)
    args = parser.parse_args(argv)
    job = JobSpec(
        job_id_prefix=args.job,
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=args.target,
        max_epochs=4,  # evaluations
    )
    g = torch.Generator().manual_seed(0)
    data = torch.randn(2048, 7, generator=g)
    labels = (data[:, 1] + data[:, 5] > 0).long()
    held_out = torch.randn(256, 7, generator=g)
    held_out_labels = (held_out[:, 1] + held_out[:, 5] > 0).long()

    with BatchSizeOptimizer(job=job, lr_rule="linear") as bso:
        batch_size = bso.get_batch_size()
        eval_interval = bso.steps_for(EVAL_INTERVAL)
        max_iters, warmup_iters = bso.steps_for(MAX_ITERS), bso.steps_for(WARMUP_ITERS)

        def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
            ix = torch.randint(len(data), (batch_size,), generator=g)
            return data[ix], labels[ix]

        def get_lr(it: int) -> float:
            if it < warmup_iters:
                return LEARNING_RATE * (it + 1) / (warmup_iters + 1)
            decay = (it - warmup_iters) / max(1, max_iters - warmup_iters)
            return 0.1 * LEARNING_RATE + 0.45 * LEARNING_RATE * (1 + math.cos(math.pi * decay))

        @torch.no_grad()
        def estimate_accuracy(model: torch.nn.Module) -> float:
            model.eval()
            accuracy = float((model(held_out).argmax(1) == held_out_labels).float().mean())
            model.train()
            return accuracy

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(7, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
        bso.scale(optimizer)
        bso.on_train_begin()
        for it in range(max_iters):
            for group in optimizer.param_groups:
                group["lr"] = get_lr(it)
            x, y = get_batch()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if (it + 1) % eval_interval == 0:
                with bso.evaluating():
                    accuracy = estimate_accuracy(model)
                if bso.on_evaluate(accuracy).stop_train:
                    break
    return 0 if bso.outcome is not None and bso.outcome.converged else 1


if __name__ == "__main__":
    sys.exit(main())
