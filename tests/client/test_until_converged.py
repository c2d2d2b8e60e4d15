"""`until_converged` after a run that ran out of memory while it trained: the next attempt, in
the same process, at a size that fits, once nothing holds what the failed run held. (The
entry points' runs: `tests/scripts/test_corpus.py`.)"""

from __future__ import annotations

import contextlib
import gc
import weakref
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import ServerProcess, unique_id
from zeus_bso import BatchSizeOptimizer, JobSpec, RunOutcome, until_converged
from zeus_bso.client import ServerClient
from zeus_bso.energy import EstimateMeter

torch = pytest.importorskip("torch", reason="out of memory is torch's error")


@pytest.fixture(scope="module")
def server(sqlite_server: ServerProcess) -> ServerProcess:
    return sqlite_server


class RunsOutOfMemory(torch.nn.Module):
    """A model whose forward runs out of memory (CUDA's error, raised through torch's call)."""

    def forward(self, x: Any) -> Any:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


def test_the_next_attempt_gets_a_size_that_fits_once_the_failed_run_is_freed(
    server: ServerProcess,
) -> None:
    """A loop without ``with`` runs out of memory at its first step: the next
    attempt starts with nothing holding the failed run's model any more (the frames the error
    came through held it, and would hold its GPU memory), and the error `until_converged`
    caught ends the run left open as infeasible, so the next attempt gets a smaller size."""
    job = JobSpec(
        job_id_prefix=unique_id("retryoom").replace("-", ""),
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=0.5,
        max_epochs=1,
    )
    models: list[weakref.ref[Any]] = []
    sizes: list[int] = []

    def attempt() -> RunOutcome | None:
        gc.collect()
        assert all(model() is None for model in models), "the failed run's model is held"
        bso = BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(200))
        sizes.append(bso.get_batch_size())
        model = RunsOutOfMemory() if sizes[-1] > 16 else torch.nn.Linear(4, 2)
        models.append(weakref.ref(model))
        bso.on_train_begin()
        model(torch.zeros(sizes[-1], 4))
        bso.on_evaluate(0.9)
        bso.end()  # not reached where the step raised: the run is left open
        return bso.outcome

    outcome = until_converged(attempt, attempts=3)
    assert outcome is not None
    assert outcome.converged
    assert sizes == [32, 16]
    with ServerClient(server.url) as client:
        (registered,) = client.list_jobs(prefix=f"{job.job_id_prefix}-")
        trials = client.job_state(registered.job_id)["trials"]
    trials.sort(key=lambda trial: trial["trial_number"])
    assert [(t["batch_size"], t["status"]) for t in trials] == [
        (32, "infeasible"),
        (16, "reported"),
    ]


def test_a_run_without_a_model_says_whether_the_next_attempt_follows(
    server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """The line of an attempt that delivered no model says that the next attempt follows, not
    to run it again; the last attempt's says to run it again."""
    job = JobSpec(
        job_id_prefix=unique_id("retryline").replace("-", ""),
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=0.99,
        max_epochs=1,
    )

    def attempt() -> RunOutcome | None:
        with BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(200)) as bso:
            bso.get_batch_size()
            bso.on_train_begin()
            bso.on_evaluate(0.5)
        return bso.outcome

    outcome = until_converged(attempt, attempts=2)
    assert outcome is not None
    assert not outcome.converged
    lines = [line for line in capsys.readouterr().err.splitlines() if "did not reach" in line]
    assert len(lines) == 2
    assert lines[0].endswith("The next attempt follows.")
    assert lines[1].endswith("Run it again for a model.")

    longer = job.model_copy(update={"max_epochs": 3})

    def fails() -> RunOutcome | None:  # an error until_converged raises: no next attempt
        with BatchSizeOptimizer(server.url, longer, energy_meter=EstimateMeter(200)) as bso:
            bso.get_batch_size()
            bso.on_train_begin()
            bso.on_evaluate(0.5)
            raise RuntimeError("a bug of the script's")
        return bso.outcome

    with pytest.raises(RuntimeError, match="a bug"):
        until_converged(fails, attempts=2)
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "failed at" in line]
    assert line.endswith("Run it again for a model.")


def failing(error: Exception, calls: list[int]) -> Callable[[], RunOutcome | None]:
    def run() -> RunOutcome | None:
        calls.append(1)
        raise error

    return run


def test_an_error_not_of_memory_and_the_last_attempts_are_raised() -> None:
    """Only out of memory starts another attempt; the last attempt's is raised."""
    calls: list[int] = []
    with pytest.raises(RuntimeError, match="a bug"):
        until_converged(failing(RuntimeError("a bug"), calls), attempts=3)
    assert len(calls) == 1
    calls.clear()
    with pytest.raises(torch.OutOfMemoryError):
        until_converged(failing(torch.OutOfMemoryError("CUDA out of memory."), calls), attempts=2)
    assert len(calls) == 2


def without_the_server(
    prefix: str, cache: Any, monkeypatch: pytest.MonkeyPatch
) -> tuple[JobSpec, str]:
    """A job of 16, 32 and 64 (default 32) and a URL where no server listens; this machine's
    cache (its fallback file) in ``cache``."""
    from tests.ports import free_port

    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(cache))
    job = JobSpec(
        job_id_prefix=prefix,
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=0.5,
        max_epochs=1,
    )
    return job, f"http://127.0.0.1:{free_port()}"


@pytest.mark.parametrize("with_block", [True, False])
def test_without_the_server_the_next_attempt_falls_back_below_the_size_that_ran_out(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, with_block: bool
) -> None:
    """The server cannot be reached: the run trains at the job's default, which runs out of
    memory; this machine keeps that (`zeus_bso.client.fallback`), so the next attempt trains
    at the largest size below it (with or without a ``with`` block: without, the next
    attempt's start ends the run by the error `until_converged` caught). Before, such a run
    ended as failed, and every attempt, and every later run without the server, took the
    default again."""
    job, url = without_the_server(f"retryoffline{with_block}", tmp_path, monkeypatch)
    sizes: list[int] = []

    def attempt() -> RunOutcome | None:
        bso = BatchSizeOptimizer(url, job, energy_meter=EstimateMeter(200))
        with bso if with_block else contextlib.nullcontext():
            sizes.append(bso.get_batch_size())
            model = RunsOutOfMemory() if sizes[-1] > 16 else torch.nn.Linear(4, 2)
            bso.on_train_begin()
            model(torch.zeros(sizes[-1], 4))
            bso.on_evaluate(0.9)
        bso.end()
        return bso.outcome

    outcome = until_converged(attempt, attempts=3)
    assert sizes == [32, 16]
    assert outcome is not None
    assert (outcome.converged, outcome.offline) == (True, True)


def test_out_of_memory_in_evaluation_is_raised_at_once_and_kept_nowhere(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of memory in evaluation (the loop's, in `evaluating`) says nothing of the training's
    batch size: no other attempt starts (it would run out the same way), and, without the
    server, this machine does not keep the size as one that runs out (the next run trains at
    the default again)."""
    job, url = without_the_server("evaluationoffline", tmp_path, monkeypatch)
    sizes: list[int] = []
    outcomes: list[RunOutcome | None] = []

    def attempt() -> RunOutcome | None:
        bso = BatchSizeOptimizer(url, job, energy_meter=EstimateMeter(200))
        try:
            with bso:
                sizes.append(bso.get_batch_size())
                bso.on_train_begin()
                torch.nn.Linear(4, 2)(torch.zeros(sizes[-1], 4))
                with bso.evaluating():
                    RunsOutOfMemory()(torch.zeros(64, 4))
                bso.on_evaluate(0.9)
        finally:
            outcomes.append(bso.outcome)
        return bso.outcome

    with pytest.raises(torch.OutOfMemoryError):
        until_converged(attempt, attempts=3)
    assert sizes == [32]
    (outcome,) = outcomes
    assert outcome is not None
    assert "in evaluation" in outcome.why
    assert "Run it again" not in outcome.summary()
    with pytest.raises(torch.OutOfMemoryError):
        attempt()
    assert sizes == [32, 32]


@pytest.mark.parametrize("said", [True, False])
def test_a_loop_says_where_it_evaluates(server: ServerProcess, said: bool) -> None:
    """A loop's evaluation runs out of memory after an epoch trained: inside `evaluating`, the
    run is released and no memory cap is set; outside, it is charged as any out of memory."""
    job = JobSpec(
        job_id_prefix=unique_id(f"loopeval{said}").replace("-", ""),
        batch_sizes=[16, 32],
        default_batch_size=32,
        target_metric=0.99,
        max_epochs=3,
    )
    bso = BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(200))

    def loop() -> None:
        with bso:
            size = bso.get_batch_size()
            bso.on_train_begin()
            torch.nn.Linear(4, 2)(torch.zeros(size, 4))
            bso.on_evaluate(0.5)
            with bso.evaluating() if said else contextlib.nullcontext():
                RunsOutOfMemory()(torch.zeros(64, 4))

    with pytest.raises(torch.OutOfMemoryError):
        loop()
    with ServerClient(server.url) as client:
        state = client.job_state(bso.job_id)
    (trial,) = state["trials"]
    assert trial["status"] == ("released" if said else "infeasible")
    assert bool(state["memory_caps"]) is not said


def test_an_error_caught_from_an_attempt_ends_only_the_runs_opened_in_it() -> None:
    """The error `until_converged` caught is the ending of a run that opened in that attempt
    and was left open; not of a run opened before it (another job's, on another thread),
    which a later start may find over too."""
    from zeus_bso.client import failure
    from zeus_bso.training import open_runs

    before = open_runs.set_aside()
    numbered = failure.ATTEMPT.set(object())
    try:
        opened_in_it = open_runs.set_aside()
        error = torch.OutOfMemoryError("CUDA out of memory.")
        failure.caught(error)
    finally:
        failure.ATTEMPT.reset(numbered)
    assert open_runs.error_since(opened_in_it) is error
    assert open_runs.error_since(before) is None
    assert open_runs.error_since(open_runs.set_aside()) is None  # nothing since
