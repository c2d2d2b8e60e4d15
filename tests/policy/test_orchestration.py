"""`zeus_bso.policy.orchestration` for readers: a view of a job (the server's GET
/api/jobs/{id}) reads the job's stored history once for its statistics and its next run, and
decides as the views that each read it themselves."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from zeus_bso.policy.orchestration import decision_view, next_run, reading
from zeus_bso.policy.profiles import WindowedCosts
from zeus_bso.policy.types import ByProfile, JobState, TrialState
from zeus_bso.sim import in_process, job_spec, load_trace_job, simulate
from zeus_bso.sim.memory import MemoryStore
from zeus_bso.spec import profile_key


class Counting:
    """The job's store, counting the reads of the windowed costs."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.reads = 0

    def state(self) -> JobState:
        return self.inner.state()

    def trial(self, number: int) -> TrialState | None:
        return self.inner.trial(number)

    def explorations(self) -> Sequence[TrialState]:
        return self.inner.explorations()

    def latest_costs(self, batch_sizes: Iterable[int], window: int) -> WindowedCosts:
        self.reads += 1
        return self.inner.latest_costs(batch_sizes, window)

    def by_profile(self, base: str) -> ByProfile:
        return self.inner.by_profile(base)

    def add_trial(self, trial: TrialState, job: JobState) -> None:
        raise AssertionError("a reader stores nothing")

    def save_trial(self, trial: TrialState, job: JobState) -> None:
        raise AssertionError("a reader stores nothing")


def test_a_reader_reads_the_windowed_costs_once_for_both_views() -> None:
    trace = load_trace_job("cifar100", "v100")
    spec = job_spec(trace, "orchestration-1", mab_seed=3, window_size=4)
    backend = in_process(spec)
    simulate(trace, backend, recurrences=12, seed=3, eta_knob=0.5)
    job, store = backend.job, Counting(backend.store)
    assert store.state().arms is not None  # the bandit stage: the windowed costs of its arms
    profile = profile_key(job)

    alone = (decision_view(store, job, store.state()), next_run(store, job, profile))
    assert store.reads == 2  # each view read them

    store.reads = 0
    read = reading(store, job)
    shared = (decision_view(store, job, store.state(), read), next_run(store, job, profile, read))
    assert store.reads == 1
    assert shared == alone
