"""Our client against upstream Zeus 0.16's own server: recurrences work, and heartbeats, a route
upstream does not have, are given up after the first 404 with one message; an out-of-memory
error ends the trial, and nothing is kept for a later run to send to a route upstream lacks;
``zeus-bso check`` tells that server apart."""

from __future__ import annotations

import logging
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers import environment_without_settings, one_settable_gpu, unique_id
from tests.proxy import ReverseProxy
from tests.upstream import upstream_missing, upstream_server
from zeus_bso import BatchSizeOptimizer, JobSpec
from zeus_bso.energy import EstimateMeter

MISSING = upstream_missing()
UUID = "GPU-0000f00d-1111-2222-3333-444444444444"
pytestmark = pytest.mark.skipif(MISSING is not None, reason=MISSING or "")
EPOCH_S = 0.2
"""An epoch's training in the recurrences' loop (the estimate meter's joules follow it)."""


def no_route(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "no heartbeat route" in r.getMessage()]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with upstream_server(tmp_path_factory.mktemp("upstream")) as url:
        yield url


def test_recurrences_against_upstream_without_heartbeats(
    upstream: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="zeus_bso")
    spec = JobSpec(
        job_id=unique_id("up"),
        job_id_prefix="up",
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=0.5,
        max_epochs=4,
    )
    chosen = []
    for run in range(3):
        with BatchSizeOptimizer(
            upstream, spec, energy_meter=EstimateMeter(100), heartbeat_seconds=0.05
        ) as bso:
            chosen.append(bso.get_batch_size())
            bso.on_train_begin()
            for epoch in range(1, 5):
                # An epoch's training: each takes as long, so that upstream's cost bound (twice
                # the cheapest run) ends no run of a size it prices alike. Nothing else happens
                # between the reports: a wait here once made the 64's first epoch cost twice
                # the 16's whole run on a loaded machine.
                time.sleep(EPOCH_S)
                answer = bso.on_evaluate(0.6 if epoch == 2 else 0.1)
                if answer.stop_train:
                    break
            assert answer.stop_train
            assert answer.converged
            assert bso.current_epoch == 2
            deadline = time.monotonic() + 10
            while len(no_route(caplog)) <= run and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(no_route(caplog)) == run + 1  # the heartbeat thread gave up
    assert chosen[0] == 32
    assert len(no_route(caplog)) == 3  # once per run, then none
    warned = [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("zeus_bso.client")
    ]
    assert warned == []


@contextmanager
def training(upstream: str, prefix: str) -> Iterator[BatchSizeOptimizer]:
    """A plain loop's run of a new job (target 0.9, six epochs) against upstream's server,
    dispatched and training."""
    spec = JobSpec(
        job_id=unique_id(prefix), job_id_prefix=prefix, batch_sizes=[16, 32],
        default_batch_size=32, target_metric=0.9, max_epochs=6,
    )  # fmt: skip
    with BatchSizeOptimizer(
        upstream, spec, energy_meter=EstimateMeter(100), heartbeat_seconds=0, show=None
    ) as bso:
        bso.get_batch_size()
        bso.on_train_begin()
        yield bso


def test_a_run_that_stopped_itself_ends_against_upstream_as_ended(
    upstream: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Upstream's server ignores a report's ``final``: it answers go on, and the run ends its
    trial as any run that ended before the server's stop, without a warning."""
    with training(upstream, "upstop") as bso:
        assert not bso.on_evaluate(0.1).stop_train
        assert not bso.on_evaluate(0.1).stop_train
        bso.stopped_itself("its early stopping ended it")
    assert bso.outcome is not None
    assert (bso.outcome.reason, bso.outcome.converged) == ("ended_early", False)
    assert bso.outcome.why == "its early stopping ended it"
    # (Its reports, of no training, are said as such where torch was imported by another test.)
    warned = [
        r.name
        for r in caplog.records
        if r.levelno >= logging.WARNING and "first optimizer step" not in r.getMessage()
    ]
    assert [name for name in warned if name != "zeus_bso.energy.estimate"] == []


def test_a_run_that_diverges_against_upstream_stops_all_the_same(upstream: str) -> None:
    """A metric that is not a number stops the run against upstream's server too: its final
    report, which upstream takes as any report, does not stop it there, so the run stops of
    its own, ends its trial as any run that ended early, and its outcome says why."""
    with training(upstream, "upnan") as bso:
        assert not bso.on_evaluate(0.1).stop_train
        answer = bso.on_evaluate(float("nan"))
        assert (answer.stop_train, answer.converged) == (True, False)
    assert bso.outcome is not None
    assert (bso.outcome.reason, bso.outcome.converged) == ("ended_early", False)
    assert bso.outcome.why.startswith("training diverged at batch size 32")


def test_a_changed_setting_against_upstream_registers_a_new_job_quietly(
    upstream: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Upstream's server has no read API to compare the new job with: the run goes on."""
    caplog.set_level(logging.DEBUG, logger="zeus_bso")
    prefix = unique_id("upnew")
    ids = []
    for target in (0.5, 0.6):
        spec = JobSpec(
            job_id_prefix=prefix, batch_sizes=[16, 32], default_batch_size=32,
            target_metric=target, max_epochs=2,
        )  # fmt: skip
        with BatchSizeOptimizer(
            upstream, spec, energy_meter=EstimateMeter(100), heartbeat_seconds=0, show=None
        ) as bso:
            assert bso.get_batch_size() == 32
            ids.append(bso.job_id)
    assert ids[0] != ids[1]
    assert not [r for r in caplog.records if "is new: it learns" in r.getMessage()]
    assert [r for r in caplog.records if "were not read" in r.getMessage()]


def test_power_limits_against_upstream_warn_and_leave_the_gpus_alone(
    upstream: str,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Upstream's server does not choose power limits: a run that opts in says so once, trains,
    and never touches the GPUs (nor refuses them: nothing of theirs is this run's to set)."""
    one_settable_gpu(monkeypatch, tmp_path, UUID)
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    caplog.set_level(logging.WARNING, logger="zeus_bso")
    spec = JobSpec(
        job_id=unique_id("uppower"),
        job_id_prefix="uppower",
        batch_sizes=[16, 32],
        default_batch_size=32,
        target_metric=0.5,
        max_epochs=2,
        eta_knob=1.0,
    )
    with BatchSizeOptimizer(
        upstream, spec, energy_meter=EstimateMeter(100), power_limit="optimize"
    ) as bso:
        assert bso.get_batch_size() == 32
        bso.on_train_begin(steps_per_epoch=100)
        for _ in range(10):
            bso.on_step_begin()
            bso.on_step_end()
        assert bso.on_evaluate(0.6).stop_train
    warned = [m for r in caplog.records if "does not choose GPU power" in (m := r.getMessage())]
    assert len(warned) == 1
    assert upstream in warned[0]
    assert bso.power is None
    assert not (tmp_path / "gpu").exists() or not list((tmp_path / "gpu").glob("*.json"))
    assert not list((tmp_path / "cache").rglob("power_limits/*.json"))


def test_settings_upstream_does_not_know_are_said_to_have_no_effect(
    upstream: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Upstream's server drops the options it does not know (a per-run cap, a horizon): the
    run says so, naming each, instead of the script's settings having no effect unseen."""
    caplog.set_level(logging.WARNING, logger="zeus_bso")
    spec = JobSpec(
        job_id=unique_id("upkept"), job_id_prefix="upkept", batch_sizes=[16, 32],
        default_batch_size=32, target_metric=0.5, max_epochs=2,
        max_run_cost_ratio=1.5, expected_recurrences=10,
    )  # fmt: skip
    with BatchSizeOptimizer(
        upstream, spec, energy_meter=EstimateMeter(100), heartbeat_seconds=0, show=None
    ) as bso:
        assert bso.get_batch_size() == 32
    (said,) = [m for r in caplog.records if "did not keep" in (m := r.getMessage())]
    assert f"the server did not keep these settings of job {spec.job_id}: " in said
    assert "expected_recurrences (sent 10, kept None)" in said
    assert "max_run_cost_ratio (sent 1.5, kept None)" in said
    assert said.count("(sent") == 2  # its own options, and ours at their defaults, were kept


def test_check_tells_upstreams_server_apart(upstream: str) -> None:
    checked = subprocess.run(
        [str(Path(sys.executable).parent / "zeus-bso"), "check", "--server", upstream],
        env=environment_without_settings(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr  # its protocol works
    assert f"ok server: {upstream} answers, but has no read API: upstream Zeus's server?" in (
        checked.stdout
    )


def run_through(proxy: ReverseProxy, prefix: str) -> BatchSizeOptimizer:
    """A run of a new job through ``proxy``, training (its trial dispatched)."""
    spec = JobSpec(
        job_id=unique_id(prefix), job_id_prefix=prefix, batch_sizes=[16, 32],
        default_batch_size=32, target_metric=0.9, max_epochs=2,
    )  # fmt: skip
    bso = BatchSizeOptimizer(
        proxy.url, spec, energy_meter=EstimateMeter(100), heartbeat_seconds=0, show=None
    )
    bso.get_batch_size()
    bso.on_train_begin()
    return bso


def test_out_of_memory_against_upstream_ends_the_trial(
    upstream: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch size that runs out of memory against upstream's server (which has no
    out-of-memory route and does not say whether a size ran on these GPUs) ends its trial, as
    upstream's runs end, so that upstream counts it against the size. (It was taken for an
    error not the size's, a size known to fit, and released through a route upstream lacks:
    the trial was left open.)"""
    caplog.set_level(logging.INFO, logger="zeus_bso")
    proxy = ReverseProxy(upstream)  # to see the requests
    try:
        bso = run_through(proxy, "upoom")
        bso.end_out_of_memory("CUDA out of memory")
    finally:
        proxy.close()
    paths = [path for path, _ in proxy.answered]
    assert "/api/trials/release" not in paths
    assert "/trials" in paths  # ended, as upstream's runs end
    assert bso.outcome is not None
    assert bso.outcome.reason == "out_of_memory"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("route", ["/api/trials/release", "/api/trials/infeasible"])
def test_what_upstream_could_not_take_is_not_kept_for_a_route_it_lacks(
    upstream: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, route: str
) -> None:
    """A release, or an out-of-memory mark, answered by a proxy's 502 in front of upstream's
    server (away): kept for a later run only where the server declared the route at dispatch,
    which upstream's never does, so nothing is kept for a later run to send to a route it
    lacks (both were; and the trial's end was not sent). An out-of-memory error ends the
    trial, as upstream's runs end."""
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    proxy = ReverseProxy(upstream, down_on=route)
    try:
        bso = run_through(proxy, "upaway")
        proxy.down.set()
        if route.endswith("release"):
            bso.release("not trained in this test")
        else:
            bso.end_out_of_memory("CUDA out of memory")
    finally:
        proxy.close()
    assert (route, False) in proxy.answered  # asked, and answered 502
    assert list((tmp_path / "cache").glob("outbox/*.json")) == []
    if route.endswith("infeasible"):
        assert ("/trials", True) in proxy.answered  # the trial ended
