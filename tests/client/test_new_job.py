"""A changed setting makes a new job, which learns from scratch: the run says so, naming what
changed (against a real server; `changed_settings` on its own)."""

from __future__ import annotations

import logging

import pytest

from tests.client.test_optimizer import spec as job
from tests.helpers import ServerProcess, unique_id
from zeus_bso import BatchSizeOptimizer, JobSpec
from zeus_bso.client import ServerClient
from zeus_bso.client.new_job import changed_settings, new_job_notice
from zeus_bso.energy import EstimateMeter
from zeus_bso.spec import GpuConfig, JobSpecFromClient

NOTICE = "is new: it learns from scratch"


@pytest.fixture(scope="module")
def server(sqlite_server: ServerProcess) -> ServerProcess:
    return sqlite_server


def run(url: str, spec: JobSpec, watts: float = 200.0) -> str:
    """One run that reports an epoch; returns its job's id."""
    with BatchSizeOptimizer(url, spec, energy_meter=EstimateMeter(watts), show=None) as bso:
        bso.get_batch_size()
        bso.on_train_begin()
        bso.on_evaluate(0.9)
        return bso.job_id


def notices(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if NOTICE in r.getMessage()]


def test_a_changed_setting_names_what_changed_and_the_job_it_leaves(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = unique_id("changed")
    caplog.set_level(logging.WARNING, logger="zeus_bso")
    first = run(server.url, job(prefix))
    assert notices(caplog) == []  # the prefix's first job: nothing to compare with
    run(server.url, job(prefix))
    assert notices(caplog) == []  # the same settings: the same job, found
    second = run(server.url, job(prefix, target_metric=0.85, max_epochs=8))
    assert second != first
    (line,) = notices(caplog)
    assert line.startswith(f"zeus-bso: job {second} is new")
    assert f"differ from those of {first}, the job of this prefix that ran last (2 runs)" in line
    assert "target_metric: 0.8 there, 0.85 here; max_epochs: 5 there, 8 here." in line
    assert f"zeus-bso jobs show {first} --json" in line
    caplog.clear()
    # Changed back, to the first job's settings: the last job to run is now the second.
    run(server.url, job(prefix, target_metric=0.85))
    (line,) = notices(caplog)
    assert f"those of {second}" in line
    assert "max_epochs: 8 there, 5 here." in line
    assert "target_metric" not in line


def test_other_gpus_a_given_id_or_another_prefix_say_nothing(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = unique_id("quiet")
    caplog.set_level(logging.WARNING, logger="zeus_bso")
    run(server.url, job(f"{prefix}-x", target_metric=0.9))  # its ids start with prefix + "-"
    first = run(server.url, job(prefix))
    assert run(server.url, job(prefix), watts=400.0) == first  # another hardware profile
    run(server.url, job(prefix, target_metric=0.9, job_id=f"{prefix}-mine"))  # the user's id
    assert notices(caplog) == []


def spec_from(prefix: str, **overrides: object) -> JobSpecFromClient:
    gpu = GpuConfig(max_power=300.0, number_of_gpus=1, gpu_model="test")
    return JobSpecFromClient(
        **job(prefix, **overrides).model_dump(exclude={"job_id"}),
        job_id=f"{prefix}-0000",
        **gpu.model_dump(),
    )


def test_changed_settings_compares_the_settings_alone() -> None:
    previous = spec_from("p").model_dump(mode="json")
    previous.update(job_id="p-1234", gpu_model="other", max_power=900.0)
    assert changed_settings(previous, spec_from("p")) == []  # the id and GPUs are not settings
    changed = spec_from("p", eta_knob=1.0, beta_knob=None, target_metric=0.7, max_epochs=9)
    assert changed_settings(previous, changed) == [
        "eta_knob: 0.5 there, 1.0 here",
        "beta_knob: 2.0 there, None here",
        "target_metric: 0.8 there, 0.7 here",
        "max_epochs: 5 there, 9 here",
    ]


def test_a_range_is_compared_as_the_range_it_makes_the_sizes_from() -> None:
    ranged = {"batch_sizes": [], "batch_size_range": [16, 256]}
    previous = spec_from("p", **ranged).model_dump(mode="json")
    previous["batch_sizes"] = [16, 32, 64, 128, 256]  # the server expanded it
    assert changed_settings(previous, spec_from("p", **ranged)) == []
    wider = spec_from("p", batch_sizes=[], batch_size_range=[16, 512])
    assert changed_settings(previous, wider) == [
        "batch_size_range: [16, 256] there, [16, 512] here"
    ]


def test_more_than_three_changes_are_counted(server: ServerProcess) -> None:
    prefix = unique_id("many")
    run(server.url, job(prefix))
    changed = spec_from(prefix, eta_knob=1.0, target_metric=0.7, max_epochs=9, window_size=3)
    with ServerClient(server.url) as client:
        line = new_job_notice(client, changed)
    assert line is not None
    assert "max_epochs: 5 there, 9 here; and 1 more." in line
    assert "window_size" not in line
