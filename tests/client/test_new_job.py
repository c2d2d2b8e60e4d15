"""A changed setting makes a new job, which learns from scratch: the run says so, naming what
changed (against a real server; `changed_settings` on its own)."""

from __future__ import annotations

import logging

import pytest

from tests.client.test_optimizer import spec as job
from tests.helpers import ServerProcess, unique_id
from zeus_bso import BatchSizeOptimizer, JobSpec
from zeus_bso.client import ServerClient
from zeus_bso.energy import EstimateMeter

NOTICE = "is new: it learns from scratch"


@pytest.fixture(scope="module")
def server(sqlite_server: ServerProcess) -> ServerProcess:
    return sqlite_server


def run(url: str, spec: JobSpec, watts: float = 200.0, metric: float = 0.9) -> str:
    """One run that reports an epoch; returns its job's id."""
    with BatchSizeOptimizer(url, spec, energy_meter=EstimateMeter(watts), show=None) as bso:
        bso.get_batch_size()
        bso.on_train_begin()
        bso.on_evaluate(metric)
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
    assert "JobSpec(prior_from='auto') starts from what the last job of its prefix" in line
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


def test_more_than_three_changes_are_counted(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    prefix = unique_id("many")
    caplog.set_level(logging.WARNING, logger="zeus_bso")
    run(server.url, job(prefix))
    run(server.url, job(prefix, eta_knob=1.0, target_metric=0.7, max_epochs=9, window_size=3))
    (line,) = notices(caplog)
    assert "eta_knob: 0.5 there, 1.0 here;" in line
    assert "max_epochs: 5 there, 9 here; and 1 more." in line
    assert "window_size" not in line


def test_the_job_view_names_the_other_jobs_of_its_prefix(server: ServerProcess) -> None:
    """``GET /api/jobs/{id}`` lists the other jobs of the prefix, the last changed first, with
    the settings in which each differs (what the notice, the dashboard and `jobs show` say)."""
    prefix = unique_id("view")
    first = run(server.url, job(prefix))
    second = run(server.url, job(prefix, target_metric=0.9))
    unrelated = run(server.url, job(f"{prefix}-x"))
    third = run(server.url, job(prefix, max_epochs=7, beta_knob=None))
    with ServerClient(server.url) as client:
        siblings = client.job_state(third, limit=0)["siblings"]
        alone = client.job_state(unrelated, limit=0)["siblings"]
    assert [s["job_id"] for s in siblings] == [second, first]  # the last changed first
    assert [s["trials"] for s in siblings] == [1, 1]
    assert siblings[0]["differences"] == [
        {"name": "beta_knob", "here": None, "there": 2.0},
        {"name": "target_metric", "here": 0.8, "there": 0.9},
        {"name": "max_epochs", "here": 7, "there": 5},
    ]
    assert alone == []  # its prefix is another: prefix + "-x"


def test_a_new_job_seeded_from_its_prefix_says_where_it_starts(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """``prior_from="auto"``: the new job starts from the last one's curve, not from scratch;
    where no job of the prefix converged, it learns from scratch, and says why."""
    prefix = unique_id("seeded")
    caplog.set_level(logging.WARNING, logger="zeus_bso")
    first = run(server.url, job(prefix))  # converged: 0.9 reaches the target, 0.8
    second = run(server.url, job(prefix, target_metric=0.85, prior_from="auto"))
    (line,) = [r.getMessage() for r in caplog.records if "is new:" in r.getMessage()]
    assert line.startswith(
        f"zeus-bso: job {second} is new: it starts from what {first} learned (prior_from, "
        "check mode), not from scratch."
    )
    assert "target_metric: 0.8 there, 0.85 here" in line
    assert "prior_from='auto') starts" not in line
    with ServerClient(server.url) as client:
        seeded = client.job(second, limit=0).seeded_from
    assert seeded is not None
    assert seeded.job_id == first
    caplog.clear()
    # No job of this prefix converged (0.5 is short of every target): nothing to seed from.
    other = unique_id("unseeded")
    run(server.url, job(other), metric=0.5)
    third = run(server.url, job(other, max_epochs=7, prior_from="auto"))
    (line,) = [r.getMessage() for r in caplog.records if "is new:" in r.getMessage()]
    assert line.startswith(f"zeus-bso: job {third} is new: it learns from scratch")
    assert "no job of its prefix had a converged run to seed it" in line
    assert "prior_from='auto') starts" not in line


def test_a_server_that_keeps_every_setting_is_not_said_to_drop_any(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """Our server keeps every option it is sent, for a new job and a found one (whose own seed
    settings stay): nothing is said (upstream's server, which drops ours, is
    `tests/client/test_upstream_server.py`)."""
    prefix = unique_id("kept")
    caplog.set_level(logging.WARNING, logger="zeus_bso")
    settings = {
        "max_run_cost_ratio": 1.5,
        "expected_recurrences": 10,
        "power_max_slowdown": 1.2,
        "early_stop_reference": "best_run",
        "mab_num_explorations": 3,
    }
    first = run(server.url, job(prefix, **settings))
    again = run(server.url, job(prefix, **settings, prior_from="auto"))  # found: keeps its own
    assert again == first
    run(server.url, job(prefix, **settings, target_metric=0.85, prior_from="auto"))  # new
    assert not [r for r in caplog.records if "did not keep" in r.getMessage()]
