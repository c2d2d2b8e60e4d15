"""Simulate recurrences of a trace job against the policy, in-process or through a server.

The model (kept exactly, so that figures compare with the published ones): a trial of batch size
``b`` draws one training run of ``b`` uniformly from the trace with the seeded generator; it
reaches the target at that run's ``target_epoch`` (never if ``nan`` or beyond ``max_epochs``).
After epoch ``e`` it reports cumulative time ``e * time_per_epoch`` and energy ``time *
average_power``. The policy decides after every epoch; every epoch run is paid for. A recurrence
retries with a new trial until one converges, at most `MAX_TRIES` times; every try's cost counts.

With a memory cap (the smallest batch size that does not fit on the GPU), a trial at or above it
runs out of memory at its first step, as a client's check before training finds: it is marked
infeasible, costs nothing but the start, and the recurrence goes on with the next trial (the run
goes on at a size that fits). Without one, nothing changes.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from zeus_bso.client.http import ServerClient
from zeus_bso.errors import TraceError
from zeus_bso.policy import zeus_cost
from zeus_bso.policy.power import profiles_power
from zeus_bso.policy.types import JobState, Prior
from zeus_bso.sim.memory import InMemoryJob, MemoryStore
from zeus_bso.sim.parents import ParentCurve
from zeus_bso.sim.trace import Pace, TraceJob
from zeus_bso.spec import (
    CreatedJob,
    GpuConfig,
    JobSpecFromClient,
    ReportResponse,
    TrainingResult,
    TrialId,
)

MAX_TRIES = 20


class Backend(Protocol):
    """Where the policy runs: the three operations of a training run."""

    def next_trial(self, accumulate: bool = False) -> TrialId:
        """Start a trial (for a run that ``accumulate``s gradients: any batch size)."""
        ...

    def report(
        self, trial: TrialId, *, time: float, energy: float, metric: float, current_epoch: int
    ) -> ReportResponse: ...

    def end_trial(self, trial: TrialId) -> None: ...

    def out_of_memory(self, trial: TrialId) -> None:
        """The trial's run ran out of memory: infeasible on its hardware profile."""
        ...

    def micro_out_of_memory(self, trial: TrialId, micro_batch_size: int) -> None:
        """The trial's run, which accumulates, ran out of memory at ``micro_batch_size``."""
        ...

    def kinds(self) -> Mapping[int, str]:
        """Why each trial was dispatched (its `TrialKind`), by trial number."""
        ...


class ServerBackend:
    """A job registered on a running server, driven through `ServerClient`."""

    def __init__(self, client: ServerClient, job: JobSpecFromClient) -> None:
        self.client = client
        self.spec = job
        created, _ = client.register_job(job)
        self.job_id = created.job_id

    def register(self, gpu: GpuConfig) -> None:
        """Register the job again on other GPUs (as `InMemoryJob.register`)."""
        moved = self.spec.model_copy(update={"job_id": self.job_id, **gpu.model_dump()})
        self.client.register_job(moved)

    def next_trial(self, accumulate: bool = False) -> TrialId:
        return self.client.dispatch(self.job_id, accumulate=accumulate).trial

    def report(
        self, trial: TrialId, *, time: float, energy: float, metric: float, current_epoch: int
    ) -> ReportResponse:
        result = TrainingResult(
            **trial.model_dump(),
            time=time,
            energy=energy,
            metric=metric,
            current_epoch=current_epoch,
        )
        return self.client.report(result)

    def end_trial(self, trial: TrialId) -> None:
        self.client.end_trial(trial)

    def out_of_memory(self, trial: TrialId) -> None:
        self.client.infeasible(trial)

    def micro_out_of_memory(self, trial: TrialId, micro_batch_size: int) -> None:
        self.client.infeasible(trial, micro_batch_size=micro_batch_size)

    def kinds(self) -> Mapping[int, str]:
        trials = self.client.trials(self.job_id)  # every one: the job's view shows the latest
        return {t.trial_number: str(t.kind) for t in trials}


@dataclass(frozen=True, slots=True)
class TrialOutcome:
    """One training run of a recurrence."""

    batch_size: int
    epochs: int
    cost: float
    converged: bool
    trial_number: int = 0
    kind: str = ""
    """Why the policy dispatched it (`TrialKind`: exploration, bandit, concurrent)."""
    out_of_memory: bool = False
    """It ran out of memory at its first step (above the simulation's memory cap)."""
    accumulation_steps: int = 1
    """Micro-batches it accumulated a step (a run at or above the cap that accumulates)."""
    power_limit: float | None = None
    """The GPU power limit it trained at after profiling (None: the maximum, unprofiled)."""


@dataclass
class Recurrence:
    """One recurrence: its runs (the last one converged unless all tries failed)."""

    trials: list[TrialOutcome] = field(default_factory=list)

    @property
    def cost(self) -> float:
        """What the recurrence cost, failed tries included."""
        return sum(t.cost for t in self.trials)


def job_spec(trace: TraceJob, job_id: str, **options: Any) -> JobSpecFromClient:
    """The job a user of this workload would register (``options`` override policy knobs)."""
    w = trace.workload
    fields: dict[str, Any] = {
        "job_id": job_id,
        "job_id_prefix": job_id.split("-", 1)[0],
        "batch_sizes": trace.batch_sizes,
        "default_batch_size": trace.default_batch_size,
        "target_metric": w.target_metric,
        "higher_is_better_metric": w.higher_is_better,
        "max_epochs": w.max_epochs,
        "max_power": trace.max_power,
        "number_of_gpus": 1,
        "gpu_model": trace.gpu,
    }
    fields.update(options)
    return JobSpecFromClient(**fields)


def parent_job(
    client: ServerClient,
    trace: TraceJob,
    curve: ParentCurve,
    job_id: str,
    eta_knob: float,
    job_id_prefix: str | None = None,
) -> str | None:
    """Register, on ``client``'s server, a parent job of ``trace``'s sizes that ran once at
    each size ``curve`` knows (pinned there: `ParentCurve.runs`), reporting what the curve says,
    so that a new job seeded from it (``prior_from``) learns the prior from stored runs as it
    does from a user's job; its id (None: no size converges, so it could seed nothing). Each
    run's cost is all energy (all time at ``eta_knob`` 0), each epoch its ``epoch_cost``. Its
    ``job_id_prefix``: the id's part before its first '-' unless given."""
    if not curve.costs:
        return None
    w = trace.workload
    off = w.target_metric * (0.5 if w.higher_is_better else 2.0)
    runs = curve.runs()
    # Another workload's runs may take more epochs than this one's max_epochs.
    most = max([w.max_epochs, *(run.epochs or 0 for run in runs)])
    options: dict[str, Any] = {"max_epochs": most, "eta_knob": eta_knob}
    if job_id_prefix is not None:
        options["job_id_prefix"] = job_id_prefix
    backend = ServerBackend(client, job_spec(trace, job_id, **options))
    for run in runs:
        client.pin(backend.job_id, run.batch_size)
        trial = backend.next_trial()
        epoch, stop = 0, False
        while not stop:
            epoch += 1
            done = epoch == run.epochs
            spent = epoch * run.epoch_cost
            time, energy = (
                (0.0, spent / eta_knob) if eta_knob > 0 else (spent / trace.max_power, 0.0)
            )
            answer = backend.report(
                trial,
                time=time,
                energy=energy,
                metric=w.target_metric if done else off,
                current_epoch=epoch,
            )
            stop = answer.stop_train or done
        backend.end_trial(trial)
    return backend.job_id


def in_process(job: JobSpecFromClient, prior: Prior | None = None) -> InMemoryJob:
    """A backend that runs the policy in this process (a new job; with ``prior``, seeded from
    a related job's curve: `zeus_bso.sim.parents`)."""
    created = CreatedJob.model_validate(job.model_dump())
    return InMemoryJob(created, MemoryStore(job=JobState(prior=prior)))


def _spent(epochs: int, first: Pace, rest: Pace) -> tuple[float, float]:
    """Seconds and joules of ``epochs`` epochs: the first at ``first``, the rest at ``rest``."""
    later = epochs - 1
    seconds = first.time_per_epoch + later * rest.time_per_epoch
    joules = first.time_per_epoch * first.average_power
    joules += later * rest.time_per_epoch * rest.average_power
    return seconds, joules


def _unpaced(trace: TraceJob, sizes: list[int], memory_cap: int) -> TraceError:
    """The error for ``sizes`` from ``memory_cap`` on that no trace size below it divides: a run
    that accumulates would train them in micro-batches whose pace the trace did not measure
    (the server gives a run that accumulates any size, so each would run out of memory again
    and again)."""
    named = ", ".join(map(str, sizes))
    return TraceError(
        f"{trace.workload.name} on the {trace.gpu.upper()}: no batch size of the trace below "
        f"the memory cap {memory_cap} divides {named}, so runs that accumulate cannot train "
        f"{'it' if len(sizes) == 1 else 'them'} at a measured pace: give a cap above "
        f"{max(sizes)}, or simulate without accumulating"
    )


def simulate(
    trace: TraceJob,
    backend: Backend,
    *,
    recurrences: int,
    seed: int,
    eta_knob: float,
    on_recurrence: Callable[[int, Recurrence], None] | None = None,
    memory_cap: int | None = None,
    accumulate: bool = False,
    power_limits: bool = False,
    pace_noise: float = 0.0,
    growth: float = 0.0,
) -> list[Recurrence]:
    """Run ``recurrences`` recurrences of ``trace`` against ``backend``; with ``memory_cap``,
    batch sizes at or above it run out of memory at their first step, or, with
    ``accumulate``, train by gradient accumulation (`TraceJob.accumulated`) once the
    micro-batches that ran out of memory have shown where the cap is. With ``power_limits``
    (and ``eta_knob`` above 0), each batch size's first run profiles the GPU's power limits in
    its first epoch, paid at their mean, and every later epoch runs at the limit that costs
    least of those it profiled (`TraceJob.chosen_pace`). With ``pace_noise`` (a loaded or shared
    machine), each run's epochs take ``exp(N(0, pace_noise))`` times the trace's, time and energy
    alike (drawn apart from the trace's runs: 0 leaves every other draw as it was). With
    ``growth`` (data that grows between recurrences, as a daily re-training's does), recurrence
    ``t``'s epochs take ``(1 + growth) ** t`` times the trace's, and the server is told so; each
    trial's ``cost`` is recorded at the first recurrence's data (what it paid, divided by that
    factor), so that regret against the oracle measures the decisions, not the growth."""
    if accumulate and memory_cap is not None:
        unpaced = [
            size
            for size in trace.batch_sizes
            if size >= memory_cap and trace.micro_batch_size(size, memory_cap - 1) is None
        ]
        if unpaced:
            raise _unpaced(trace, unpaced, memory_cap)
    rng = random.Random(seed)
    noise = random.Random(f"pace-{seed}")
    w = trace.workload
    paced = trace.accumulated(memory_cap) if accumulate and memory_cap is not None else trace
    learned: int | None = None  # the cap the server knows (accumulating runs)
    chosen: dict[int, Pace] = {}  # each batch size's power limit, once profiled
    results = []
    for index in range(recurrences):
        grown = (1.0 + growth) ** index
        recurrence = Recurrence()
        tries = 0
        while tries < MAX_TRIES:
            # Asked only when it matters: a backend written before accumulation takes no flag.
            trial = backend.next_trial(accumulate) if accumulate else backend.next_trial()
            steps = 1
            if memory_cap is not None and trial.batch_size >= memory_cap and accumulate:
                # The client tries micro-batches below what the server knows; each that runs
                # out of memory lowers it (a start wasted), and the trial goes on.
                limit = trial.batch_size if learned is None else learned - 1
                micro = trace.micro_batch_size(trial.batch_size, limit)
                while micro is not None and micro >= memory_cap:
                    backend.micro_out_of_memory(trial, micro)
                    recurrence.trials.append(
                        TrialOutcome(micro, 0, 0.0, False, trial.trial_number, out_of_memory=True)
                    )
                    learned = micro if learned is None else min(learned, micro)
                    micro = trace.micro_batch_size(trial.batch_size, micro - 1)
                if micro is not None:
                    steps = trial.batch_size // micro
            if memory_cap is not None and trial.batch_size >= memory_cap and steps == 1:
                backend.out_of_memory(trial)  # found before training: not a try
                recurrence.trials.append(
                    TrialOutcome(
                        trial.batch_size, 0, 0.0, False, trial.trial_number, out_of_memory=True
                    )
                )
                continue
            tries += 1
            profile = paced.profiles[trial.batch_size]
            run = rng.choice(range(len(profile.target_epochs)))  # one of the trace's runs
            slower = math.exp(noise.gauss(0.0, pace_noise)) if pace_noise else 1.0
            slower *= grown
            # Power limits: a batch size's first run profiles every limit in its first epoch
            # (at their mean), and every epoch after runs at the limit that costs least.
            pace = first = None
            if profiles_power(eta_knob, power_limits):
                profiling = trial.batch_size not in chosen
                pace = chosen.setdefault(
                    trial.batch_size, trace.chosen_pace(trial.batch_size, eta_knob)
                )
                first = trace.profiling_pace(trial.batch_size, eta_knob) if profiling else pace
            epoch, answer = 0, None
            while answer is None or not answer.stop_train:
                epoch += 1
                if pace is None or first is None:
                    time = epoch * profile.time_per_epoch * slower
                    energy = time * profile.average_power
                else:
                    time, energy = (slower * x for x in _spent(epoch, first, pace))
                answer = backend.report(
                    trial,
                    time=time,
                    energy=energy,
                    metric=profile.metric_at(run, epoch, w.higher_is_better),
                    current_epoch=epoch,
                )
            backend.end_trial(trial)
            # Its last report's, at the first recurrence's data (the same without growth).
            cost = zeus_cost(energy, time, eta_knob, trace.max_power) / grown
            recurrence.trials.append(
                TrialOutcome(
                    trial.batch_size,
                    epoch,
                    cost,
                    answer.converged,
                    trial.trial_number,
                    accumulation_steps=steps,
                    power_limit=None if pace is None else pace.power_limit,
                )
            )
            if answer.converged:
                break
        results.append(recurrence)
        if on_recurrence is not None:
            on_recurrence(index, recurrence)
    kinds = backend.kinds()
    for recurrence in results:
        recurrence.trials = [
            replace(t, kind=kinds.get(t.trial_number, "")) for t in recurrence.trials
        ]
    return results
