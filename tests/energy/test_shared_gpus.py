"""Other processes computing on a run's GPU (another user's job, a notebook): the GPU's energy
counter counts their work in the run's, and the server would learn it as the batch size's cost.
A run against a real server on NVML's test double, whose GPU lists a process beside the run's:
said once a run, at its first report, naming the GPU, the process and the batch size; a GPU of
the run's alone says nothing."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from tests.helpers import ServerProcess, unique_id
from zeus_bso import BatchSizeOptimizer, JobSpec
from zeus_bso.energy import sharing
from zeus_bso.testing.gpus import double_in_this_process

UUID = "GPU-5a4ed000-0000-0000-0000-000000000001"
OTHER = 4_000_001
"""A process NVML lists on the GPU (by its host ID) that no process here is."""


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("others", [[], [OTHER]], ids=["alone", "shared"])
def test_a_run_on_a_gpu_others_compute_on_says_its_energy_holds_theirs(
    sqlite_server: ServerProcess,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    others: list[int],
) -> None:
    gpu = {"uuid": UUID, "name": "NVIDIA A100-SXM4-40GB", "watts": 200, "limit_w": 400,
           "counter": True, "processes": [os.getpid(), *others]}  # fmt: skip
    double_in_this_process(monkeypatch, [gpu], tmp_path)
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    device = tmp_path / "nvidia0"  # the GPU's device file, which this process holds open
    device.write_text("")
    monkeypatch.setattr(sharing, "DEVICE_FILE", str(tmp_path / "nvidia{minor}"))
    job = JobSpec(
        job_id_prefix=unique_id("shared-gpu"),
        batch_sizes=[16, 32],
        default_batch_size=32,
        target_metric=0.9,
        max_epochs=3,
    )
    with (
        device.open(),
        caplog.at_level(logging.WARNING),
        BatchSizeOptimizer(sqlite_server.url, job) as bso,
    ):
        assert bso.meter.name == "nvml"
        assert bso.get_batch_size() == 32
        bso.on_train_begin()
        for metric in (0.5, 0.6, 0.95):
            if bso.on_evaluate(metric).stop_train:
                break
    said = [w for w in warnings_of(caplog) if "is shared with" in w]
    outcome = bso.outcome
    assert outcome is not None
    assert outcome.converged
    if not others:
        assert said == []
        assert outcome.shared_gpus == ()
        assert "other processes" not in outcome.summary()
        return
    assert outcome.shared_gpus == (UUID,)  # the run's line says so too
    assert (
        f"; other processes held {UUID} meanwhile: what they computed is in its energy."
    ) in outcome.summary()
    (warning,) = said  # once a run, though every report checks
    assert warning.startswith(
        f"zeus-bso: GPU {UUID} is shared with 1 process this one cannot see (another "
        "container's or user's): what they compute while this run trains is in the GPU's energy "
        "counter, so this run's energy, and the cost the server learns for batch size 32, hold it"
    )


def test_a_check_that_cannot_be_made_never_stops_training(
    sqlite_server: ServerProcess,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """NVML lists a process that is not this one, and the processes here cannot be read (no
    ``/proc``): the GPU is left out of the check, and the run trains to its target."""
    gpu = {"uuid": UUID, "name": "NVIDIA A100-SXM4-40GB", "watts": 200, "limit_w": 400,
           "counter": True, "processes": [OTHER]}  # fmt: skip
    double_in_this_process(monkeypatch, [gpu], tmp_path)
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sharing, "PROC", tmp_path / "no-proc")
    job = JobSpec(job_id_prefix=unique_id("no-proc"), batch_sizes=[16, 32],
                  default_batch_size=32, target_metric=0.9, max_epochs=2)  # fmt: skip
    with caplog.at_level(logging.WARNING), BatchSizeOptimizer(sqlite_server.url, job) as bso:
        bso.get_batch_size()
        bso.on_train_begin()
        assert bso.on_evaluate(0.95).stop_train
    assert bso.outcome is not None
    assert bso.outcome.converged
    assert bso.outcome.shared_gpus == ()
    assert not [w for w in warnings_of(caplog) if "is shared with" in w]
