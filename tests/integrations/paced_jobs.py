"""The job and the step of the tests' paced models (`tests.integrations.lightning_models.Paced`,
`tests.integrations.hf_models.paced_hf_run`), whose every training step takes the NVML test
double's time at its power limit; apart, so that a process of one framework imports only it."""

from __future__ import annotations

import sys
import time
from typing import Any

from zeus_bso import JobSpec

PACED_STEPS = 40
"""`Paced`'s training batches an epoch: room for a power profile's 5 x 7 steps."""
PACED_BATCH = 8


def paced_job(job_id: str, eta: float, **options: Any) -> JobSpec:
    """`Paced`'s job: one batch size, reached at the first validation (one epoch a run)."""
    return JobSpec(
        job_id=job_id,
        job_id_prefix=job_id.split("-")[0],
        batch_sizes=[PACED_BATCH],
        default_batch_size=PACED_BATCH,
        target_metric=0.0,
        max_epochs=2,
        eta_knob=eta,
        learning_curve_stop=False,
        **options,
    )


def paced_step() -> None:
    """Take a training step's time at the double GPU's limit in force (the NVML test double of
    ``zeus_bso.testing.gpus``, imported as ``pynvml``)."""
    nvml = sys.modules["pynvml"]
    time.sleep(nvml._step_seconds(nvml.nvmlDeviceGetHandleByIndex(0)))
