"""The last attempt of `zeus_bso.until_converged` after an attempt that delivered no model
(``deliver`` and ``retry``): it explores nothing, so that the recurrence gets a model at a size
that converged before; the walk goes on at the next recurrence."""

from __future__ import annotations

import copy
import random

from tests.policy.helpers import make_job
from zeus_bso.policy import TrialKind
from zeus_bso.policy.decide import decide
from zeus_bso.policy.types import BestRun, CostStats, JobHistory
from zeus_bso.sim import InMemoryJob
from zeus_bso.spec import TrialId

JOB = make_job(target_metric=0.9, max_epochs=10, beta_knob=2.0, eta_knob=1.0)


def run(memory: InMemoryJob, trial: TrialId, per_epoch: float, reaches: int | None) -> bool:
    """Train ``trial`` until the server stops it, each epoch costing ``per_epoch`` joules, at
    the target from epoch ``reaches`` on (None: never); whether it converged."""
    for epoch in range(1, JOB.max_epochs + 1):
        reached = reaches is not None and epoch >= reaches
        answer = memory.report(
            trial,
            time=0.0,
            energy=per_epoch * epoch,
            metric=0.95 if reached else 0.1,
            current_epoch=epoch,
        )
        if answer.stop_train:
            memory.end_trial(trial)
            return answer.converged
    raise AssertionError("the server never stopped the run")


def after_a_failed_exploration() -> InMemoryJob:
    """A job whose default converged (30 J) and whose first exploration was stopped on its
    cost: the recurrence of that exploration has no model yet."""
    memory = InMemoryJob(JOB)
    default = memory.next_trial()
    assert default.batch_size == JOB.default_batch_size
    assert run(memory, default, 10.0, reaches=3)
    explored = memory.next_trial()
    assert memory.last_dispatch is not None
    assert memory.last_dispatch.kind is TrialKind.EXPLORATION
    assert not run(memory, explored, 40.0, reaches=None)  # past 2x the default's: stopped
    return memory


def test_the_last_attempt_after_a_failed_one_takes_the_cheapest_converged_size() -> None:
    memory = after_a_failed_exploration()
    trial = memory.next_trial(deliver=True, retry=True)
    assert memory.last_dispatch is not None
    assert (trial.batch_size, memory.last_dispatch.kind) == (64, TrialKind.EXPLOIT)
    assert run(memory, trial, 10.0, reaches=3)  # the recurrence's model
    # The walk goes on at the next recurrence: its next exploration, as it would have been.
    expected = after_a_failed_exploration().next_trial()
    assert memory.next_trial().batch_size == expected.batch_size
    assert memory.last_dispatch.kind is TrialKind.EXPLORATION


def test_only_the_last_attempt_after_a_failed_one_holds_the_walk_back() -> None:
    """The last attempt of a recurrence that failed nothing yet (``until_converged(attempts=1)``:
    every run is its last) and an attempt after a failure that is not the last explore as
    every run does: a job whose runs all must deliver still learns."""
    for deliver, retry in ((True, False), (False, True)):
        memory = after_a_failed_exploration()
        trial = memory.next_trial(deliver=deliver, retry=retry)
        assert memory.last_dispatch is not None
        assert memory.last_dispatch.kind is TrialKind.EXPLORATION, (deliver, retry)
        assert trial.batch_size != JOB.default_batch_size


def test_with_nothing_converged_the_last_attempt_explores_as_before() -> None:
    """No size has converged to fall back on (the default failed): the walk's next step."""
    memory = InMemoryJob(JOB)
    default = memory.next_trial()
    assert not run(memory, default, 10.0, reaches=None)
    twin = copy.deepcopy(memory)
    trial = memory.next_trial(deliver=True, retry=True)
    assert trial.batch_size == twin.next_trial().batch_size != JOB.default_batch_size


def test_in_the_bandit_stage_the_last_attempt_takes_an_arm_not_the_extension() -> None:
    """A bandit stage that would explore a size beyond its arms (the extension after a prior's
    round, or on new hardware) draws among its arms instead, which all converged."""
    observations = {32: CostStats().add(10.0), 64: CostStats().add(12.0)}
    history = JobHistory(
        arms=(32, 64), observations=observations, best=BestRun(32, 10.0), extension=16
    )
    assert decide(JOB, history, random.Random(0)).batch_size == 16  # explored otherwise
    for seed in range(20):
        dispatch = decide(JOB, history, random.Random(seed), proven=True)
        assert (dispatch.kind, dispatch.batch_size in (32, 64)) == (TrialKind.BANDIT, True)
