"""Shared bits of the examples: arguments, and the loops' data and job."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

from zeus_bso import JobSpec, RunOutcome, until_converged


def data(n: int, seed: int) -> Any:
    """A classification task the loop examples generate: 16 features, the label is whether
    the first four add up to more than 0 (a ``torch.utils.data.TensorDataset``)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    y = (x[:, :4].sum(dim=1) > 0).long()
    return torch.utils.data.TensorDataset(x, y)


def loss_of(model: Any, batch: Any) -> Any:
    """The training loss of a batch of ``data``'s features and their classes."""
    import torch

    features, classes = batch
    return torch.nn.functional.cross_entropy(model(features), classes)


def loop_job(prefix: str) -> JobSpec:
    """The recurring job of the loop examples (on `data`)."""
    return JobSpec(
        job_id_prefix=prefix,
        batch_sizes=[8, 16, 32, 64, 128],
        default_batch_size=32,
        target_metric=0.95,
        max_epochs=25,  # the target comes at about epoch 15: room for a slower run
        # Epochs of a fraction of a second on the CPU: their cost is mostly start-up and timing
        # noise, which the learning-curve stop would extrapolate into early stops. Keep it on
        # (the default) for real jobs, whose epochs take minutes.
        learning_curve_stop=False,
    )


LOCAL_SERVER = "http://127.0.0.1:8000"
"""The server the README starts, which the examples talk to unless told otherwise."""


def arguments(
    description: str | None, recurrences: int = 5, devices: bool = False, server: bool = True
) -> argparse.Namespace:
    """The example's options; ``description``: its docstring, shown whole by ``--help``;
    ``server=False``: an example without a server (the elastic batch size), which trains
    ``--epochs`` epochs once."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if server:
        parser.add_argument(
            "--server",
            default=os.environ.get("ZEUS_BSO_SERVER_URL", LOCAL_SERVER),
            help=f"zeus-bso server URL (default: $ZEUS_BSO_SERVER_URL, else {LOCAL_SERVER})",
        )
        parser.add_argument(
            "--recurrences",
            type=int,
            default=recurrences,
            help=f"runs of the job, each at the batch size the server chooses (default: "
            f"{recurrences})",
        )
        parser.add_argument(
            "--token",
            default=None,
            help="the server's bearer token, if any (default: $ZEUS_BSO_TOKEN)",
        )
    else:
        parser.add_argument("--epochs", type=int, default=8, help="epochs to train (default: 8)")
    if devices:
        parser.add_argument("--devices", type=int, default=1, help="processes to train on")
    return parser.parse_args()


def recurrences(one_run: Callable[[], RunOutcome | None], count: int) -> int:
    """Run ``count`` recurrences of a job, each until a run delivers a model (up to three runs,
    at the next batch size the server gives: `until_converged`); the exit status: 1 when a
    recurrence delivered no model (a scheduler sees the job fail), else 0."""
    missed = 0
    for recurrence in range(1, count + 1):
        outcome = until_converged(one_run, attempts=3)
        if outcome is not None and not outcome.converged:
            missed += 1
            print(
                f"zeus-bso: recurrence {recurrence} of {count} delivered no model", file=sys.stderr
            )
    return 1 if missed else 0


def no_model(recurrence: int, count: int) -> str:
    """The line that says a recurrence delivered no model."""
    return f"zeus-bso: recurrence {recurrence} of {count} delivered no model"
