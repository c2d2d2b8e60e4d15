"""The contract every loop adapter passes: a `zeus_bso.training.TrialSession` of a training
framework (as `zeus_bso.integrations.accelerate.ZeusBSOAccelerate` and
`zeus_bso.integrations.fabric.ZeusBSOFabric` are), as a class that an adapter's test module
subclasses, defining the ``adapter`` and ``server_url`` fixtures. The tests run one process,
on the CPU, against a real server."""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from zeus_bso.client import ServerClient
from zeus_bso.energy import EstimateMeter
from zeus_bso.errors import ConfigurationError
from zeus_bso.spec import StopReason
from zeus_bso.testing.gpus import (
    PROFILE_STEPS,
    assert_given_back,
    cheapest_limit,
    double_in_this_process,
    limits_of,
    paced_gpu,
)
from zeus_bso.testing.served import WRONG_OPTIONS, ServedContract, contract_job
from zeus_bso.training import RunOutcome
from zeus_bso.training.session import TrialSession

MakeAdapter = Callable[..., TrialSession]
"""``make(server_url, job, **options)``: the adapter of one run (a `TrialSession` that is a
context manager), built on the framework's object for one process."""

Logged = list[tuple[dict[str, float], int | None]]
"""What a framework's logger received, in order: each call's values and step."""


loop_job = contract_job
"""A job of the contract's (`zeus_bso.testing.served.contract_job`)."""


class LoopAdapterContract(ServedContract):
    """What every loop adapter does through its session: a recurrence reports to the server
    and converges; a run whose training diverges (a NaN metric) stops, not converged at its
    size; a wrong option is refused when the adapter is built; a first report before
    any optimizer step, or after part of an epoch's, is said; a misconfigured run releases its
    trial; out of memory is infeasible (before training, the run goes on at a size that fits);
    accumulation gives every process its micro-batch; a checkpoint resumes its trial, batch
    size and learning-rate factor, and its reports are logged, through the framework's own
    logger where the subclass observes it (its ``logged`` fixture); a restart with the same run
    key continues its trial; GPU power limits are profiled through the loop's step calls, and
    given back; a server that cannot be reached leaves the run training at the default.

    Subclass it and define the ``adapter`` fixture::

        class TestRayTrain(LoopAdapterContract):
            @pytest.fixture
            def adapter(self) -> MakeAdapter:
                return lambda url, job, **options: ZeusBSORay(ray_context(), url, job, **options)

    The tests run against a real server that the ``server_url`` fixture starts for the class
    (`zeus_bso.testing.server.running_server`: needs ``zeus-bso[server]``); a test suite that
    runs one already overrides ``server_url`` with its URL.
    """

    @pytest.fixture
    def adapter(self) -> MakeAdapter:
        raise NotImplementedError("a LoopAdapterContract subclass defines the `adapter` fixture")

    @pytest.fixture
    def logged(self) -> Logged | None:
        """What the framework's logger of the ``adapter`` fixture's framework object received
        (a recording logger the subclass gives it); None, the default: not observed, and the
        logging test is skipped."""
        return None

    def test_a_recurrence_reports_and_converges(
        self, adapter: MakeAdapter, server_url: str
    ) -> None:
        job = loop_job("contract")
        with adapter(server_url, job, energy_meter=EstimateMeter(100)) as bso:
            assert bso.batch_size == job.default_batch_size
            assert bso.trial_number == 1
            bso.train_begin()
            going = bso.report(0.5)
            assert not going
            assert (going.stop, going.reason, going.reported) == (False, None, True)
            answer = bso.report(0.95)
            assert answer
            assert (answer.converged, answer.reason) == (True, StopReason.CONVERGED)
            assert answer.cost is not None
            assert answer.cost > 0
            assert "target" in (answer.why or "")
        assert bso.outcome is not None
        assert bso.outcome.converged
        (trial,) = self._trials(server_url, job)
        assert (trial.status, trial.epochs, trial.converged) == ("reported", 2, True)

    def test_a_run_that_diverges_stops_and_its_size_does_not_converge(
        self, adapter: MakeAdapter, server_url: str
    ) -> None:
        job = loop_job("diverged")
        with adapter(server_url, job, energy_meter=EstimateMeter(100)) as bso:
            bso.train_begin()
            assert not bso.report(0.5)
            answer = bso.report(math.nan)
            assert (answer.stop, answer.converged) == (True, False)
            assert "training diverged" in (answer.why or "")
        assert bso.outcome is not None
        assert not bso.outcome.converged
        (trial,) = self._trials(server_url, job)
        assert (trial.status, trial.epochs, trial.converged) == ("reported", 2, False)

    def test_a_misconfigured_run_releases_its_trial(
        self, adapter: MakeAdapter, server_url: str
    ) -> None:
        job = loop_job("contractmis")
        made: list[TrialSession] = []

        def misconfigured() -> None:
            with adapter(server_url, job, energy_meter=EstimateMeter(100)) as bso:
                made.append(bso)
                bso.train_begin()
                raise ConfigurationError("a wrong setting of the script's")

        for _ in range(3):
            with pytest.raises(ConfigurationError, match="wrong setting"):
                misconfigured()
            outcome = made[-1].outcome
            assert outcome is not None
            assert outcome.reason is StopReason.NOT_TRAINED
        assert [t.status for t in self._trials(server_url, job)] == ["released"] * 3

    def test_a_wrong_option_is_refused_before_the_server_is_asked(
        self, adapter: MakeAdapter, server_url: str
    ) -> None:
        """Each option the adapter passes on to its session is checked when it is built
        (`zeus_bso.training.session_options.checked_options`): nothing reaches the server."""
        job = loop_job("contractoption")
        for options in WRONG_OPTIONS:
            name = next(iter(options))
            with pytest.raises(ConfigurationError, match=name):
                adapter(server_url, job, energy_meter=EstimateMeter(100), **options)
        with ServerClient(server_url) as client:
            assert client.list_jobs(prefix=job.job_id_prefix) == []

    def test_a_report_before_the_first_optimizer_step_is_said(
        self, adapter: MakeAdapter, server_url: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A loop that validates at the start of each epoch reports its untrained model first,
        which counts as an epoch: said at that report (once); a loop that trains before it
        reports is told nothing. Either way the reports count as they came."""
        torch = pytest.importorskip("torch", reason="torch.optim's steps are counted")

        said = "the run's first report came before its first optimizer step"
        for evaluates_first in (True, False):
            caplog.clear()
            job = loop_job("contractuntrained")
            with adapter(server_url, job, energy_meter=EstimateMeter(100)) as bso:
                model = torch.nn.Linear(2, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                bso.train_begin()
                for epoch in range(2):
                    if evaluates_first:
                        bso.report(0.1 * epoch)
                    optimizer.zero_grad()
                    model(torch.ones(4, 2)).sum().backward()
                    optimizer.step()
                    if not evaluates_first:
                        bso.report(0.1 * epoch)
            assert caplog.text.count(said) == int(evaluates_first)
            assert bso.outcome is not None
            assert bso.outcome.epochs == 2

    def test_a_report_after_part_of_an_epoch_is_said_where_the_epochs_steps_are_given(
        self, adapter: MakeAdapter, server_url: str, caplog: pytest.LogCaptureFixture
    ) -> None:
        """Each report counts as one of the job's epochs: a loop that validates every few
        steps has the job's max_epochs count its reports. Where the loop gives ``train_begin``
        its DataLoader's batches an epoch (``len(loader)``), its first report is said if it
        comes after less than three quarters of an epoch's optimizer steps (micro-batches over
        the accumulation steps); a loop that reports after each epoch, accumulating or not, is
        told nothing, and one that gives no steps is not judged."""
        torch = pytest.importorskip("torch", reason="torch.optim's steps are counted")

        said = "the run's first report came after 2 optimizer steps of an epoch's"
        batches = 8  # the loop's DataLoader's micro-batches an epoch
        for every, micro, given in (
            (2, None, True),
            (None, None, True),
            (None, 16, True),
            (2, 16, True),
            (2, None, False),
        ):
            caplog.clear()
            options: dict[str, Any] = {"energy_meter": EstimateMeter(100)}
            if micro is not None:
                options["max_micro_batch_size"] = micro
            with adapter(server_url, loop_job("contractpart"), **options) as bso:
                model = torch.nn.Linear(2, 2)
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
                bso.train_begin(batches if given else None)
                steps = 0
                for batch in range(1, batches + 1):
                    model(torch.ones(4, 2)).sum().backward()
                    if batch % bso.accumulation_steps:
                        continue
                    optimizer.step()
                    optimizer.zero_grad()
                    steps += 1
                    if (steps % every == 0) if every else batch == batches:
                        break
                bso.report(0.5)
                bso.release("judged at its first report: not trained further in this test")
            expected = every is not None and given
            assert caplog.text.count("optimizer steps of an epoch's") == int(expected)
            if expected:
                epoch_steps = batches // bso.accumulation_steps
                assert f"{said} {epoch_steps}" in caplog.text

    def test_a_first_batch_of_another_size_is_refused_and_not_charged(
        self, adapter: MakeAdapter, server_url: str
    ) -> None:
        """A DataLoader built at a size of the script's own: the first ``step_begin(batch)``
        refuses it, and the trial is released."""
        torch = pytest.importorskip("torch", reason="a loop's batches are tensors: needs torch")

        job = loop_job("contractbatch")
        with adapter(server_url, job, energy_meter=EstimateMeter(100)) as bso:
            bso.train_begin()
            bso.step_begin((torch.zeros(bso.micro_batch_size, 2), torch.zeros(8)))  # its size
            bso.step_begin((torch.zeros(8, 2), torch.zeros(8)))  # only the first is checked
            assert bso.report(0.95)
        with adapter(server_url, job, energy_meter=EstimateMeter(100)) as bso:
            bso.train_begin()
            with pytest.raises(ConfigurationError, match="first training batch has 8 samples"):
                bso.step_begin({"x": torch.zeros(8, 2)})
        statuses = [t.status for t in self._trials(server_url, job)]
        assert statuses == ["reported", "released"]

    def test_out_of_memory_is_infeasible_and_the_run_goes_on_at_a_size_that_fits(
        self, adapter: MakeAdapter, server_url: str
    ) -> None:
        job = loop_job("contractoom")
        tried: list[int] = []

        def try_steps(size: int) -> None:
            tried.append(size)
            if size > 16:
                raise RuntimeError(f"CUDA out of memory. Tried to allocate {size} MiB")

        with adapter(server_url, job, energy_meter=EstimateMeter(100)) as bso:
            assert bso.memory_unknown
            assert bso.fit_in_memory(try_steps) == 16
            # 32 ran out; the smallest size, tried then, fits (so 32 is to blame); then 16 fits.
            assert (bso.batch_size, tried) == (16, [32, 16, 16])
            bso.train_begin()
            assert bso.report(0.95)
        statuses = [(t.batch_size, t.status) for t in self._trials(server_url, job)]
        assert statuses == [(32, "infeasible"), (16, "reported")]
        made: list[TrialSession] = []

        def train(memory_unknown: bool) -> None:
            with adapter(server_url, job, energy_meter=EstimateMeter(100)) as bso:
                made.append(bso)
                assert (bso.batch_size, bso.memory_unknown) == (16, memory_unknown)
                bso.train_begin()
                raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

        def runs_out_while_training(memory_unknown: bool) -> RunOutcome:
            with pytest.raises(RuntimeError, match="out of memory"):
                train(memory_unknown)
            outcome = made[-1].outcome
            assert outcome is not None
            return outcome

        # 16 trained on these GPUs: running out at it may not be its doing (a leak, another
        # process), and it is not capped; but its fit is in doubt now.
        outcome = runs_out_while_training(memory_unknown=False)
        assert (outcome.batch_size, outcome.reason) == (16, StopReason.FAILED)
        assert "although it trained on" in outcome.why
        statuses = [(t.batch_size, t.status) for t in self._trials(server_url, job)]
        assert statuses[-1] == (16, "released")
        # So the next run is told to try it first; running out again (the model needs more
        # memory now) is the size's: it is capped.
        outcome = runs_out_while_training(memory_unknown=True)
        assert (outcome.batch_size, outcome.reason) == (16, StopReason.OUT_OF_MEMORY)
        statuses = [(t.batch_size, t.status) for t in self._trials(server_url, job)]
        assert statuses[-1] == (16, "infeasible")

    def test_accumulation_gives_every_process_its_micro_batch(
        self, adapter: MakeAdapter, server_url: str
    ) -> None:
        job = loop_job("contractacc")
        options = {"energy_meter": EstimateMeter(100), "max_micro_batch_size": 16}
        with adapter(server_url, job, **options) as bso:
            assert (bso.batch_size, bso.micro_batch_size, bso.accumulation_steps) == (32, 16, 2)
            bso.train_begin()
            assert bso.report(0.95)
        (trial,) = self._trials(server_url, job)
        assert (trial.batch_size, trial.accumulation_steps) == (32, 2)

    def test_a_checkpoint_resumes_its_trial_and_its_learning_rate(
        self, adapter: MakeAdapter, server_url: str
    ) -> None:
        """A run stopped mid-trial (a preemption) and started again from its checkpoint goes on
        with the same trial, batch size and learning-rate factor; its reports are logged."""
        torch = pytest.importorskip("torch", reason="a loop's batches are tensors: needs torch")

        job = loop_job("contractresume").model_copy(update={"default_batch_size": 64})
        options: dict[str, Any] = {"energy_meter": EstimateMeter(100), "lr_rule": "linear"}
        options["reference_batch_size"] = 32
        made: list[TrialSession] = []
        saved: dict[str, Any] = {}

        def preempted() -> None:
            with adapter(server_url, job, **options) as bso:
                made.append(bso)
                optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
                assert bso.scale(optimizer) == 2.0  # 64 against a rate tuned at 32
                bso.train_begin()
                assert not bso.report(0.5)
                assert set(bso.last) >= {"bso/batch_size", "bso/energy_j", "bso/cost", "bso/lr"}
                assert bso.last["bso/batch_size"] == 64.0
                saved.update(bso.checkpoint())
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            preempted()
        first = made[-1].trial_number
        with adapter(server_url, job, resume=saved, **options) as bso:
            assert (bso.trial_number, bso.batch_size) == (first, 64)
            optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
            assert bso.scale(optimizer) == 2.0  # the checkpoint's factor
            bso.train_begin()
            assert bso.report(0.95, epoch=2)
        (trial,) = self._trials(server_url, job)
        assert (trial.status, trial.epochs, trial.converged) == ("reported", 2, True)

    def test_each_report_reaches_the_frameworks_logger_at_its_epoch(
        self, adapter: MakeAdapter, server_url: str, logged: Logged | None
    ) -> None:
        """Each report's figures (batch size, energy, the server's cost) go to the framework's
        own logger (its trackers, its loggers), at the epoch reported."""
        if logged is None:
            pytest.skip("the subclass defines no `logged` fixture: what its framework logged")
        job = loop_job("contractlog")
        with adapter(server_url, job, energy_meter=EstimateMeter(100)) as bso:
            bso.train_begin()
            assert not bso.report(0.5)
            assert bso.report(0.95)
        ours = [(values, step) for values, step in logged if "bso/batch_size" in values]
        assert [step for _, step in ours] == [1, 2]
        for values, _ in ours:
            assert values["bso/batch_size"] == float(job.default_batch_size)
            assert values["bso/cost"] > 0
        assert 0 < ours[0][0]["bso/energy_j"] <= ours[1][0]["bso/energy_j"]

    def test_a_restart_with_the_same_run_key_continues_its_trial(
        self, adapter: MakeAdapter, server_url: str
    ) -> None:
        """An interrupted run with a run key leaves its trial open; its restart (the same key,
        no checkpoint) continues it, and one with another key gets a trial of its own."""
        job = loop_job("contractkey")
        key = f"run-{secrets.token_hex(4)}"
        made: list[TrialSession] = []

        def interrupted() -> None:
            with adapter(server_url, job, energy_meter=EstimateMeter(100), run_key=key) as bso:
                made.append(bso)
                bso.train_begin()
                assert not bso.report(0.5)
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            interrupted()
        first = made[-1].trial_number
        (trial,) = self._trials(server_url, job)
        assert trial.status == "dispatched"  # left open for the restart
        with adapter(server_url, job, energy_meter=EstimateMeter(100), run_key=key) as bso:
            assert bso.trial_number == first
            bso.train_begin()
            assert bso.report(0.95, epoch=2)
        with adapter(server_url, job, energy_meter=EstimateMeter(100), run_key="other") as bso:
            assert bso.trial_number != first
            bso.train_begin()
            assert bso.report(0.95)
        statuses = [t.status for t in self._trials(server_url, job)]
        assert statuses == ["reported", "reported"]

    def test_power_limits_are_profiled_through_the_step_calls_and_given_back(
        self,
        adapter: MakeAdapter,
        server_url: str,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """``power_limit="optimize"``, on the NVML test double's `paced_gpu`: the loop passes
        ``train_begin`` the steps of an epoch and calls ``step_begin`` and ``step_end`` around
        each; the first run of a batch size on these GPUs profiles the limits in its first
        steps, trains the rest at the cheapest (the server's choice), and gives the GPU its own
        limit back when it ends."""
        gpu = paced_gpu()
        nvml = double_in_this_process(monkeypatch, [gpu], tmp_path)
        monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
        job = loop_job("contractpower").model_copy(update={"eta_knob": 1.0})
        steps = PROFILE_STEPS
        with adapter(server_url, job, power_limit="optimize") as bso:
            handle = nvml.nvmlDeviceGetHandleByIndex(0)
            bso.train_begin(steps)
            for _ in range(steps):
                bso.step_begin()
                time.sleep(nvml._step_seconds(handle))  # the step, as long as its limit makes it
                bso.step_end()
            during, _ = limits_of(tmp_path, gpu["uuid"])
            assert bso.report(0.95)
        assert self._chosen_power_limit(server_url, job) == during == cheapest_limit(1.0)
        assert_given_back(tmp_path, gpu["uuid"], during)  # trained at it, given back

    def test_without_the_server_the_run_trains_at_the_default(
        self, adapter: MakeAdapter, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
        job = loop_job("contractoffline")
        unreachable = "http://127.0.0.1:9"  # the discard port: nothing answers
        with adapter(unreachable, job, energy_meter=EstimateMeter(100)) as bso:
            assert (bso.batch_size, bso.trial_number) == (job.default_batch_size, None)
            bso.train_begin()
            assert not bso.report(0.5)
            assert bso.report(0.95)  # its target, judged here
        assert bso.outcome is not None
        assert (bso.outcome.converged, bso.outcome.offline) == (True, True)
