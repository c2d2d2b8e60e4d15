"""Out of memory while a run trains, then `until_converged`'s next attempt, on a real GPU:
``gpu_check.py``'s part ``retry``. A recurrence of a plain loop without ``with`` (upstream's
shape): each attempt builds a model holding a ballast buffer of 60% of the GPU's memory, and
its first step at the default size (65536 samples of 4 MiB each, 256 GiB) runs out of memory.
The next attempt, at 64, fits only where nothing holds the failed attempt's ballast any more
(two of them are 120% of the GPU). Passed when the default's trial is ``infeasible``, the next
attempt converged at 64, and the memory allocated when it started was the CUDA context's alone.

``accelerator``: ``"cuda"`` on the GPU machine; ``"cpu"`` for the dry run the test suite makes
of it (``tests/integrations/test_gpu_check_parts.py``), where ``oom_above`` raises CUDA's
error and a weak reference tells whether the failed attempt's model was freed.
"""

from __future__ import annotations

import gc
import uuid
import weakref
from typing import Any

DEFAULT = 65536
"""The default batch size: 256 GiB of activations, which no GPU holds."""
FITS = 64
SAMPLE_MIB = 4
"""The activations a sample takes in a step."""
BALLAST = 0.6
"""The share of the GPU's memory each attempt's model holds (on the CPU, a few KiB)."""


def retry_check(url: str, accelerator: str, oom_above: int | None = None) -> dict[str, Any]:
    import torch

    from zeus_bso import BatchSizeOptimizer, JobSpec, RunOutcome, until_converged

    device = torch.device("cuda:0" if accelerator == "cuda" else "cpu")
    total = torch.cuda.get_device_properties(0).total_memory if accelerator == "cuda" else 0
    ballast = int(BALLAST * total) // 4 if accelerator == "cuda" else 1024
    per_sample = SAMPLE_MIB * 2**18 if accelerator == "cuda" else 4  # floats
    job = JobSpec(job_id=f"gpu-retry-{uuid.uuid4().hex[:12]}", job_id_prefix="gpu-retry",
                  batch_sizes=[FITS, DEFAULT], default_batch_size=DEFAULT, target_metric=0.7,
                  max_epochs=4, learning_curve_stop=False)  # fmt: skip
    g = torch.Generator().manual_seed(0)
    x = torch.randn(DEFAULT, 8, generator=g)  # a whole batch at the default
    y = (x[:, 0] + x[:, 1] > 0).long()
    x, y = x.to(device), y.to(device)

    class Ballasted(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("ballast", torch.zeros(ballast, device=device))
            self.net = torch.nn.Linear(8, 2).to(device)

        def forward(self, batch: Any) -> Any:
            if oom_above is not None and len(batch) > oom_above:
                raise torch.cuda.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {len(batch)} MiB (the dry run's)"
                )
            spread = batch.new_empty(len(batch), per_sample)  # activations
            spread.fill_(1.0)
            return self.net(batch) * spread[:, :1]

    models: list[weakref.ref[Any]] = []
    started_with: list[float] = []  # GiB allocated as each attempt began

    def attempt() -> RunOutcome | None:
        gc.collect()
        held = any(model() is not None for model in models)
        started_with.append(
            torch.cuda.memory_allocated() / 2**30 if accelerator == "cuda" else float(held)
        )
        bso = BatchSizeOptimizer(url, job)
        size = bso.get_batch_size()
        model = Ballasted()
        models.append(weakref.ref(model))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        bso.on_train_begin()
        for _ in range(job.max_epochs):
            for start in range(0, len(x), size):
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(
                    model(x[start : start + size]), y[start : start + size]
                )
                loss.backward()
                optimizer.step()
            with torch.no_grad():
                accuracy = float((model.net(x).argmax(1) == y).float().mean())
            bso.on_evaluate(accuracy)
            if bso.training_finished:
                break
        bso.end()
        return bso.outcome

    outcome = until_converged(attempt, attempts=3)
    from zeus_bso.client import ServerClient

    with ServerClient(url) as client:
        trials = sorted(client.job_state(job.job_id)["trials"], key=lambda t: t["trial_number"])
    return {
        "gpu_memory_gib": total / 2**30,
        "ballast_gib": ballast * 4 / 2**30,
        "trials": [(t["batch_size"], t["status"]) for t in trials],
        "converged": bool(outcome is not None and outcome.converged),
        "started_with": started_with,
        "passed": (
            [(t["batch_size"], t["status"]) for t in trials]
            == [(DEFAULT, "infeasible"), (FITS, "reported")]
            and outcome is not None
            and outcome.converged
            and len(started_with) == 2
            and started_with[1] < (1.0 if accelerator == "cuda" else 0.5)
        ),
    }
