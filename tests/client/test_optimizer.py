"""BatchSizeOptimizer in a plain training loop, against a real server process."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    ServerProcess,
    age_leases,
    environment_without_settings,
    free_port,
    nvml_double,
    one_settable_gpu,
    sqlite_url,
    unique_id,
)
from tests.ports import dropping_port
from tests.preloaded_python import preloaded
from zeus_bso import BatchSizeOptimizer, JobSpec, OperationOrderError, ServerConnectionError
from zeus_bso.client import ServerClient, fallback, stable_job_id
from zeus_bso.client.progress import Elapsed
from zeus_bso.energy import EstimateMeter, NVMLMeter
from zeus_bso.errors import (
    ConfigurationError,
    OutOfMemoryNotTheBatchSizeError,
    ServerRejectedError,
)
from zeus_bso.spec import StopReason
from zeus_bso.testing.gpus import fail_counter_reads
from zeus_bso.training.session import TrialSession


@pytest.fixture(scope="module")
def server(sqlite_server: ServerProcess) -> ServerProcess:
    """SQLite only: the subject here is the client, not the database."""
    return sqlite_server


def spec(prefix: str, **overrides: object) -> JobSpec:
    fields: dict[str, object] = {
        "job_id_prefix": prefix,
        "batch_sizes": [16, 32, 64],
        "default_batch_size": 32,
        "target_metric": 0.8,
        "max_epochs": 5,
        # Epochs of microseconds: their estimated energy is timing noise, which the
        # learning-curve stop would extrapolate (it is tested in tests/policy and tests/api).
        "learning_curve_stop": False,
    }
    fields.update(overrides)
    return JobSpec(**fields)  # type: ignore[arg-type]


def test_importing_zeus_bso_pulls_in_no_framework() -> None:
    code = (
        "import sys, zeus_bso, zeus_bso.client, zeus_bso.energy\n"
        "print({'torch', 'lightning', 'transformers'} & set(sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "set()"


def test_the_package_names_what_it_exports_and_loads_it_when_asked() -> None:
    """``import zeus_bso`` is quick (its errors alone; a command's Ctrl-C while it loads
    depends on that); each exported name loads when first asked for, and completion sees all."""
    code = (
        "import sys, zeus_bso\n"
        "print('zeus_bso.spec' in sys.modules, 'zeus_bso.client' in sys.modules)\n"
        "from zeus_bso import JobSpec, BatchSizeOptimizer\n"
        "print(JobSpec.__module__, BatchSizeOptimizer.__module__)\n"
        "print(set(zeus_bso.__all__) <= set(dir(zeus_bso)))\n"
        "print(all(getattr(zeus_bso, name) is not None for name in zeus_bso.__all__))\n"
        "print(hasattr(zeus_bso, 'Nope'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:5] == [
        "False False",
        "zeus_bso.wire.jobs zeus_bso.training.optimizer",
        "True",
        "True",
        "False",
    ]


def test_a_plain_loop_over_recurrences(server: ServerProcess) -> None:
    prefix = unique_id("loop").replace("-", "")
    ids, sizes = set(), []
    # No stop on cost: with epochs of microseconds, a run's cost against the best run's (the
    # early-stop bound) or the round's cheapest (the pruning cost ratio) is timing noise, and
    # under load runs were stopped before their target (this test is the loop's, not theirs).
    job = spec(prefix, beta_knob=None, prune_cost_ratio=None)
    for _recurrence in range(3):
        with BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(200)) as bso:
            ids.add(bso.job_id)
            sizes.append(bso.get_batch_size())
            bso.on_train_begin()
            for epoch in range(1, 6):
                answer = bso.on_evaluate(0.3 + 0.2 * epoch)  # reaches 0.8 at epoch 3
                if answer.stop_train:
                    break
            assert bso.training_finished
            assert bso.converged
            assert bso.current_epoch == 3
    assert len(ids) == 1  # every recurrence found the same job: its id comes from its config
    (job_id,) = ids
    assert job_id.startswith(prefix + "-")
    assert sizes[0] == 32
    with ServerClient(server.url) as client:
        state = client.job_state(job_id)
    assert [t["status"] for t in state["trials"]] == ["reported"] * 3
    assert all(t["energy"] > 0 for t in state["trials"])


def test_a_loop_that_validates_every_few_steps_is_told_where_it_gives_the_epochs_steps(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """Upstream's loop shape, validating every 2 of its DataLoader's 6 batches: each
    ``on_evaluate`` counts as one of the job's epochs, so ``max_epochs`` (5) ended the run 10
    steps into training, silently. With the epoch's steps given to ``on_train_begin`` (as for
    power limits: ``len(loader)``), its first report says so; what is reported is unchanged."""
    torch = pytest.importorskip("torch", reason="torch.optim's steps are counted")
    job = spec(unique_id("everyfew").replace("-", ""))
    with BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(200)) as bso:
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        batches, size = 6, bso.get_batch_size()
        bso.on_train_begin(batches)
        for step in range(1, 2 * batches + 1):
            optimizer.zero_grad()
            model(torch.ones(size, 2)).sum().backward()
            optimizer.step()
            if step % 2 == 0 and bso.on_evaluate(0.1).stop_train:
                break
    assert "the run's first report came after 2 optimizer steps of an epoch's 6" in caplog.text
    assert bso.current_epoch == 5  # the job's max_epochs, counted in reports


def test_a_loop_whose_model_changed_under_its_job_is_told_once_a_run(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """Upstream's loop shape, its model made wider between recurrences while the job's settings
    stay (the same job): the runs' reports say the parameters their optimizers train, and the
    first run of the wider model is told that the job's costs now mix two models, with what to
    do; the server keeps each trial's count."""
    torch = pytest.importorskip("torch", reason="torch.optim's steps are counted")
    job = spec(unique_id("wider").replace("-", ""), beta_knob=None, prune_cost_ratio=None)
    numbers = []
    for width in (4, 4, 16):
        caplog.clear()
        with BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(200)) as bso:
            model = torch.nn.Sequential(torch.nn.Linear(2, width), torch.nn.Linear(width, 2))
            # Two optimizers (a GAN's, a head's): each parameter is counted once.
            optimizers = [
                torch.optim.SGD(model.parameters(), lr=0.1),
                torch.optim.SGD(model[1].parameters(), lr=0.1),
            ]
            size = bso.get_batch_size()
            bso.on_train_begin()
            for epoch in range(1, 6):
                for optimizer in optimizers:
                    optimizer.zero_grad()
                    model(torch.ones(size, 2)).sum().backward()
                    optimizer.step()
                if bso.on_evaluate(0.3 + 0.2 * epoch).stop_train:
                    break
            numbers.append(bso.trial_number)
        changed = [r for r in caplog.records if "trains a model of" in r.getMessage()]
        assert len(changed) == (1 if width == 16 else 0)
    said = changed[0].getMessage()
    assert said.startswith(f"zeus-bso: trial {numbers[2]} of job {bso.job_id} trains a model of 82")
    assert f"(22 parameters in trials {numbers[0]}-{numbers[1]})" in said
    with ServerClient(server.url) as client:
        kept = {t.trial_number: t.model_parameters for t in client.trials(bso.job_id)}
    assert [kept[n] for n in numbers] == [22, 22, 82]


@pytest.mark.parametrize(("size", "reference", "apart"), [(32, 32, 4), (32, 16, 2), (32, 64, 8)])
def test_a_loop_reporting_every_steps_for_n_steps_reports_the_same_samples_apart(
    server: ServerProcess, caplog: pytest.LogCaptureFixture, size: int, reference: int, apart: int
) -> None:
    """A loop that validates every ``bso.steps_for(4)`` steps, 4 tuned at the reference batch
    size, reports every ``4 x reference / size`` steps (rounded down, at least 1): the same
    samples apart at every size, by design, so its first report within an epoch is not warned
    of."""
    torch = pytest.importorskip("torch", reason="torch.optim's steps are counted")
    job = spec(unique_id("stepsfor").replace("-", ""), batch_sizes=[size], default_batch_size=size)
    with BatchSizeOptimizer(
        server.url, job, energy_meter=EstimateMeter(200), reference_batch_size=reference
    ) as bso:
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        with pytest.raises(OperationOrderError, match=r"get_batch_size\(\).*before steps_for"):
            bso.steps_for(4)  # of no batch size yet
        assert bso.get_batch_size() == size
        every = bso.steps_for(4)
        assert (every, bso.steps_for(0), bso.steps_for(1)) == (apart, 0, max(1, reference // 32))
        bso.on_train_begin(16)
        reported_at = []
        for step in range(1, 64 + 1):
            optimizer.zero_grad()
            model(torch.ones(size, 2)).sum().backward()
            optimizer.step()
            if step % every == 0:
                reported_at.append(step)
                if bso.on_evaluate(0.1).stop_train:
                    break
    assert reported_at == [apart * n for n in range(1, 6)]  # the job's max_epochs, 5 reports
    assert "optimizer steps of an epoch's" not in caplog.text


def test_the_last_attempt_of_a_recurrence_must_deliver(server: ServerProcess) -> None:
    """until_converged tells the server that its last attempt must deliver a model (judged by
    the target and max_epochs alone); the attempts before it, and runs outside it, need not."""
    from zeus_bso import RunOutcome, until_converged

    job = spec(unique_id("deliver").replace("-", ""), max_epochs=1)
    job_ids: list[str] = []

    def attempt() -> RunOutcome | None:
        with BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(200)) as bso:
            job_ids.append(bso.job_id)
            bso.get_batch_size()
            bso.on_train_begin()
            bso.on_evaluate(0.1)  # below the target at max_epochs: no model
        return bso.outcome

    outcome = until_converged(attempt, attempts=2)
    assert outcome is not None
    assert not outcome.converged
    attempt()  # outside until_converged
    with ServerClient(server.url) as client:
        trials = client.job_state(job_ids[0])["trials"]
    assert [t["must_deliver"] for t in trials] == [False, True, False]


def test_a_reports_seconds_are_read_with_its_energy(server: ServerProcess) -> None:
    """A report's time and energy span one window: a validation metric computed after the
    readings (a slow gather over the ranks, say) counts in neither. With a meter of 100 W, the
    trial's joules per second are 100 W; its seconds read after the metric gave about 25 W."""
    job = spec(unique_id("window").replace("-", ""))

    def slow_metric() -> float:
        time.sleep(0.3)
        return 0.9

    def log(values: dict[str, float], step: int) -> None:
        pass

    meter = EstimateMeter(100)
    with TrialSession(True, log, server.url, job, energy_meter=meter) as session:
        session.train_begin()
        time.sleep(0.1)
        assert session.report(slow_metric)  # 0.9 reaches the target: the trial is done
        job_id = session.trial.job_id
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(job_id)["trials"]
    assert trial["time"] >= 0.1
    # Read one after the other, the clock and the meter may be some milliseconds apart on a busy
    # machine: a tenth of the 0.1 s window is the margin (a window that took the metric in: 25 W).
    assert trial["energy"] / trial["time"] == pytest.approx(100.0, rel=0.1)


def test_a_run_whose_energy_counter_fails_to_read_mid_run_trains_on_and_reports(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """NVML failing to read a GPU's energy counter for a while (``Unknown Error`` under a loaded
    driver) raised out of the training loop. Now the run trains on: readings are estimated at
    the GPU's mean power until a read succeeds, and the trial is charged the GPU's energy."""
    uuid = "GPU-0000fa11-1111-2222-3333-444444444444"
    one_settable_gpu(monkeypatch, tmp_path, uuid)  # draws 300 W all the time
    job = spec(unique_id("nvmlfault").replace("-", ""), beta_knob=None, prune_cost_ratio=None)
    with BatchSizeOptimizer(server.url, job, energy_meter=NVMLMeter()) as bso:
        bso.get_batch_size()
        bso.on_train_begin()
        for epoch in range(1, 6):
            time.sleep(0.05)
            if epoch == 2:  # every read of two reports, and the reads around them, fail
                fail_counter_reads(tmp_path, uuid, [999] * 20)
            if bso.on_evaluate(0.3 + 0.2 * epoch).stop_train:  # 0.8 at epoch 3
                break
        job_id = bso.job_id
    assert bso.converged
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(job_id)["trials"]
    assert trial["status"] == "reported"
    assert trial["energy"] / trial["time"] == pytest.approx(300.0, rel=0.1)


def test_runs_on_two_kinds_of_gpu_at_once_are_each_attributed_to_their_own(
    server: ServerProcess,
) -> None:
    prefix = unique_id("twohw").replace("-", "")
    a100 = EstimateMeter(400, device_model="A100")
    v100 = EstimateMeter(250, device_model="V100")
    with (
        BatchSizeOptimizer(server.url, spec(prefix), energy_meter=a100) as on_a100,
        BatchSizeOptimizer(server.url, spec(prefix), energy_meter=v100) as on_v100,
    ):
        assert on_a100.job_id == on_v100.job_id  # one job on two profiles
        # The V100 run registered last; the A100 run's trial is still the A100's.
        on_a100.get_batch_size()
        on_v100.get_batch_size()
        with ServerClient(server.url) as client:
            state = client.job_state(on_a100.job_id)
    assert state["profiles"] == ["1xA100@400W", "1xV100@250W"]
    assert state["job"]["gpu_model"] == "V100"
    by_number = {t["trial_number"]: t["profile"] for t in state["trials"]}
    assert by_number == {on_a100.trial_number: "1xA100@400W", on_v100.trial_number: "1xV100@250W"}


def test_job_id_depends_on_the_configuration_but_not_the_gpus_or_adjustable_settings() -> None:
    from zeus_bso.spec import JobSpecFromClient

    base = {
        "job_id_prefix": "x",
        "batch_sizes": [8],
        "default_batch_size": 8,
        "max_power": 300.0,
        "number_of_gpus": 1,
        "gpu_model": "A100",
    }
    first = stable_job_id(JobSpecFromClient(**base))
    assert first == stable_job_id(JobSpecFromClient(**base))
    # Other GPUs are the same job on another hardware profile; another knob is another job.
    other_gpus = {"gpu_model": "H100", "number_of_gpus": 8, "max_power": 5600.0}
    assert first == stable_job_id(JobSpecFromClient(**{**base, **other_gpus}))
    # So are its runs at other power limits: what it learned of its batch sizes holds.
    power = {"power_profiling": False, "power_max_slowdown": 1.1}
    assert first == stable_job_id(JobSpecFromClient(**{**base, **power}))
    # And what its runs are stopped against (a platform adds a cap to its jobs).
    for reference in ("best_run", "best_mean"):
        stop = {"early_stop_reference": reference, "max_run_cost_ratio": 1.5}
        assert first == stable_job_id(JobSpecFromClient(**{**base, **stop}))
    assert first != stable_job_id(JobSpecFromClient(**{**base, "eta_knob": 0.2}))
    # The id this configuration had before options were added: an option at its default keeps
    # it, so a job without an explicit id goes on after an upgrade; set, it is another job.
    assert first == "x-a8fa24e7"
    assert first != stable_job_id(JobSpecFromClient(**{**base, "learning_curve_stop": False}))


def test_unreachable_server_at_start_is_a_clear_error_when_asked_to_raise() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    bso = BatchSizeOptimizer(
        url,
        spec("nobody"),
        energy_meter=EstimateMeter(100),
        retry_seconds=0,
        on_server_unavailable="raise",
    )  # nothing is asked yet
    with pytest.raises(ServerConnectionError, match="cannot reach the batch size optimizer"):
        bso.get_batch_size()
    bso.abort()


def test_a_server_whose_host_drops_connections_is_given_up_on_at_the_connect_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server's host that is down, or a network that drops its packets, answers a connection
    with nothing: the run gives up on it at `CONNECT_TIMEOUT` (1 s here), not the client's 30 s
    timeout, and trains at the default without the server. Its stand-in here: a listening
    socket whose backlog is full, whose next connection hangs as a dropped one does."""
    from zeus_bso.client import http

    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(http, "CONNECT_TIMEOUT", 1.0)
    with dropping_port() as port:
        job = spec("blackholed")
        bso = BatchSizeOptimizer(f"http://127.0.0.1:{port}", job, EstimateMeter(100))
        started = time.monotonic()
        assert bso.get_batch_size() == job.default_batch_size
        waited = time.monotonic() - started
        assert bso.offline
        bso.abort()
    assert waited < 10.0  # the 30 s timeout before


def test_a_server_urls_password_is_never_printed(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """A URL with credentials (a proxy's basic auth): the unreachable-server error shows
    ``user:***@``, and httpx's request log, which names every URL, stays quiet at INFO."""
    caplog.set_level(logging.DEBUG)
    url = f"http://alice:s3cret@127.0.0.1:{free_port()}"
    bso = BatchSizeOptimizer(
        url, spec("nobody"), EstimateMeter(100), retry_seconds=0, on_server_unavailable="raise"
    )
    with pytest.raises(ServerConnectionError) as raised:
        bso.get_batch_size()
    bso.abort()
    assert "alice:***@127.0.0.1" in str(raised.value)
    assert "s3cret" not in str(raised.value)
    host = server.url.split("://", 1)[1]
    with ServerClient(f"http://alice:s3cret@{host}") as client:
        client.list_jobs()
    assert "s3cret" not in caplog.text


def test_without_a_server_at_start_the_run_trains_at_the_default_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The run trains at the default batch size (or, once a recommendation was seen on this
    machine, at that), stops at its target locally, reports nothing and says so."""
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    url = f"http://127.0.0.1:{free_port()}"
    shown: list[str] = []
    job = spec("offline")
    bso = BatchSizeOptimizer(
        url, job, energy_meter=EstimateMeter(100), retry_seconds=0, show=shown.append
    )
    assert bso.get_batch_size() == job.default_batch_size
    assert bso.offline
    assert bso.trial is None
    assert "training at batch size 32, the job's default, without the server" in caplog.text
    bso.on_train_begin()
    assert not bso.on_evaluate(0.5).stop_train
    answer = bso.on_evaluate(0.95)
    assert answer.stop_train
    assert answer.converged
    bso.end()
    assert bso.outcome is not None
    assert (bso.outcome.reason, bso.outcome.offline, bso.outcome.epochs) == (
        StopReason.CONVERGED,
        True,
        2,
    )
    (line,) = shown
    assert line.startswith("zeus-bso: batch size 32 reached the target at epoch 2 of 5")
    assert "it trained without the server, which learned nothing from it" in line
    # A recommendation this machine saw for the job is the fallback from then on.
    fallback.remember(bso.job_id, 64)
    again = BatchSizeOptimizer(
        url, job, energy_meter=EstimateMeter(100), retry_seconds=0, show=shown.append
    )
    assert again.get_batch_size() == 64
    assert "training at batch size 64, the last recommendation seen on this machine" in caplog.text
    again.release("not trained in this test")  # nothing to count, nor a server to count it
    assert shown[1] == (
        "zeus-bso: batch size 64 did not train: not trained in this test; the server could not"
        " be reached at its start."
    )


def test_a_size_that_ran_out_of_memory_here_is_not_the_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path))
    sizes = [16, 32, 64]
    fallback.ran_out_of_memory("j", 64, sizes, 64)  # the default ran out: the next size below
    assert fallback.recalled("j") == 32
    fallback.ran_out_of_memory("j", 64, sizes, 64)  # the fallback is below it already
    assert fallback.recalled("j") == 32
    fallback.ran_out_of_memory("j", 32, sizes, 64)
    assert fallback.recalled("j") == 16
    fallback.ran_out_of_memory("j", 16, sizes, 64)  # nothing smaller: nothing better to fall to
    assert fallback.recalled("j") == 16
    fallback.remember("k", 16)  # a recommendation below the size stays
    fallback.ran_out_of_memory("k", 32, sizes, 64)
    assert fallback.recalled("k") == 16


def test_order_errors(server: ServerProcess) -> None:
    bso = BatchSizeOptimizer(
        server.url, spec(unique_id("order").replace("-", "")), energy_meter=EstimateMeter(100)
    )
    with pytest.raises(OperationOrderError, match="get_batch_size"):
        bso.on_train_begin()
    with pytest.raises(OperationOrderError, match="get_batch_size"):
        bso.on_evaluate(0.5)
    bso.end()


def test_a_loop_that_never_began_training_reports_nothing(server: ServerProcess) -> None:
    """A loop that forgot ``on_train_begin()`` measured no time or energy: its report said the
    run converged at a cost of 0, and the job learned that size as free. Now the report is
    refused, the `with` block releases the trial, and nothing is charged to the size; with
    ``elapsed=`` of its own, a loop need not begin."""
    job = spec(unique_id("forgot").replace("-", ""))

    def forgetful_loop() -> int:
        with BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(100)) as bso:
            forgetful.append(bso)
            size = bso.get_batch_size()
            bso.on_evaluate(0.9)
            return size

    forgetful: list[BatchSizeOptimizer] = []
    with pytest.raises(OperationOrderError, match="on_train_begin"):
        forgetful_loop()
    (bso,) = forgetful
    size = bso.batch_size
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(bso.job_id)["trials"]
    assert (trial["batch_size"], trial["status"], trial["cost"]) == (size, "released", None)
    assert "on_train_begin" in trial["message"]
    with BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(100)) as bso:
        bso.get_batch_size()
        assert bso.on_evaluate(0.9, elapsed=Elapsed(10.0, 1000.0)).stop_train
    with ServerClient(server.url) as client:
        trials = client.job_state(bso.job_id)["trials"]
    assert sorted((t["status"], t["time"], t["energy"]) for t in trials) == [
        ("released", None, None),
        ("reported", 10.0, 1000.0),
    ]


def test_heartbeats_keep_the_lease(tmp_path: Path) -> None:
    """The lease's clock jumps past its end (no report for that long); the client's heartbeat
    thread renews it before the server expires it."""
    db_url = sqlite_url(tmp_path / "bso.db")
    server = ServerProcess(db_url, cwd=tmp_path, env={"ZEUS_BSO_LEASE_SECONDS": "30"})
    try:
        bso = BatchSizeOptimizer(
            server.url, spec("beat"), energy_meter=EstimateMeter(100), heartbeat_seconds=0.25
        )
        bso.get_batch_size()
        bso.on_train_begin()
        (aged,) = age_leases(db_url, bso.job_id, 60.0)
        assert aged < time.time()  # expired, if nothing renews it
        with ServerClient(server.url) as client:

            def mine() -> dict[str, Any]:
                trials = client.job_state(bso.job_id)["trials"]
                return next(t for t in trials if t["trial_number"] == bso.trial_number)

            # The heartbeat (every 0.25 s) renews it; it may have done so already.
            deadline = time.monotonic() + 10.0
            while mine()["lease_expires_at"] < time.time() and time.monotonic() < deadline:
                time.sleep(0.05)
            client.dispatch(bso.job_id)  # expires what has expired
            assert mine()["status"] == "dispatched"
        bso.end()
    finally:
        server.stop()


def test_a_report_the_server_missed_is_delivered_at_the_end(tmp_path: Path) -> None:
    db = tmp_path / "bso.db"
    server = ServerProcess(sqlite_url(db), cwd=tmp_path)
    try:
        bso = BatchSizeOptimizer(
            server.url,
            spec("pending"),
            energy_meter=EstimateMeter(100),
            heartbeat_seconds=0,
            retry_seconds=0,
        )
        bso.get_batch_size()
        bso.on_train_begin()
    finally:
        server.stop()  # also when the test fails before: no server left running
    assert bso.on_evaluate(0.3).stop_train is False  # the server is down: training goes on
    answer = bso.on_evaluate(0.9)  # its target, judged here: the run stops as the server would
    assert (answer.stop_train, answer.converged) == (True, True)
    restarted = ServerProcess(sqlite_url(db), cwd=tmp_path)
    try:
        bso.client.server_url = restarted.url
        bso.client._http.base_url = restarted.url  # the server came back on another port
        bso.end()
        with ServerClient(restarted.url) as client:
            (trial,) = client.job_state(bso.job_id)["trials"]
        assert trial["status"] == "reported"
        assert trial["converged"] is True
    finally:
        restarted.stop()


def test_an_elastic_restart_continues_the_trial(tmp_path: Path) -> None:
    """torchrun restarts a worker that crashed after two epochs; the restart names the same run
    (torchrun's run id), gets the same trial back and reports epochs 3 and 4 of it."""
    pytest.importorskip("torch", reason="torchrun comes with torch (pip install torch)")
    server = ServerProcess(sqlite_url(tmp_path / "bso.db"), cwd=tmp_path)
    try:
        job_id = unique_id("elastic")
        command = [
            preloaded(sys.executable),
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=1",
            "--max-restarts=1",
            str(Path(__file__).with_name("elastic_restart_worker.py")),
            server.url,
            job_id,
            str(tmp_path),
        ]
        env = environment_without_settings()
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, done.stderr[-3000:]
        first, second = (json.loads((tmp_path / f"attempt{n}.json").read_text()) for n in (0, 1))
        assert first["run_key"] == second["run_key"]
        assert first["run_key"].startswith("torchelastic:")
        assert (second["trial_number"], second["batch_size"]) == (1, first["batch_size"])
        assert (first["epochs_before"], second["epochs_before"]) == (0, 2)
        assert second["time_before"] > 0.2  # the crashed attempt's two epochs
        with ServerClient(server.url) as client:
            (trial,) = client.job_state(job_id)["trials"]
        assert trial["status"] == "reported"
        assert trial["converged"] is True
        assert trial["epochs"] == 4
        assert trial["time"] > 0.4  # four epochs of about 0.1 s, over both attempts
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("target", "first", "higher", "warned"),
    [
        (75.0, 0.613, True, True),  # accuracy as correct / total against a percentage
        (100.0, 0.0, True, True),
        (75.0, 61.3, True, False),  # both percentages
        (0.75, 0.613, True, False),  # both fractions
        (75.0, 0.613, False, False),  # a loss
        (250.0, 0.613, True, False),  # no percentage
    ],
)
def test_a_fraction_against_a_percentage_target_is_said_at_the_first_report(
    server: ServerProcess,
    caplog: pytest.LogCaptureFixture,
    target: float,
    first: float,
    higher: bool,
    warned: bool,
) -> None:
    """A first report of 0.613 against ``target_metric=75``: no run would reach the target, each
    training to ``max_epochs``. Said, not refused (a 0-100 metric can start below 1): the run
    reports and goes on, and only its first report says so."""
    job = spec(unique_id("fraction").replace("-", ""), target_metric=target)
    job = job.model_copy(update={"higher_is_better_metric": higher})
    with (
        caplog.at_level(logging.WARNING, logger="zeus_bso"),
        BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(100), show=None) as bso,
    ):
        bso.get_batch_size()
        bso.on_train_begin()
        if not bso.on_evaluate(first).stop_train:  # a loss below its target converged
            bso.on_evaluate(first / 2)
    said = [
        r.getMessage() for r in caplog.records if "a fraction against a percentage" in r.message
    ]
    if not warned:
        assert said == []
        return
    assert said == [
        f"zeus-bso: the first metric reported is {first:g} and target_metric is {target:g}: a"
        " fraction against a percentage? No run reaches the target if so, and each trains to"
        f" max_epochs (5). Report the metric as the target is given ({first * 100:g}), or give"
        f" the target as a fraction ({target / 100:g})"
    ]
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(bso.job_id)["trials"]
    assert trial["epochs"] == 2  # both reports counted


@pytest.mark.parametrize(
    ("target", "first", "refused"),
    [
        (0.75, 61.3, True),  # accuracy as 100 * correct / total against a fraction
        (1.0, 9.8, True),
        (0.75, 0.613, False),
        (75.0, 61.3, False),  # both percentages
        (0.75, 1.0, False),  # a fraction at its top
        (0.75, 250.0, False),  # no percentage
    ],
)
def test_a_percentage_against_a_fractional_target_is_refused_at_the_first_report(
    server: ServerProcess, target: float, first: float, refused: bool
) -> None:
    """A first report of 61.3 against ``target_metric=0.75`` "reached" the target: every run
    converged at its first validation, and the job learned nothing of the batch sizes."""
    job = spec(unique_id("percent").replace("-", ""), target_metric=target)
    bso = BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(100), show=None)

    def loop() -> bool:
        with bso:
            bso.get_batch_size()
            bso.on_train_begin()
            bso.on_evaluate(first)
            return bso.on_evaluate(first + 200.0).stop_train  # a later report is not checked

    if not refused:
        assert loop()
        return
    with pytest.raises(ConfigurationError, match=f"the first metric reported is {first:g}"):
        loop()
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(bso.job_id)["trials"]
    assert (trial["status"], trial["epochs"]) == ("released", None)  # counted against nothing
    lower = spec(unique_id("loss").replace("-", ""), target_metric=0.5)
    lower = lower.model_copy(update={"higher_is_better_metric": False})
    with BatchSizeOptimizer(server.url, lower, energy_meter=EstimateMeter(100), show=None) as bso:
        bso.get_batch_size()
        bso.on_train_begin()
        assert not bso.on_evaluate(first).stop_train  # a loss of any size is not checked


def test_a_run_that_diverges_stops_and_its_size_does_not_converge(server: ServerProcess) -> None:
    """A NaN metric (training diverged) raised an error out of the training loop, and the trial
    failed, which counts against its size only as a crash does (`max_unreported_failures`,
    three): the next runs were dispatched the same size, and diverged in turn. The run stops
    instead, not converged; its last report goes again as its final one, with the diverged
    epoch's time, and the server counts the size as not converging (charged as a run that
    stopped itself, at ``max_epochs``): the next run explores another size. The outcome says
    why, and `until_converged` starts the recurrence again."""
    from zeus_bso import RunOutcome, until_converged

    job = spec(unique_id("nan").replace("-", ""))
    sizes: list[int] = []

    def diverging() -> RunOutcome | None:
        with BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(100), show=None) as bso:
            size = bso.get_batch_size()
            sizes.append(size)
            bso.on_train_begin()
            for metric in (0.3, float("nan") if size == 32 else 0.9):
                answer = bso.on_evaluate(metric)
                if answer.stop_train:
                    break
            else:
                pytest.fail("the run was not stopped")
        return bso.outcome

    outcome = until_converged(diverging, attempts=2)
    assert outcome is not None
    assert outcome.converged
    assert sizes[0] == 32
    assert sizes[1] != 32
    with ServerClient(server.url) as client:
        state = client.job_state(stable_job_id(job))
    (diverged,) = [t for t in state["trials"] if t["trial_number"] == 1]
    assert (diverged["status"], diverged["converged"], diverged["epochs"]) == (
        "reported",
        False,
        2,
    )
    assert diverged["cost"] == pytest.approx(diverged["energy"] / 2 * 5, rel=0.2)  # max_epochs
    assert (
        "(training diverged at batch size 32: its metric at epoch 2 is nan" in (diverged["message"])
    )


def test_a_run_that_diverges_at_its_first_validation_counts_as_not_converging(
    server: ServerProcess,
) -> None:
    """Diverged at its first validation, a run has no earlier report to send again as its final
    one: it reports that it diverged (an extension the server declares), and the size counts
    as not converging at once (its trial had failed, a crash's count: the next runs were given
    the same size until three had failed). Its metric, none, is not stored."""
    job = spec(unique_id("nan1").replace("-", ""))
    with BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(100), show=None) as bso:
        bso.get_batch_size()
        bso.on_train_begin()
        answer = bso.on_evaluate(float("inf"))
        assert (answer.stop_train, answer.converged) == (True, False)
    assert bso.outcome is not None
    assert not bso.outcome.converged
    assert "training diverged at batch size 32: its metric at epoch 1 is inf" in (
        bso.outcome.summary()
    )
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(bso.job_id)["trials"]
    assert (trial["status"], trial["converged"], trial["epochs"]) == ("reported", False, 1)
    assert (trial["metric"], trial["curve"]) == (None, [])
    assert "(training diverged at batch size 32" in trial["message"]
    with BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(100), show=None) as bso:
        assert bso.get_batch_size() != 32
        bso.on_train_begin()
        bso.on_evaluate(0.9)


@pytest.mark.parametrize(
    ("back", "metric", "curve"),
    [(False, 0.3, [[1, 0.3]]), (True, 0.4, [[1, 0.3], [2, 0.4]])],
    ids=["still-away", "back"],
)
def test_a_run_that_diverges_after_the_server_was_away_says_so_and_keeps_its_last_metric(
    server: ServerProcess, back: bool, metric: float, curve: list[list[float]]
) -> None:
    """A report kept while the server was away (a reverse proxy's 502), then training diverged.
    Still away: the report that training diverged is kept and delivered as the run ends: the
    size counts as not converging, as it would have at once, rather than as a crash (its trial
    ended failed), and the outcome says why; it goes in the kept report's stead, whose metric
    is lost. Back: the kept report's metric, the run's last that is a number, was lost too (the
    report that ended the trial, whose metric the server does not take, went in its stead); it
    is delivered first, then the run ends as diverged."""
    from tests.proxy import ReverseProxy

    proxy = ReverseProxy(server.url)
    try:
        job = spec(unique_id("nanaway").replace("-", ""))
        with BatchSizeOptimizer(proxy.url, job, energy_meter=EstimateMeter(100), show=None) as bso:
            bso.get_batch_size()
            bso.on_train_begin()
            assert not bso.on_evaluate(0.3).stop_train
            proxy.down.set()
            assert not bso.on_evaluate(0.4).stop_train  # kept for later
            if back:
                proxy.down.clear()
            answer = bso.on_evaluate(float("nan"))
            assert (answer.stop_train, answer.converged) == (True, False)
            proxy.down.clear()
        assert bso.outcome is not None
        assert not bso.outcome.converged
        assert bso.outcome.why.startswith("training diverged at batch size 32")
        with ServerClient(server.url) as client:
            (trial,) = client.job_state(bso.job_id)["trials"]
        assert (trial["status"], trial["converged"], trial["epochs"]) == ("reported", False, 3)
        assert (trial["metric"], trial["curve"]) == (metric, curve)
        assert "(training diverged at batch size 32" in trial["message"]
    finally:
        proxy.close()


@pytest.mark.parametrize("status", [429, 408])
def test_a_proxys_rate_limit_is_waited_out_or_its_report_kept(
    server: ServerProcess, status: int
) -> None:
    """A reverse proxy's 429 (its rate limit: an ingress's ``limit-rps``) or 408 was taken for
    the server's refusal: the report raised out of the training loop. Nothing took the
    request: it is retried as a 503 is, and where the limit lasts past the retries, the report
    is kept for later, training goes on, and the next report delivers it."""
    from tests.proxy import ReverseProxy

    proxy = ReverseProxy(server.url, down_on="/report", status=status)
    try:
        job = spec(unique_id("ratelimit").replace("-", ""))
        meter = EstimateMeter(100)
        # Retries wait at most 2 s each: within 5 s, one comes after the limit has passed.
        with BatchSizeOptimizer(proxy.url, job, meter, show=None, retry_seconds=5.0) as bso:
            bso.get_batch_size()
            bso.on_train_begin()
            proxy.down.set()
            threading.Timer(0.5, proxy.down.clear).start()
            assert not bso.on_evaluate(0.3).stop_train  # retried until the proxy let it by
            with ServerClient(server.url) as client:
                (trial,) = client.job_state(bso.job_id)["trials"]
            assert trial["epochs"] == 1
            proxy.down.set()
            assert not bso.on_evaluate(0.4).stop_train  # kept for later
            proxy.down.clear()
            answer = bso.on_evaluate(0.9)
            assert (answer.stop_train, answer.converged) == (True, True)
        with ServerClient(server.url) as client:
            (trial,) = client.job_state(bso.job_id)["trials"]
        assert (trial["status"], trial["epochs"], trial["converged"]) == ("reported", 3, True)
    finally:
        proxy.close()


def test_a_page_not_the_servers_mid_run_keeps_the_report_for_later(
    server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something between the run and the server answering a report with a page of its own (a
    403 of an authenticating proxy whose session ran out, a firewall's) raised out of the
    training loop, and a run's kept report that met one at the next start was dropped. The
    server never answers so: the request did not reach it. The run trains on to its end with
    its report kept, a run that meets the page again keeps it still, and the next run that
    reaches the server delivers it."""
    from tests.proxy import ReverseProxy

    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    proxy = ReverseProxy(server.url, down_on="/report", status=403)
    try:
        job = spec(unique_id("proxypage").replace("-", ""), max_epochs=2)
        meter = EstimateMeter(100)
        with BatchSizeOptimizer(proxy.url, job, meter, show=None) as bso:
            bso.get_batch_size()
            bso.on_train_begin()
            assert not bso.on_evaluate(0.3).stop_train
            proxy.down.set()
            answer = bso.on_evaluate(0.4)  # at max_epochs: judged here, and kept
            assert (answer.stop_train, answer.converged) == (True, False)
        with ServerClient(server.url) as client:
            (trial,) = client.job_state(bso.job_id)["trials"]
        assert trial["epochs"] == 1  # the second report is kept on this machine
        with BatchSizeOptimizer(proxy.url, job, meter, show=None) as again:
            again.get_batch_size()  # its delivery of the kept report met the page: kept still
        proxy.down.clear()
        with BatchSizeOptimizer(proxy.url, job, meter, show=None) as again:
            again.get_batch_size()  # delivers what the first run kept, then dispatches
            again.on_train_begin()
            again.on_evaluate(0.9)
        with ServerClient(server.url) as client:
            first = client.job_state(bso.job_id)["trials"][-1]
        assert (first["trial_number"], first["epochs"], first["status"]) == (1, 2, "reported")
    finally:
        proxy.close()


@pytest.mark.parametrize("apart", [False, True])
def test_a_plain_loop_on_every_rank_of_torchrun_trains_one_run(
    server: ServerProcess, tmp_path: Path, apart: bool
) -> None:
    """A BatchSizeOptimizer on every rank registered a run a rank, each at a batch size of its
    own (rank 0 at 64 while rank 1 trained at 128): rank 1's is refused, saying to use
    `TrialSession` on every rank, which trains one run at rank 0's batch size on both. Ranks
    that report different metrics (each its share's, not gathered) are told so, once: the server
    judges the run by rank 0's part of the validation set. Its report says the whole model's
    size, its parameters sharded by FSDP's ``fully_shard`` (without ``apart``) or not."""
    pytest.importorskip("torch", reason="torchrun comes with torch (pip install torch)")
    job_id = unique_id("ddploop")
    command = [preloaded(sys.executable), "-m", "torch.distributed.run", "--nproc_per_node=2",
               f"--master_port={free_port()}", str(Path(__file__).with_name("ddp_loop_worker.py")),
               server.url, job_id, str(tmp_path), *(["apart"] if apart else [])]  # fmt: skip
    env = environment_without_settings()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stderr.count("the processes reported different metrics")
    assert said == (1 if apart else 0), done.stderr[-3000:]
    if apart:
        assert "(0.2 on rank 0, 0.25 on rank 1)" in done.stderr
        assert "accelerator.gather_for_metrics" in done.stderr
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    assert ranks[0]["refused"] is None
    assert "this is rank 1 of 2" in ranks[1]["refused"]
    assert "TrialSession on every rank" in ranks[1]["refused"]
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(job_id)["trials"]  # none of rank 1's own
    assert (trial["status"], trial["converged"], trial["epochs"]) == ("reported", True, 3)
    # The whole model's parameters, sharded (each rank holds half: FSDP's DTensors count
    # whole) or not.
    assert trial["model_parameters"] == 90
    for seen in ranks:
        assert (seen["batch_size"], seen["trial_number"]) == (trial["batch_size"], 1)
        assert seen["epochs"] == 3  # both stopped at rank 0's answer (0.6 >= 0.5)


def test_a_process_alone_that_measures_every_gpu_of_the_machine_is_told_once(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A plain loop on one GPU of a machine of several, ``CUDA_VISIBLE_DEVICES`` unset, is
    charged every GPU it sees and registers them all as its own: said once a process, with
    what to set; not where ``CUDA_VISIBLE_DEVICES`` chose the GPUs. NVML is the test double."""
    from zeus_bso.energy import auto

    nvml_double(monkeypatch)
    monkeypatch.setattr(auto, "_EVERY_GPU_SAID", False)
    a100 = {"name": "NVIDIA A100-SXM4-40GB", "watts": 100, "limit_w": 400, "counter": True}
    monkeypatch.setenv(
        "ZEUS_BSO_TEST_GPUS", json.dumps([{**a100, "uuid": f"GPU-{i}"} for i in range(2)])
    )
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    said = "this run measures every GPU this process sees, all 2 (CUDA_VISIBLE_DEVICES is not set)"
    # The first run is told; the second, in the same process, not again; then, CUDA_VISIBLE_DEVICES
    # naming both, a process that had not been told is not.
    for chosen, times in ((None, 1), (None, 0), ("0,1", 0)):
        if chosen is not None:
            monkeypatch.setattr(auto, "_EVERY_GPU_SAID", False)
            monkeypatch.setenv("CUDA_VISIBLE_DEVICES", chosen)
        caplog.clear()
        with BatchSizeOptimizer(server.url, spec(unique_id("everygpu"))) as bso:
            assert bso.meter.device_count == 2
            bso.release("not trained in this test")
        assert caplog.text.count(said) == times


def test_a_process_of_a_launch_registers_the_gpu_of_its_local_rank(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rank 0 of a launch of two processes on a node of three GPUs (``torchrun
    --nproc-per-node=2``, ``CUDA_VISIBLE_DEVICES`` unset): the run registers the GPU its rank
    trains on, not all three (each rank counted every GPU it saw). NVML is the test double."""
    nvml_double(monkeypatch)
    a100 = {"name": "NVIDIA A100-SXM4-40GB", "watts": 100, "limit_w": 400, "counter": True}
    monkeypatch.setenv(
        "ZEUS_BSO_TEST_GPUS", json.dumps([{**a100, "uuid": f"GPU-{i}"} for i in range(3)])
    )
    for name in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    job = spec(unique_id("localrank"))
    with BatchSizeOptimizer(server.url, job) as bso:
        bso.get_batch_size()
        assert [device.key for device in bso.meter.devices] == ["GPU-0"]
        bso.release("not trained in this test")
    with ServerClient(server.url) as client:
        (registered,) = client.list_jobs(prefix=job.job_id_prefix or "")
    assert (registered.number_of_gpus, registered.profiles) == (1, ["1xNVIDIA A100-SXM4-40GB@400W"])


@pytest.mark.parametrize(
    ("rank", "world"),
    [
        ("RANK", "WORLD_SIZE"),  # torchrun
        ("SLURM_PROCID", "SLURM_NTASKS"),  # srun -n 4 python train.py: each task registered
        ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
        ("PMI_RANK", "PMI_SIZE"),
    ],
)
def test_a_launchers_rank_other_than_0_is_refused_before_a_process_group(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch, rank: str, world: str
) -> None:
    for name in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(rank, "3")
    monkeypatch.setenv(world, "4")
    bso = BatchSizeOptimizer(server.url, spec(unique_id("rank3")), energy_meter=EstimateMeter(1))
    with pytest.raises(ConfigurationError, match="this is rank 3 of 4"):
        bso.get_batch_size()
    with pytest.raises(ConfigurationError, match="rank 3 of 4"):
        bso.resume({})
    monkeypatch.setenv(rank, "0")
    assert bso.get_batch_size() == 32  # rank 0 of the same launch asks
    bso.end()


def test_a_session_on_a_rank_other_than_0_without_a_process_group_says_so(
    server: ServerProcess,
) -> None:
    """A process told it is not the main one (``is_main=False``: a rank other than 0, say
    from the launcher's ``RANK``) before its process group exists waited for rank 0's trial in
    a broadcast that took place nowhere, and crashed with an AttributeError."""
    with pytest.raises(ConfigurationError, match="nothing reached it from rank 0"):
        TrialSession(
            False,
            lambda values, step: None,
            server.url,
            spec(unique_id("nogroup")),
            energy_meter=EstimateMeter(1),
        )


def test_a_server_url_with_a_path_gets_a_hint(server: ServerProcess) -> None:
    with (
        ServerClient(server.url + "/jobs") as client,
        pytest.raises(ServerRejectedError, match=r"give the server's root, http://127\.0\.0\.1:"),
    ):
        client.list_jobs()


def test_the_server_and_token_come_from_the_environment(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ZEUS_BSO_SERVER_URL", raising=False)
    monkeypatch.delenv("ZEUS_BSO_TOKEN", raising=False)
    with pytest.raises(ConfigurationError, match=r"ZEUS_BSO_SERVER_URL .*ZEUS_BSO_TOKEN"):
        BatchSizeOptimizer(job=spec("envless"), energy_meter=EstimateMeter(100))
    with pytest.raises(ConfigurationError, match=r"job=\.\.\. is required"):
        BatchSizeOptimizer(server.url)
    monkeypatch.setenv("ZEUS_BSO_SERVER_URL", server.url)
    monkeypatch.setenv("ZEUS_BSO_TOKEN", "from-the-environment")
    bso = BatchSizeOptimizer(job=spec("fromenv"), energy_meter=EstimateMeter(100))
    assert bso.client.server_url == server.url
    assert bso.client._http.headers["Authorization"] == "Bearer from-the-environment"
    bso.abort()


def test_fit_in_memory_tries_sizes_until_one_fits_and_marks_the_rest(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """The plain client's helper: sizes that run out of memory in the steps tried are marked
    ``infeasible`` and the server's next size is tried; a size known to fit is not tried. The
    words name a GPU only where there is one (an estimate's device is none: "on estimate")."""
    caplog.set_level(logging.WARNING)
    job = spec("plainoom", batch_sizes=[8, 16, 32, 64], default_batch_size=32, prune_stride=1)
    tried: list[int] = []

    def try_steps(size: int) -> None:
        tried.append(size)
        if size > 8:
            raise RuntimeError(f"CUDA out of memory. Tried to allocate {size} MiB")

    bso = BatchSizeOptimizer(server.url, job, EstimateMeter(100), show=None)
    size = bso.fit_in_memory(try_steps)
    # After each size that ran out, the smallest is tried: it fits, so the size was to blame.
    assert (size, tried) == (8, [32, 8, 16, 8, 8])
    assert not bso.memory_unknown
    bso.on_train_begin()
    assert bso.on_evaluate(0.99).stop_train
    bso.end()
    with ServerClient(server.url) as client:
        trials = client.trials(bso.job_id)
    statuses = {t.batch_size: t.status for t in trials}
    assert statuses == {32: "infeasible", 16: "infeasible", 8: "reported"}
    assert "batch size 32 ran out of memory on this machine" in caplog.text
    assert "on estimate" not in caplog.text

    again = BatchSizeOptimizer(server.url, job, EstimateMeter(100), show=None)
    tried.clear()
    assert again.fit_in_memory(try_steps) == 8
    assert tried == []  # 8 ran on this profile already: nothing is tried
    again.abort()


def test_out_of_memory_at_every_size_is_not_charged_to_any(server: ServerProcess) -> None:
    """A bug that allocates whatever the batch: the size tried and the smallest both run out,
    so the run raises, its trial released, and no cap is set."""
    job = spec("plainoombug", batch_sizes=[8, 16, 32], default_batch_size=32)
    tried: list[int] = []

    def try_steps(size: int) -> None:
        tried.append(size)
        raise RuntimeError("CUDA out of memory. Tried to allocate 4.00 TiB")

    bso = BatchSizeOptimizer(server.url, job, EstimateMeter(100), show=None)
    with pytest.raises(OutOfMemoryNotTheBatchSizeError, match="even at 8 samples a step"):
        bso.fit_in_memory(try_steps)
    assert tried == [32, 8]
    assert bso.outcome is not None
    assert bso.outcome.reason is StopReason.NOT_TRAINED
    with ServerClient(server.url) as client:
        state = client.job_state(bso.job_id)
    assert [(t["batch_size"], t["status"]) for t in state["trials"]] == [(32, "released")]
    assert state["memory_caps"] == {}


def test_a_first_batch_of_another_size_releases_the_trial(server: ServerProcess) -> None:
    torch = pytest.importorskip(
        "torch", reason="a batch of tensors needs torch (pip install torch)"
    )

    job = spec("plainbatch")
    bso = BatchSizeOptimizer(server.url, job, EstimateMeter(100), show=None)
    assert bso.get_batch_size() == 32
    bso.on_train_begin()
    with pytest.raises(ConfigurationError, match="first training batch has 64 samples"):
        bso.on_step_begin([torch.zeros(64, 3), torch.zeros(64)])
    with ServerClient(server.url) as client:
        (trial,) = client.trials(bso.job_id)
    assert trial.status == "released"


def test_a_smaller_first_batch_is_refused_in_words_for_data_smaller_than_the_size_too(
    server: ServerProcess,
) -> None:
    """A first batch of 20 at batch size 32: a DataLoader of its own size, or data of 20
    samples in all (its one batch): the words say what to change for either."""
    torch = pytest.importorskip(
        "torch", reason="a batch of tensors needs torch (pip install torch)"
    )

    bso = BatchSizeOptimizer(server.url, spec("plainsmall"), EstimateMeter(100), show=None)
    assert bso.get_batch_size() == 32
    bso.on_train_begin()
    said = "where the data holds 20 samples in all, leave the job's sizes above it out"
    with pytest.raises(ConfigurationError, match=said):
        bso.on_step_begin([torch.zeros(20, 3), torch.zeros(20)])


def test_a_smaller_first_batch_is_taken_where_the_loop_said_its_epoch_has_one_batch(
    server: ServerProcess,
) -> None:
    """Data of 20 samples at batch size 32 makes one batch of 20 an epoch: a loop that says so
    (``on_train_begin(len(loader))``, 1) trains it, as Lightning does; the run converges."""
    torch = pytest.importorskip(
        "torch", reason="a batch of tensors needs torch (pip install torch)"
    )

    bso = BatchSizeOptimizer(server.url, spec("plainone"), EstimateMeter(100), show=None)
    assert bso.get_batch_size() == 32
    bso.on_train_begin(1)
    bso.on_step_begin([torch.zeros(20, 3), torch.zeros(20)])
    bso.on_step_end()
    assert bso.on_evaluate(0.9).stop_train  # the target reached
    bso.end()
    with ServerClient(server.url) as client:
        (trial,) = client.trials(bso.job_id)
    assert (trial.batch_size, trial.status) == (32, "reported")


def test_a_plain_loop_with_an_lr_rule_that_scales_no_optimizer_is_refused(
    server: ServerProcess,
) -> None:
    """Upstream's loop shape with ``lr_rule="linear"`` and no ``bso.scale(optimizer)``: its
    rate would be the one tuned at the default at every size. ``on_train_begin`` refuses it,
    saying what to call; the trial is released."""
    bso = BatchSizeOptimizer(
        server.url, spec("plainunscaled"), EstimateMeter(100), show=None, lr_rule="linear"
    )
    bso.get_batch_size()
    with pytest.raises(ConfigurationError, match=r"call bso\.scale\(optimizer\) once the"):
        bso.on_train_begin()
    bso.abort()  # as the script's exit would
    with ServerClient(server.url) as client:
        (trial,) = client.trials(bso.job_id)
    assert trial.status == "released"


def test_the_jobs_lr_rule_is_part_of_its_settings(server: ServerProcess) -> None:
    """Runs at another learning-rate rule are another job; the job may say the rule itself."""
    job = spec("lrrule", batch_sizes=[8, 16], default_batch_size=16)
    plain = BatchSizeOptimizer(server.url, job, EstimateMeter(100), show=None)
    linear = BatchSizeOptimizer(server.url, job, EstimateMeter(100), show=None, lr_rule="linear")
    assert plain.job_id != linear.job_id
    said = job.model_copy(update={"job_id": None, "lr_rule": "linear"})
    by_job = BatchSizeOptimizer(server.url, said, EstimateMeter(100), show=None)
    assert (by_job.job_id, by_job.lr.rule) == (linear.job_id, "linear")
    with pytest.raises(ConfigurationError, match="but the job says lr_rule='linear'"):
        BatchSizeOptimizer(server.url, said, EstimateMeter(100), lr_rule="sqrt")
    # A fixed job_id registered with another rule is refused, naming it.
    fixed = job.model_copy(update={"job_id": unique_id("lrrule")})
    first = BatchSizeOptimizer(server.url, fixed, EstimateMeter(100), show=None, lr_rule="sqrt")
    first.get_batch_size()
    first.abort()
    other = BatchSizeOptimizer(server.url, fixed, EstimateMeter(100), show=None)
    with pytest.raises(ServerRejectedError, match="lr_rule"):
        other.get_batch_size()
    for made in (plain, linear, by_job, other):
        made.abort()


def test_fit_in_memory_raises_other_errors_and_refuses_after_training(
    server: ServerProcess,
) -> None:
    job = spec("plainoomerr", batch_sizes=[8, 16], default_batch_size=16)
    bso = BatchSizeOptimizer(server.url, job, EstimateMeter(100), show=None)

    def broken(size: int) -> None:
        raise ValueError("a bug in the training step")

    with pytest.raises(ValueError, match="a bug"):
        bso.fit_in_memory(broken)
    bso.on_train_begin()
    with pytest.raises(OperationOrderError, match="end_out_of_memory"):
        bso.out_of_memory("too late")
    bso.end_out_of_memory("CUDA out of memory in epoch 2")
    assert bso.outcome is not None
    assert bso.outcome.reason is StopReason.OUT_OF_MEMORY
    with ServerClient(server.url) as client:
        (trial,) = client.trials(bso.job_id)
    assert trial.status == "infeasible"


def test_end_without_ending_the_trial_charges_nothing_to_a_run_that_never_reported(
    server: ServerProcess,
) -> None:
    """``end(end_trial=False)`` before any report, without a run key that a restart would
    continue, releases the trial: more such runs than ``max_unreported_failures`` leave the
    job at its default. A run that reported is left open for its lease, its reports kept."""
    job = spec(unique_id("notended"), max_unreported_failures=1)
    for _ in range(3):
        bso = BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(100))
        assert bso.get_batch_size() == 32  # still the default: nothing was charged
        bso.on_train_begin()
        bso.end(end_trial=False)
        assert bso.outcome is not None
        assert bso.outcome.reason is StopReason.NOT_TRAINED
    reported = BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(100))
    assert reported.get_batch_size() == 32
    reported.on_train_begin()
    assert not reported.on_evaluate(0.5).stop_train
    reported.end(end_trial=False)
    with ServerClient(server.url) as client:
        trials = client.job_state(reported.job_id)["trials"]
    statuses = sorted(trial["status"] for trial in trials)
    assert statuses == ["dispatched", "released", "released", "released"]
    (open_trial,) = [trial for trial in trials if trial["status"] == "dispatched"]
    assert open_trial["epochs"] == 1


def test_a_script_that_dies_of_an_uncaught_error_is_judged_at_exit(
    server: ServerProcess, tmp_path: Path
) -> None:
    """No ``with`` and no hook: the out-of-memory error reaches the interpreter, and the exit
    hook marks the trial infeasible (not failed); Ctrl-C releases it (nobody's doing); another
    error leaves it failed. Before training, an error is the script's: a bug before the loop,
    or ``report()`` before ``train_begin()`` (our usage error), releases the trial, as an exit
    that never trained does."""
    outcomes = []
    trains = "bso.on_train_begin()\nbso.on_evaluate(0.1)\n"
    endings = (
        trains + "raise RuntimeError('CUDA out of memory.')",
        trains + "raise KeyboardInterrupt()",
        trains + "raise KeyError('x')",
        "raise KeyError('x')",
        "bso.report(0.1)",
        "import sys; sys.exit(3)",
    )
    for ending in endings:
        job = spec(unique_id("dies").replace("-", ""))
        script = (
            "from zeus_bso import BatchSizeOptimizer, JobSpec\n"
            "from zeus_bso.energy import EstimateMeter\n"
            f"job = JobSpec.model_validate_json({job.model_dump_json()!r})\n"
            f"bso = BatchSizeOptimizer({server.url!r}, job, energy_meter=EstimateMeter(100))\n"
            "bso.get_batch_size()\n"
            f"{ending}\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=environment_without_settings(),
        )
        assert done.returncode != 0, done.stderr
        with ServerClient(server.url) as client:
            (listed,) = client.list_jobs(prefix=job.job_id_prefix)
            (trial,) = client.job_state(listed.job_id)["trials"]
        outcomes.append((trial["status"], trial["message"]))
    assert outcomes == [
        ("infeasible", None),
        ("released", "interrupted (KeyboardInterrupt); not counted against it"),
        ("failed", "KeyError: 'x'"),
        ("released", "KeyError: 'x'"),
        ("released", "OperationOrderError: call train_begin() before report()"),
        ("released", "the run ended before it trained"),
    ]


def test_abort_is_not_judged_by_an_error_of_long_ago(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the exit hook reads the error the interpreter set aside: in a notebook or a test
    runner one stays set aside long after it was shown, and an ``abort()`` then is a failed
    run, not the out-of-memory one of that error."""
    monkeypatch.setattr(sys, "last_value", RuntimeError("CUDA out of memory."), raising=False)
    bso = BatchSizeOptimizer(
        server.url, spec(unique_id("stale").replace("-", "")), energy_meter=EstimateMeter(100)
    )
    bso.get_batch_size()
    bso.on_train_begin()
    bso.on_evaluate(0.1)
    bso.abort()
    with ServerClient(server.url) as client:
        (trial,) = client.trials(bso.job_id)
    assert (trial.status, trial.message) == ("failed", "the run raised or exited without end()")


def test_a_job_given_as_a_mapping_is_validated_into_a_jobspec(server: ServerProcess) -> None:
    """Every entry point takes the job's fields as a mapping too (a config file's, or Hydra's
    ``DictConfig``, as a ``dict`` here; `tests/integrations` runs Hydra's): checked at once, and
    said in one line when they do not make a job."""
    prefix = unique_id("mapping").replace("-", "")
    fields = spec(prefix).model_dump(exclude={"job_id"})
    fields["batch_sizes"] = (16, 32, 64)  # any sequence
    with BatchSizeOptimizer(server.url, fields, energy_meter=EstimateMeter(100)) as bso:
        assert bso.job_id == stable_job_id_of(spec(prefix))  # the same job as its JobSpec
        assert bso.get_batch_size() == 32
    with pytest.raises(ConfigurationError) as invalid:
        BatchSizeOptimizer(server.url, {**fields, "max_epochs": 0, "batch_sizes": [16, 16]})
    assert str(invalid.value) == (
        "job=... is not a valid job: batch_sizes: batch_sizes lists [16] more than once; list "
        "each once; max_epochs: Input should be greater than 0"
    )
    with pytest.raises(ConfigurationError, match=r"job is a zeus_bso\.JobSpec or a mapping"):
        BatchSizeOptimizer(server.url, "resnet-daily")  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"job=\.\.\. is required"):
        BatchSizeOptimizer(server.url)


def stable_job_id_of(job: JobSpec) -> str:
    with BatchSizeOptimizer("http://127.0.0.1:1", job, energy_meter=EstimateMeter(100)) as bso:
        return bso.job_id


def raising_run(
    url: str, job: JobSpec, error: BaseException, *, trains: bool = True, **options: Any
) -> BatchSizeOptimizer:
    """A run in ``with``, that reports an epoch (``trains``) and raises ``error``; returns its
    optimizer, whose ``outcome`` says how it ended."""
    bso = BatchSizeOptimizer(url, job, energy_meter=EstimateMeter(100), **options)
    try:
        with bso:
            bso.get_batch_size()
            if trains:
                bso.on_train_begin()
                bso.on_evaluate(0.1)
            raise error
    except type(error):
        pass
    return bso


@pytest.mark.parametrize(
    ("error", "status", "reason"),
    [
        (RuntimeError("CUDA out of memory."), "infeasible", "out_of_memory"),
        (KeyboardInterrupt(), "released", "ended_early"),
        (ValueError("a bug in the loop"), "failed", "failed"),
    ],
)
def test_a_loop_that_raises_in_with_is_charged_only_for_what_its_batch_size_did(
    server: ServerProcess, error: BaseException, status: str, reason: str
) -> None:
    """``with BatchSizeOptimizer(...)``: out of memory makes the size infeasible on these GPUs
    (it failed, and took three such runs per round to drop); Ctrl-C is released (it failed,
    and counted against the size); another error while training fails the run."""
    bso = raising_run(server.url, spec(unique_id("raises").replace("-", "")), error)
    assert bso.outcome is not None
    assert bso.outcome.reason == reason
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(bso.job_id)["trials"]
    assert (trial["status"], trial["epochs"]) == (status, 1)


def test_an_interrupted_run_with_a_run_key_leaves_its_trial_to_the_restart(
    server: ServerProcess,
) -> None:
    job = spec(unique_id("restart").replace("-", ""))
    bso = raising_run(server.url, job, KeyboardInterrupt(), run_key="node-7")
    assert bso.outcome is not None
    assert "the run's restart (run key node-7) continues its trial" in bso.outcome.why
    with BatchSizeOptimizer(
        server.url, job, energy_meter=EstimateMeter(100), run_key="node-7"
    ) as again:
        assert again.get_batch_size() == bso.batch_size
        assert again.trial_number == bso.trial_number
        assert again.current_epoch == 1  # it continues from the reported epoch
        again.on_train_begin()
        assert again.on_evaluate(0.9).converged
    assert again.outcome is not None  # its line says whose time and energy it counts
    assert "; it continued an earlier run's trial after epoch 1, whose time and energy are " in (
        again.outcome.summary()
    )
    assert "earlier run" not in bso.outcome.summary()


def test_an_error_before_training_is_not_charged(server: ServerProcess) -> None:
    job = spec(unique_id("early").replace("-", ""))
    bso = raising_run(server.url, job, ValueError("bad data path"), trains=False)
    assert bso.outcome is not None
    assert bso.outcome.reason == "not_trained"
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(bso.job_id)["trials"]
    assert trial["status"] == "released"


def test_a_checkpoint_behind_the_servers_reports_resumes_without_going_back(
    server: ServerProcess, caplog: pytest.LogCaptureFixture
) -> None:
    """A run saved a checkpoint after epoch 1 (every few epochs, as many do), reported two more,
    and was killed. The run resumed from that checkpoint trains epochs 2 and 3 again: its
    reports say no fewer epochs than the server has (its check that epochs and time never go
    back holds, where the report was refused with a 409 and the run charged as failed), and the
    time and energy of the lost epochs count."""
    job = spec(unique_id("behind").replace("-", ""), beta_knob=None, prune_cost_ratio=None)
    first = BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(200))
    first.get_batch_size()
    first.on_train_begin()
    first.on_evaluate(0.1)
    saved = first.checkpoint()  # after epoch 1
    first.on_evaluate(0.2)
    first.on_evaluate(0.3)
    first.end(end_trial=False)  # it stops here, its trial left open, as a kill leaves it
    assert first.trial is not None
    with ServerClient(server.url) as client:
        killed = client.heartbeat(first.trial)
    assert killed.epochs == 3

    with BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(200)) as again:
        assert again.resume(saved) == first.trial.batch_size
        assert "the checkpoint of trial 1 is from epoch 1, and 3 epochs were reported" in (
            caplog.text
        )
        again.on_train_begin()
        time.sleep(0.01)
        answers = [again.on_evaluate(metric) for metric in (0.2, 0.3, 0.9)]
    assert [a.stop_train for a in answers] == [False, False, True]
    assert answers[-1].converged
    assert again.current_epoch == 4  # the model's epochs: 1 saved, 3 trained after
    assert again.outcome is not None
    assert "it continued an earlier run's trial after epoch 1" in again.outcome.summary()
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(again.job_id)["trials"]
    assert (trial["status"], trial["epochs"]) == ("reported", 4)
    assert trial["time"] > killed.time
    assert trial["energy"] > killed.energy


def test_the_checkpoint_of_a_trial_that_ended_is_not_resumed(server: ServerProcess) -> None:
    """Its reports would be answered "already reported" and count nothing, while the run's
    outcome said it reached the target: refused at `resume`, saying what ended it and how to
    train on from the weights; the trial is left as it was, and nothing is said at exit."""
    job = spec(unique_id("ended").replace("-", ""))
    with BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(200)) as first:
        first.get_batch_size()
        first.on_train_begin()
        assert first.on_evaluate(0.9).converged
        saved = first.checkpoint()
    with (
        pytest.raises(ConfigurationError, match=r"trial 1 of job .* which ended") as raised,
        BatchSizeOptimizer(server.url, job, energy_meter=EstimateMeter(200)) as again,
    ):
        again.resume(saved)
    assert "it reached the target at epoch 1" in str(raised.value)
    assert again.outcome is None
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(first.job_id)["trials"]
    assert (trial["status"], trial["epochs"], trial["converged"]) == ("reported", 1, True)
