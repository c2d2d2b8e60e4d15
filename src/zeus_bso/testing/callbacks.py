"""The contract every callback adapter passes: a training framework's callback that drives its
own fit (as `zeus_bso.integrations.lightning.ZeusBSOCallback` and
`zeus_bso.integrations.huggingface.ZeusBSOTrainerCallback` are), as a class that an adapter's
test module subclasses, defining the ``fit`` fixture.

The contract scripts what the fit meets: the validation metric after each epoch, and the batch
above which a training step runs out of memory (as a GPU too small for it would). The subclass
runs that fit through its framework with its callback, on the CPU and in one process, against
the real server the ``server_url`` fixture starts; the contract checks what trained, what the
server stored and what the framework's logger received.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from zeus_bso.client import ServerClient
from zeus_bso.client.outcome import RunOutcome
from zeus_bso.errors import BatchSizeDoesNotFitError, ConfigurationError
from zeus_bso.power.run import PowerLimitMode
from zeus_bso.spec import JobSpec, StopReason
from zeus_bso.testing import gpus
from zeus_bso.testing.served import WRONG_OPTIONS, ServedContract, contract_job


@dataclass(frozen=True, slots=True)
class ScriptedFit:
    """One fit the contract asks for."""

    server_url: str
    job: JobSpec
    metrics: tuple[float, ...]
    """The validation metric the fit reaches after each epoch (the value the callback is told
    to monitor); the fit trains at most this many epochs (and the job's ``max_epochs`` is no
    more), and fewer where the server stops it."""
    output_dir: Path
    """A folder of the fit's own (the framework's checkpoints and logs, if any)."""
    out_of_memory_above: int | None = None
    """A training step of a batch with more samples runs out of memory as a GPU too small for
    it would: ``torch.cuda.OutOfMemoryError``, or a ``RuntimeError`` saying "CUDA out of
    memory" as older torch raises it (None: no step does)."""
    memory_check_steps: int = 0
    """The callback's ``memory_check_steps``: steps tried at a batch size new to these GPUs."""
    accumulation: int = 1
    """The framework's own gradient accumulation, batches an optimizer step (Lightning's
    ``accumulate_grad_batches``, the HF Trainer's ``gradient_accumulation_steps``), set
    without the callback's ``max_micro_batch_size``."""
    learning_rate: float = 0.01
    """The optimizer's rate, the same at every step (no schedule)."""
    lr_rule: str = "none"
    """The callback's ``lr_rule``."""
    reference_batch_size: int | None = None
    """The callback's ``reference_batch_size``: the batch size ``learning_rate`` was tuned at
    (None: the job's default)."""
    epochs: int | None = None
    """The framework's own epoch limit (Lightning's ``max_epochs``, the HF Trainer's
    ``num_train_epochs``), counting the epochs of a checkpoint the fit resumes (None: as many
    as ``metrics``)."""
    checkpoint: bool = False
    """The framework saves a checkpoint into ``output_dir`` after each epoch."""
    resume: bool = False
    """The fit resumes the last checkpoint in ``output_dir``: the framework from its weights
    and epochs, the callback its trial (each told as the callback's docs say); ``metrics``
    go on from the checkpoint's epoch."""
    samples: int = 128
    """The training samples of an epoch (its steps: these over the batch size)."""
    step: Callable[[], None] | None = None
    """Called at the start of each training step that runs through, before its forward (the
    contract's paced GPU takes the step's time there; None: nothing)."""
    power_limit: PowerLimitMode = "off"
    """The callback's ``power_limit``; with ``"optimize"``, the callback measures energy with
    its own meter (NVML's, the test double's here) rather than the script's estimate."""


@dataclass(slots=True)
class FitResult:
    """What the subclass observed of the fit."""

    epochs: int
    """The epochs the fit trained (those of a checkpoint it resumed included: the framework's
    epoch count at its end)."""
    batch_sizes: list[int]
    """Every training step's batch (its samples) that ran through, in order (the steps of the
    memory check too; a step that ran out of memory is not one)."""
    outcome: RunOutcome | None
    """The callback's ``outcome`` after the fit."""
    logged_costs: list[float] = field(default_factory=list)
    """The ``bso/cost`` values the framework's logger received, in order."""
    rates: list[float] = field(default_factory=list)
    """The rate each optimizer step of the fit's training took (the first param group's, read
    by a step pre-hook the subclass registers on the optimizer once the framework's training
    starts, after the callback's own hooks; the memory check's steps need not be there)."""


RunFit = Callable[[ScriptedFit], FitResult]
"""Runs one scripted fit through the framework with its callback, on the CPU."""
MakeCallback = Callable[..., Any]
"""Builds the callback alone, as ``make(server_url, job, **options)`` (the options the callback
passes on to its session: ``lr_rule``, ``reference_batch_size``...), without a framework."""


class CallbackAdapterContract(ServedContract):
    """What every callback adapter does over a fit its framework drives: the fit trains the
    batch size the server dispatched, reports each validation and ends at the server's stop,
    and the framework's logger receives each report's cost; a fit that never reaches the
    target ends at ``max_epochs``, not converged; a fit whose metric turns NaN (its training
    diverged) stops there, its size not converging; a batch size that runs out of memory in the
    memory check is infeasible, and a size that fits trains (in the same fit, or the next); a
    framework that accumulates gradients of its own is refused, counting nothing; each optimizer
    step takes the rate the ``lr_rule`` gives the dispatched batch size; a fit resumed from its
    checkpoint continues its trial; with ``power_limit="optimize"`` the first fit of a size
    profiles the GPU's power limits, trains at the cheapest and gives the GPU its limit back;
    without the server a fit trains at the job's default and ends at its target; a wrong option
    is refused where the callback is built (with the ``make_callback`` fixture).

    Subclass it and define the ``fit`` fixture::

        class TestKerasCallback(CallbackAdapterContract):
            @pytest.fixture
            def fit(self) -> RunFit:
                return fit_with_keras  # builds the model, the callback and the data; fits

    A suite that runs a server already overrides ``server_url`` with its URL. A subclass that
    also defines ``make_callback`` (`MakeCallback`) has its option checks held to the contract.
    """

    @pytest.fixture
    def fit(self) -> RunFit:
        raise NotImplementedError("a CallbackAdapterContract subclass defines the `fit` fixture")

    @pytest.fixture
    def make_callback(self) -> MakeCallback | None:
        """Builds the callback alone (None, the default: its option checks are not held to
        the contract)."""
        return None

    def test_a_fit_trains_the_dispatched_size_and_ends_at_the_servers_stop(
        self, fit: RunFit, server_url: str, tmp_path: Path
    ) -> None:
        job = contract_job("cbstop", target_metric=0.5, max_epochs=5)
        result = fit(ScriptedFit(server_url, job, (0.1, 0.3, 0.6, 0.7, 0.8), tmp_path))
        (trial,) = self._trials(server_url, job)
        assert (trial.status, trial.epochs, trial.converged) == ("reported", 3, True)
        assert result.epochs == 3  # the server's stop ended the fit at the target
        assert trial.batch_size == job.default_batch_size
        assert result.batch_sizes
        assert max(result.batch_sizes) == trial.batch_size
        assert result.outcome is not None
        assert (result.outcome.converged, result.outcome.reason) == (True, StopReason.CONVERGED)
        assert len(result.logged_costs) == 3  # one cost a report
        assert trial.cost is not None
        assert result.logged_costs[-1] == pytest.approx(trial.cost, rel=1e-5)

    def test_a_fit_that_never_reaches_the_target_ends_at_max_epochs(
        self, fit: RunFit, server_url: str, tmp_path: Path
    ) -> None:
        job = contract_job("cbmiss", target_metric=0.9, max_epochs=2)
        result = fit(ScriptedFit(server_url, job, (0.1, 0.2), tmp_path))
        (trial,) = self._trials(server_url, job)
        assert (trial.status, trial.epochs, trial.converged) == ("reported", 2, False)
        assert result.epochs == 2
        assert result.outcome is not None
        assert not result.outcome.converged

    def test_a_fit_that_diverges_stops_there_and_its_size_does_not_converge(
        self, fit: RunFit, server_url: str, tmp_path: Path
    ) -> None:
        """A validation metric that is not a number (training diverged at the size) stops the
        fit, not converged, without an error out of the framework; the server counts the
        size as not converging, the diverged epoch included."""
        job = contract_job("cbnan", target_metric=0.9, max_epochs=4)
        result = fit(ScriptedFit(server_url, job, (0.1, math.nan, 0.3, 0.4), tmp_path))
        (trial,) = self._trials(server_url, job)
        assert (trial.status, trial.epochs, trial.converged) == ("reported", 2, False)
        assert result.epochs == 2
        assert result.outcome is not None
        assert not result.outcome.converged
        assert "training diverged" in result.outcome.why

    def test_a_size_out_of_memory_in_the_check_is_infeasible_and_a_size_that_fits_trains(
        self, fit: RunFit, server_url: str, tmp_path: Path
    ) -> None:
        """The fit moves to a size that fits (a framework whose batch size can change in the
        fit, as Lightning's), or the run ends with `BatchSizeDoesNotFitError` and the next one
        trains at it (one that fixes the batch size before the fit, as the HF Trainer)."""
        job = contract_job("cboom", target_metric=0.5, max_epochs=2)
        scripted = ScriptedFit(
            server_url, job, (0.6, 0.7), tmp_path, out_of_memory_above=16, memory_check_steps=2
        )
        try:
            result = fit(scripted)
        except BatchSizeDoesNotFitError:
            result = fit(scripted)  # the next run
        trials = self._trials(server_url, job)
        assert [(t.batch_size, t.status) for t in trials] == [(32, "infeasible"), (16, "reported")]
        assert result.batch_sizes
        assert max(result.batch_sizes) == 16  # no step of 32 ran through
        assert result.epochs == 1
        assert result.outcome is not None
        assert result.outcome.converged

    def test_each_step_takes_the_rate_of_the_dispatched_batch_size(
        self, fit: RunFit, server_url: str, tmp_path: Path
    ) -> None:
        """With ``lr_rule="linear"`` and a rate tuned at half the batch size the server
        dispatched, every optimizer step takes twice the optimizer's rate; with
        ``lr_rule="sqrt"`` and a rate tuned at twice that size, the rate over the square root
        of two."""
        size = contract_job("cbrate").default_batch_size
        for rule, reference, factor in (("linear", size // 2, 2.0), ("sqrt", size * 2, 0.5**0.5)):
            job = contract_job(f"cbrate{rule}", target_metric=0.5, max_epochs=2)  # its first run
            scripted = ScriptedFit(
                server_url,
                job,
                (0.6, 0.7),
                tmp_path / rule,
                lr_rule=rule,
                reference_batch_size=reference,
            )
            result = fit(scripted)
            assert result.batch_sizes
            assert max(result.batch_sizes) == size
            assert result.rates, "the fit's optimizer stepped without the subclass seeing it"
            expected = scripted.learning_rate * factor
            assert result.rates == pytest.approx([expected] * len(result.rates), rel=1e-6)

    def test_a_fit_resumed_from_its_checkpoint_continues_its_trial(
        self, fit: RunFit, server_url: str, tmp_path: Path
    ) -> None:
        """A fit that its framework's own epoch limit ended before the server's stop (a job
        split over two allocations, a preempted node's last checkpoint), checkpointing each
        epoch, is resumed from its last checkpoint: the resumed fit trains at the size the
        first was dispatched and ends at the server's stop, and the server holds one trial
        that trained the epochs of both and reached the target. A framework that asks for a
        trial before it reads the checkpoint has that one released, counting nothing."""
        job = contract_job("cbresume", target_metric=0.5, max_epochs=5)
        metrics = (0.1, 0.2, 0.6, 0.7, 0.8)
        first = fit(ScriptedFit(server_url, job, metrics, tmp_path, epochs=2, checkpoint=True))
        assert first.epochs == 2
        resumed = ScriptedFit(server_url, job, metrics, tmp_path, checkpoint=True, resume=True)
        second = fit(resumed)
        trials = self._trials(server_url, job)
        counted = [t for t in trials if t.status != "released"]
        assert all(not t.epochs for t in trials if t.status == "released"), trials
        (trial,) = counted
        assert (trial.status, trial.epochs, trial.converged) == ("reported", 3, True)
        assert second.epochs == 3  # one epoch after the checkpoint's two: the server's stop
        assert first.batch_sizes
        assert second.batch_sizes
        assert max(second.batch_sizes) == max(first.batch_sizes) == trial.batch_size
        assert second.outcome is not None
        assert (second.outcome.converged, second.outcome.reason) == (True, StopReason.CONVERGED)

    def test_power_limits_are_profiled_in_the_first_fit_and_given_back(
        self, fit: RunFit, server_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """``power_limit="optimize"`` on the NVML test double's `paced_gpu` (each training step
        takes the time its limit makes it): the first fit of a batch size on these GPUs
        profiles the limits in its first steps, trains the rest at the cheapest (the server's
        choice, stored as the job's profile), and gives the GPU its own limit back when it
        ends, leaving no record to restore."""
        gpu = gpus.paced_gpu()
        nvml = gpus.double_in_this_process(monkeypatch, [gpu], tmp_path)
        monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
        seen: list[float] = []

        def paced_step() -> None:  # NVML is initialised by then: the callback measures
            seen.append(gpus.limits_of(tmp_path, gpu["uuid"])[0])
            time.sleep(nvml._step_seconds(nvml.nvmlDeviceGetHandleByIndex(0)))

        job = contract_job("cbpower", target_metric=0.5, max_epochs=2)
        job = job.model_copy(update={"eta_knob": 1.0})
        samples = gpus.PROFILE_STEPS * job.default_batch_size
        scripted = ScriptedFit(
            server_url,
            job,
            (0.6, 0.7),
            tmp_path,
            samples=samples,
            step=paced_step,
            power_limit="optimize",
        )
        result = fit(scripted)
        assert result.outcome is not None
        assert result.outcome.converged
        assert self._chosen_power_limit(server_url, job) == gpus.cheapest_limit(1.0)
        assert len(seen) >= gpus.PROFILE_STEPS
        assert seen[0] == 300.0  # the GPU's own limit until the profile starts
        assert seen[-1] == gpus.cheapest_limit(1.0)  # trained at the chosen limit after it
        gpus.assert_given_back(tmp_path, gpu["uuid"], gpus.cheapest_limit(1.0))

    def test_without_the_server_the_fit_trains_at_the_default(
        self, fit: RunFit, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A server that does not answer (``on_server_unavailable="fallback"``, the default):
        the fit trains at the job's default batch size, judges the job's target itself and ends
        there, and its outcome says so (converged, offline)."""
        monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
        job = contract_job("cboffline", target_metric=0.5, max_epochs=5)
        unreachable = "http://127.0.0.1:9"  # the discard port: nothing answers
        result = fit(ScriptedFit(unreachable, job, (0.1, 0.6, 0.7, 0.8, 0.9), tmp_path))
        assert result.batch_sizes
        assert max(result.batch_sizes) == job.default_batch_size
        assert result.epochs == 2  # its target, judged in the fit
        assert result.outcome is not None
        assert (result.outcome.converged, result.outcome.offline) == (True, True)

    def test_a_fit_whose_framework_accumulates_of_its_own_is_refused_counting_nothing(
        self, fit: RunFit, server_url: str, tmp_path: Path
    ) -> None:
        """Each optimizer step would take two batches of the size the server charges: the fit
        is refused with a `ConfigurationError` that says to accumulate through the callback
        (``max_micro_batch_size``), and no trial counts against a batch size (none was asked
        for, or it was released)."""
        job = contract_job("cbacc", target_metric=0.5, max_epochs=2)
        scripted = ScriptedFit(server_url, job, (0.6, 0.7), tmp_path, accumulation=2)
        with pytest.raises(ConfigurationError, match="max_micro_batch_size"):
            fit(scripted)
        with ServerClient(server_url) as client:
            listed = client.list_jobs(prefix=job.job_id_prefix)
            trials = [t for j in listed for t in client.trials(j.job_id)]
        assert all(t.status == "released" for t in trials), trials

    def test_a_wrong_option_is_refused_where_the_callback_is_built(
        self, make_callback: MakeCallback | None, server_url: str
    ) -> None:
        """Each option the callback passes on to its session is checked when it is built
        (`zeus_bso.training.session_options.checked_options`), in the script's own line, not
        at the fit's start after its model and data loaded: a `ConfigurationError` that names
        it, and nothing reaches the server."""
        if make_callback is None:
            pytest.skip("the subclass defines no `make_callback` fixture: the callback alone")
        job = contract_job("cboption", target_metric=0.5, max_epochs=2)
        for options in WRONG_OPTIONS:
            with pytest.raises(ConfigurationError, match=next(iter(options))):
                make_callback(server_url, job, **options)
        with ServerClient(server_url) as client:
            assert client.list_jobs(prefix=job.job_id_prefix) == []
