"""Priors from a related job: the prior's walk, its drop rules, its bound and the extension of
the arms after it (`zeus_bso.policy.priors`), driven through an in-memory job."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import pytest

from tests.policy.helpers import make_job
from zeus_bso.policy import JobState, TrialKind, TrialState
from zeus_bso.policy.priors import (
    EPOCHS_RATIO_DEARER,
    FIRST_EPOCH_RATIO,
    PARENT_RUN_RATIO,
    TRUSTED_PULLS,
    Prior,
    PriorMode,
)
from zeus_bso.policy.pruning import PRIOR_ROUND
from zeus_bso.sim.memory import InMemoryJob, MemoryStore
from zeus_bso.spec import StopReason

SIZES = [16, 32, 64, 128, 256, 512]
# Cost = 0.5 * energy (time 0): a report's energy is twice its cost.
JOB = make_job(
    eta_knob=0.5,
    max_power=100.0,
    batch_sizes=SIZES,
    default_batch_size=64,
    target_metric=0.9,
    max_epochs=20,
    beta_knob=None,
    prune_cost_ratio=None,
    mab_seed=7,
)

# This job's truth: the cost of an epoch and the epochs to the target at each size (None: never).
EPOCH_COST = {16: 40.0, 32: 25.0, 64: 10.0, 128: 8.0, 256: 9.0, 512: 12.0}
EPOCHS = {16: 4, 32: 4, 64: 5, 128: 4, 256: 5, 512: None}
# Each size's whole run: 64 -> 50, 128 -> 32 (the cheapest), 256 -> 45, 32 -> 100.
RELATED = Prior.of(
    {size: EPOCH_COST[size] * epochs for size, epochs in EPOCHS.items() if epochs},
    hopeless={512},
    epoch_costs=EPOCH_COST,
)

RELATED_WITHOUT_512 = Prior.of(RELATED.costs, (), EPOCH_COST)


def _job(prior: Prior | None) -> InMemoryJob:
    return InMemoryJob(JOB, MemoryStore(job=JobState(prior=prior)))


def _run(
    job: InMemoryJob,
    epoch_cost: Mapping[int, float] = EPOCH_COST,
    epochs: Mapping[int, int | None] = EPOCHS,
) -> tuple[int, int | None, bool, StopReason | None]:
    """One run of the next trial: (batch size, its round, converged, why it stopped)."""
    trial = job.next_trial()
    round_ = job.trials[-1].round
    size = trial.batch_size
    epoch = 0
    while True:
        epoch += 1
        reached = epochs[size] is not None and epoch >= (epochs[size] or 0)
        answer = job.report(
            trial,
            time=0.0,
            energy=2 * epoch_cost[size] * epoch,
            metric=1.0 if reached else 0.1,
            current_epoch=epoch,
        )
        if answer.stop_train:
            job.end_trial(trial)
            return size, round_, answer.converged, answer.reason


def test_a_checked_prior_runs_the_default_then_its_best_then_the_best_s_neighbours() -> None:
    job = _job(RELATED)
    runs = [_run(job) for _ in range(3)]
    assert runs == [(64, PRIOR_ROUND, True, StopReason.CONVERGED)] + [
        (size, PRIOR_ROUND, True, StopReason.CONVERGED) for size in (128, 256)
    ]
    # 128 is the cheapest; its neighbours are 64 and 256, both run: the walk is over.
    assert _run(job)[1] is None
    assert job.trials[-1].kind.value == "bandit"
    assert job.state.arms == (64, 128, 256)


def test_a_trusted_prior_starts_at_its_best_and_never_runs_what_it_calls_hopeless() -> None:
    trusted = Prior.of(RELATED.costs, RELATED.hopeless, EPOCH_COST, PriorMode.TRUST)
    job = _job(trusted)
    sizes = [_run(job)[0] for _ in range(3)]
    assert sizes[0] == 128
    assert sorted(sizes) == [64, 128, 256]
    _run(job)
    assert 512 not in {t.batch_size for t in job.trials}
    assert job.state.arms == (64, 128, 256)


def test_a_trusted_prior_that_knows_one_size_runs_the_default_first() -> None:
    # A parent that converged at 128 alone says nothing of which size is cheaper: its best is
    # no better a first run than the default, which runs first, then 128, as in check mode.
    one = Prior.of({128: 1.0}, (), {128: EPOCH_COST[128]}, PriorMode.TRUST)
    job = _job(one)
    assert [_run(job)[:3] for _ in range(2)] == [
        (64, PRIOR_ROUND, True),
        (128, PRIOR_ROUND, True),
    ]
    # With a second size's cost, the trusted prior's best runs first.
    two = _job(Prior.of({128: 1.0, 256: 1.4}, (), EPOCH_COST, PriorMode.TRUST))
    assert _run(two)[0] == 128


def test_a_size_the_prior_does_not_know_ranks_with_its_best_before_one_it_finds_dearer() -> None:
    # The parent never ran 256 (a size this job's list adds, or one past its own walk): from
    # 128, its best, the walk tries 256 before 64, which the prior puts 56% dearer than 128.
    # Ranked last, an unknown size came after every size the prior predicts dearer, and a job
    # with expected_recurrences could spend its budget on those first.
    costs = {size: RELATED.costs[size] for size in (32, 64, 128)}
    trusted = _job(Prior.of(costs, {512}, EPOCH_COST, PriorMode.TRUST))
    assert [_run(trusted)[0] for _ in range(3)] == [128, 256, 64]
    # Known to the prior as 70% dearer than 128 (64: 56%), 256 comes after 64.
    dearer = _job(Prior.of({**costs, 256: 1.7}, {512}, EPOCH_COST, PriorMode.TRUST))
    assert [_run(dearer)[0] for _ in range(3)] == [128, 64, 256]


@pytest.mark.parametrize(("cost_of_64", "tried"), [(2.0, False), (1.3, True)])
def test_the_best_s_far_side_runs_only_where_the_prior_lets_it_undercut_the_cheapest(
    cost_of_64: float, tried: bool
) -> None:
    # 128, the prior's best, runs dear here (7 epochs: 56) and 256 (45) becomes the cheapest.
    # The walk then guards the best against its one costly run by trying its far side, 64,
    # only where the prior lets 64 cost less than 256 while it holds: scaled from 256's cost,
    # 64 costs 45 * 2.0 / 1.2 = 75 by the prior, and even 1.5 times cheaper (the most a
    # measured ratio may stray before the prior is dropped), 50: more than 45. At 1.3: 32.5.
    costs = {32: 3.0, 64: cost_of_64, 128: 1.0, 256: 1.2}
    job = _job(Prior.of(costs, {512}, EPOCH_COST, PriorMode.TRUST))
    epochs = {**EPOCHS, 128: 7}
    while job.state.arms is None:
        _run(job, epochs=epochs)
    sizes = [t.batch_size for t in job.trials if t.round == PRIOR_ROUND]
    assert sizes == [128, 256, 64] if tried else [128, 256]
    assert job.state.arms == ((64, 128, 256) if tried else (128, 256))


def test_a_trusted_prior_holds_with_the_cheapest_two_sizes_from_its_best() -> None:
    # The prior puts 64 cheapest; here 256 is (27, against 128's 32 and 64's 50): two sizes
    # off. A declared parent's optimum may sit a size away, and a noisy run a size further:
    # trusted, the walk's sizes are the arms; checked, the prior is dropped and the cold walk
    # goes on. Either way, once the cheapest lies two sizes off, the walk leaves the best's
    # far side (32) alone.
    costs = {32: 1.5, 64: 1.0, 128: 1.3, 256: 1.8}
    epochs = {**EPOCHS, 256: 3}
    trusted = _job(Prior.of(costs, {512}, EPOCH_COST, PriorMode.TRUST))
    while trusted.state.arms is None:
        _run(trusted, epochs=epochs)
    assert trusted.state.arms == (64, 128, 256)
    assert [t.round for t in trusted.trials] == [PRIOR_ROUND] * 3 + [None]
    checked = _job(Prior.of(costs, {512}, EPOCH_COST, PriorMode.CHECK))
    runs = [_run(checked, epochs=epochs)[:2] for _ in range(4)]
    assert runs[:3] == [(64, PRIOR_ROUND), (128, PRIOR_ROUND), (256, PRIOR_ROUND)]
    assert runs[3][1] == 0  # the cold walk's first round


def test_a_cold_job_prunes_as_it_always_did() -> None:
    cold, seeded = _job(None), _job(RELATED)
    first = [_run(cold) for _ in range(3)]
    assert [size for size, *_ in first][:2] == [64, 32]  # the default, then down
    assert all(round_ == 0 for _, round_, *_ in first)
    assert _run(seeded)[0] == 64


def test_a_prior_whose_best_does_not_converge_is_dropped_and_the_cold_walk_reuses_its_runs() -> (
    None
):
    wrong = Prior.of({32: 1.0, 64: 2.0, 128: 3.0}, epoch_costs=EPOCH_COST)
    job = _job(wrong)
    epochs = {**EPOCHS, 32: None}  # the prior's best never converges here
    size, round_, converged, _ = _run(job, epochs=epochs)
    assert (size, round_, converged) == (64, PRIOR_ROUND, True)
    size, round_, converged, _ = _run(job, epochs=epochs)
    assert (size, round_, converged) == (32, PRIOR_ROUND, False)
    # Dropped: the cold walk's first round goes on; 64 and 32 count as its runs (the walk down
    # ended at 32), so it walks up from the default.
    size, round_, _, _ = _run(job, epochs=epochs)
    assert (size, round_) == (128, 0)
    assert [t.batch_size for t in job.trials].count(64) == 1


def test_a_default_whose_epoch_costs_far_from_the_parent_s_drops_the_prior() -> None:
    other = Prior.of(RELATED.costs, RELATED.hopeless, {s: c / 3 for s, c in EPOCH_COST.items()})
    job = _job(other)
    assert _run(job)[:2] == (64, PRIOR_ROUND)
    size, round_, _, _ = _run(job)
    assert (size, round_) == (32, 0)  # the cold walk, down from the default


def test_a_run_on_the_prior_s_word_stops_when_its_epoch_costs_far_more_than_the_parent_s() -> None:
    job = _job(RELATED)
    costly = {**EPOCH_COST, 128: 3 * EPOCH_COST[128]}
    _run(job, epoch_cost=costly)
    size, round_, converged, reason = _run(job, epoch_cost=costly)
    assert (size, round_, converged, reason) == (128, PRIOR_ROUND, False, StopReason.COST_BOUND)
    # After its second epoch: its first may hold one-off work (a compile), up to 4x.
    assert job.trials[-1].epochs == 2
    answer = job.trials[-1]
    assert answer.cost == pytest.approx(2 * 3 * EPOCH_COST[128])
    # One more than FIRST_EPOCH_RATIO times the parent's is no compile: it stops at once.
    gross = {**EPOCH_COST, 128: (FIRST_EPOCH_RATIO + 1) * EPOCH_COST[128]}
    again = _job(RELATED)
    _run(again, epoch_cost=gross)
    assert _run(again, epoch_cost=gross)[:3] == (128, PRIOR_ROUND, False)
    assert again.trials[-1].epochs == 1


def test_a_size_stopped_for_the_parent_s_epoch_cost_is_explored_again_by_the_cold_walk() -> None:
    # A parent whose epochs cost a third of this job's (slower GPUs here, or another model): the
    # trusted first run, at its best, stops after two epochs. That says the parent trains unlike
    # this job, nothing of whether 128 converges here: the cold walk explores it again.
    cheaper = {size: cost / 3 for size, cost in EPOCH_COST.items()}
    job = _job(Prior.of(RELATED.costs, RELATED.hopeless, cheaper, PriorMode.TRUST))
    assert _run(job) == (128, PRIOR_ROUND, False, StopReason.COST_BOUND)
    assert job.trials[-1].epochs == 2
    while job.state.arms is None:
        _run(job)
    again = [t for t in job.trials if t.batch_size == 128 and t.round == 0]
    assert [t.converged for t in again] == [True]
    assert 128 in job.state.arms


def test_a_run_on_the_prior_s_word_stops_when_its_epoch_costs_far_less_than_the_parent_s() -> None:
    # A parent whose epochs cost three times this job's (another model, slower GPUs there):
    # the fingerprint is off the other way. The trusted first run, at its best, stops after
    # one epoch instead of training on a word that does not hold (its whole cost in the
    # parent's units says nothing of this job's), and the cold walk starts from the default.
    dearer = {size: 3 * cost for size, cost in EPOCH_COST.items()}
    took = {size: float(epochs) for size, epochs in EPOCHS.items() if epochs}
    trusted = Prior.of(RELATED.costs, RELATED.hopeless, dearer, PriorMode.TRUST, epochs=took)
    job = _job(trusted)
    assert _run(job) == (128, PRIOR_ROUND, False, StopReason.COST_BOUND)
    assert job.trials[-1].epochs == 1
    assert "0.33x its parent job's" in (job.trials[-1].message or "")
    assert _run(job)[:2] == (64, 0)  # the cold walk, from the default
    while job.state.arms is None:
        _run(job)
    assert 128 in job.state.arms  # explored again


def test_a_trusted_first_run_stops_past_a_multiple_of_its_parent_s_run() -> None:
    # Nothing measured here scales the parent's word for the trusted first run; its epochs
    # cost what the parent's did, but it does not converge where the parent's did (4 epochs,
    # 32): it stops before the epoch that would take it past PARENT_RUN_RATIO times that.
    took = {size: float(epochs) for size, epochs in EPOCHS.items() if epochs}
    trusted = Prior.of(RELATED.costs, RELATED.hopeless, EPOCH_COST, PriorMode.TRUST, epochs=took)
    job = InMemoryJob(
        JOB.model_copy(update={"max_epochs": 100}), MemoryStore(job=JobState(prior=trusted))
    )
    size, round_, converged, reason = _run(job, epochs={**EPOCHS, 128: None})
    assert (size, round_, converged, reason) == (128, PRIOR_ROUND, False, StopReason.COST_BOUND)
    stopped = job.trials[-1]
    assert stopped.epochs is not None
    assert stopped.epochs * 8.0 <= PARENT_RUN_RATIO * 32.0 < (stopped.epochs + 1) * 8.0
    assert "what its parent job's runs at that size cost" in (stopped.message or "")
    assert _run(job)[:2] == (64, 0)  # dropped: the cold walk, from the default


def test_a_size_the_cold_walk_explored_again_is_judged_by_that_run() -> None:
    # The parent's runs at 128 took less than an epoch (0.8), and the trusted first run there
    # does not converge this time: it stops at epoch 4 (32), before 6x its parent's run
    # (38.4). Cheaper than 64 (50) and 256 (45), it says nothing of 128, and the cold walk
    # explores 128 again: it converges in 3 epochs (24), the cheapest. The stopped run, dearer
    # than that, must not speak for 128 from then on: read first, it had taken 128 off the
    # arms while 128 set every bandit run's bound (on the trace, one seed's bandit then stopped
    # every run of its cheapest arm short of the target, 20 a recurrence).
    took = {size: float(epochs) for size, epochs in EPOCHS.items() if epochs}
    trusted = Prior.of(
        RELATED.costs, RELATED.hopeless, EPOCH_COST, PriorMode.TRUST, epochs={**took, 128: 0.8}
    )
    job = InMemoryJob(
        JOB.model_copy(update={"beta_knob": 2.0}), MemoryStore(job=JobState(prior=trusted))
    )
    first = _run(job, epochs={**EPOCHS, 128: None})
    assert first == (128, PRIOR_ROUND, False, StopReason.COST_BOUND)
    assert job.trials[-1].cost == pytest.approx(32.0)
    assert PARENT_RUN_RATIO * 0.8 * 8.0 < 40.0
    faster = {**EPOCHS, 128: 3}
    while job.state.arms is None:
        _run(job, epochs=faster)
    assert [t.converged for t in job.trials if t.batch_size == 128 and t.round == 0] == [True]
    assert job.state.best is not None
    assert job.state.best.batch_size == 128
    assert job.state.arms is not None
    assert 128 in job.state.arms
    later = [_run(job, epochs=faster) for _ in range(8)]
    assert all(converged for _, _, converged, _ in later)


def test_a_first_epoch_dearer_for_one_off_work_does_not_drop_the_prior() -> None:
    # The trusted first run's first epoch costs 3.5 of its parent's (a compile, cold caches);
    # its next ones cost what the parent's did. It trains on to the target, and the prior holds:
    # the walk goes on to the best's neighbours. (Held to 2x at the first report, it stopped.)
    took = {size: float(epochs) for size, epochs in EPOCHS.items() if epochs}
    trusted = Prior.of(RELATED.costs, RELATED.hopeless, EPOCH_COST, PriorMode.TRUST, epochs=took)
    job = _job(trusted)
    trial = job.next_trial()
    for epoch in range(1, 5):
        spent = 3.5 * EPOCH_COST[128] + (epoch - 1) * EPOCH_COST[128]
        answer = job.report(
            trial,
            time=0.0,
            energy=2 * spent,
            metric=1.0 if epoch == 4 else 0.1,
            current_epoch=epoch,
        )
        if answer.stop_train:
            break
    job.end_trial(trial)
    assert (answer.converged, job.trials[-1].epochs) == (True, 4)
    assert _run(job)[:2] in {(64, PRIOR_ROUND), (256, PRIOR_ROUND)}  # the prior's walk


def test_the_epochs_since_a_restart_are_read_as_a_first_epoch_is() -> None:
    # What the fingerprint holds a run's epochs since its report before to (2x the parent's):
    # none at its first report, nor at its first since its run resumed (the server stores the
    # epochs it had reported then), whose epochs hold the restart's one-off work.
    trial = TrialState(1, 128, TrialKind.EXPLORATION, PRIOR_ROUND, epochs=2, cost=30.0)
    assert not trial.restarted
    assert trial.since(45.0, 3) == 15.0
    assert replace(trial, epochs=None, cost=None).since(15.0, 1) is None
    resumed = replace(trial, resumed_at_epoch=2)
    assert resumed.restarted
    assert resumed.since(60.0, 3) is None
    reported = replace(resumed, epochs=3, cost=60.0)  # its first report since the restart
    assert not reported.restarted
    assert reported.since(70.0, 4) == 10.0


def test_a_default_stopped_for_the_parent_s_epoch_cost_does_not_end_the_job() -> None:
    # Upstream's walk order (down first, and not past a default that does not converge) with
    # the default the largest size: the default stopped on the parent's word was the whole
    # first round, and the job refused every next run ("no batch size converged").
    job = InMemoryJob(
        JOB.model_copy(update={"batch_sizes": [16, 32, 64]}),
        MemoryStore(
            job=JobState(
                prior=Prior.of({64: 1.0, 32: 2.0}, (), {64: 1.0, 32: 1.0}, PriorMode.TRUST)
            )
        ),
    )
    assert _run(job) == (64, PRIOR_ROUND, False, StopReason.COST_BOUND)
    assert _run(job)[:3] == (64, 0, True)  # the cold walk's pivot, run again
    assert _run(job)[:3] == (32, 0, True)


def test_a_trusted_prior_s_first_run_is_not_bounded_by_its_parent_s_epochs() -> None:
    # A declared parent of a job with a farther target: every size takes three times the epochs
    # its parent's runs took. The trusted first run, at the cheapest size, 128, trains to the
    # target (12 epochs; a bound of 2.5x its parent's 4 had stopped it at 10, and the job kept
    # to 64, 56% dearer, for good), and 128 is among the arms.
    took = {size: float(epochs) for size, epochs in EPOCHS.items() if epochs}
    job = _job(Prior.of(RELATED.costs, RELATED.hopeless, EPOCH_COST, PriorMode.TRUST, epochs=took))
    farther = {size: 3 * epochs if epochs else None for size, epochs in EPOCHS.items()}
    assert _run(job, epochs=farther) == (128, PRIOR_ROUND, True, StopReason.CONVERGED)
    assert job.trials[-1].epochs == 12
    while job.state.arms is None:
        _run(job, epochs=farther)
    assert 128 in job.state.arms


def test_a_size_stopped_on_the_parent_s_word_once_dearer_than_a_converged_one_stays_off() -> None:
    # The default, 64, converged at 50; 128 (the prior's best) costs eight times its parent's
    # epoch, 64, and stops after one: it already cost more than 64's whole run, so it cannot be
    # the cheapest. The cold walk reads it as its outcome and does not run it again.
    costly = {**EPOCH_COST, 128: 8 * EPOCH_COST[128]}
    job = _job(RELATED)
    _run(job, epoch_cost=costly)  # the default, 64, converges at 50
    assert _run(job, epoch_cost=costly)[:3] == (128, PRIOR_ROUND, False)
    assert job.trials[-1].cost == pytest.approx(64.0)
    while job.state.arms is None:
        _run(job, epoch_cost=costly)
    assert [t.batch_size for t in job.trials].count(128) == 1
    assert 128 not in job.state.arms


def test_a_run_on_a_one_size_parent_s_word_stops_sooner_once_dearer_than_a_converged_size() -> None:
    # The parent converged at 128 alone, in 4 epochs: its word scales by no other size's cost.
    # The default runs first (64: 50); 128 never converges here. Once its run costs more than
    # 64's, it can no longer be the cheapest, and past 1.25x its parent's epochs it stops.
    one = Prior.of({128: 1.0}, (), EPOCH_COST, PriorMode.TRUST, epochs={128: 4.0})
    never = {**EPOCHS, 128: None}
    job = _job(one)
    assert _run(job, epochs=never)[:3] == (64, PRIOR_ROUND, True)
    size, round_, converged, reason = _run(job, epochs=never)
    assert (size, round_, converged, reason) == (128, PRIOR_ROUND, False, StopReason.COST_BOUND)
    # 8 an epoch: dearer than 64's 50 from epoch 7, past 1.25 x 4 epochs then.
    assert job.trials[-1].epochs == 7
    assert EPOCHS_RATIO_DEARER * 4 < 7 + 1
    assert "costs more than batch size 64 here" in (job.trials[-1].message or "")
    # A run that stays cheaper than 64's is not stopped on its parent's epochs: at 4 an epoch,
    # 128's run costs 48 at epoch 12, and stops at 13 (52), once dearer than 64's 50.
    cheap = _job(one)
    _run(cheap, epochs=never)
    _run(cheap, epoch_cost={**EPOCH_COST, 128: 4.0}, epochs=never)
    assert cheap.trials[-1].epochs == 13
    assert "costs more than batch size 64 here" in (cheap.trials[-1].message or "")


def _bandit_runs(mode: PriorMode, exploit_after: int, seed: int) -> list[int]:
    """The sizes of a seeded job's walk and first bandit runs, each size's epochs varying from
    run to run (256 and 128 close: 36 and 38 on average), so that sampling the arms and
    exploiting them part ways. The job's default is the prior's best: the walk is the same in
    either mode."""
    job = InMemoryJob(
        make_job(
            **{
                **JOB.model_dump(),
                "default_batch_size": 128,
                "bandit": "thompson",
                "bandit_exploit_after": exploit_after,
                "mab_num_explorations": 1,
                "mab_seed": seed,
            }
        ),
        MemoryStore(job=JobState(prior=Prior.of(RELATED.costs, {512}, EPOCH_COST, mode))),
    )
    spread = [{128: 4, 256: 5}, {128: 6, 256: 3}, {128: 4, 256: 4}, {128: 5, 256: 4}]
    return [_run(job, epochs={**EPOCHS, **spread[i % 4]})[0] for i in range(9)]


def test_a_trusted_prior_that_held_lets_the_bandit_exploit_sooner() -> None:
    # A declared parent whose walk held stands for TRUSTED_PULLS bandit trials: the bandit
    # exploits that many trials sooner. Its runs are those of a job told to exploit that much
    # sooner; a checked prior keeps the bandit's own pace.
    assert TRUSTED_PULLS == 3
    trusted = [_bandit_runs(PriorMode.TRUST, 5, seed) for seed in range(12)]
    assert all(runs[:3] == [128, 256, 64] for runs in trusted)  # the walk
    assert trusted == [_bandit_runs(PriorMode.CHECK, 2, seed) for seed in range(12)]
    assert trusted != [_bandit_runs(PriorMode.CHECK, 5, seed) for seed in range(12)]


def test_a_measured_cost_ratio_far_from_the_prior_s_drops_it() -> None:
    # The prior puts 128 at 0.56 of 64's cost; here 128 costs about what 64 does (1.7x the
    # prior's ratio: within the run's bound, twice the prior's prediction, past the tolerance).
    skewed = Prior.of({64: 1.8, 128: 1.0, 256: 2.0}, epoch_costs=EPOCH_COST)
    job = _job(skewed)
    even = {**EPOCHS, 128: 6}
    _run(job, epochs=even)
    assert _run(job, epochs=even)[:3] == (128, PRIOR_ROUND, True)
    size, round_, _, _ = _run(job, epochs=even)
    assert (size, round_) == (32, 0)


def test_after_the_walk_the_cheapest_arm_extends_to_an_untried_neighbour() -> None:
    # The walk finds 128 cheapest (64 and 256 run); later runs find 256 far cheaper than 128,
    # and 512, which no run tried and the prior does not call hopeless, is explored next to it.
    job = _job(RELATED_WITHOUT_512)
    walk = [_run(job)[0] for _ in range(3)]
    assert walk == [64, 128, 256]
    later = {**EPOCHS, 128: 10, 256: 1, 512: 1}
    extended = None
    for _ in range(30):
        size, round_, converged, _ = _run(job, epochs=later)
        if size == 512:
            extended = (round_, converged, job.trials[-1].kind.value)
            break
    assert extended == (None, True, "exploration")
    _run(job, epochs=later)
    assert job.state.arms == (64, 128, 256, 512)


def test_after_the_walk_no_size_the_prior_calls_hopeless_is_explored() -> None:
    job = _job(RELATED)
    later = {**EPOCHS, 128: 10, 256: 1, 512: 1}
    for _ in range(3):
        _run(job)
    sizes = {_run(job, epochs=later)[0] for _ in range(20)}
    assert 512 not in sizes


def test_a_size_a_dropped_prior_saw_converge_stays_a_candidate_off_the_cold_walk() -> None:
    # The prior's best, 512, converges (24), at a ratio to the default's cost (50) far from the
    # prior's (0.29 against 0.48): dropped. The cold walk up ends at 256 (never converges), so
    # it never steps 512; 512 is still a candidate of the next round, and an arm.
    epochs = {**EPOCHS, 256: None, 512: 2}
    prior = Prior.of({64: 3.5, 512: 1.0}, epoch_costs=EPOCH_COST)
    job = _job(prior)
    assert _run(job, epochs=epochs)[:3] == (64, PRIOR_ROUND, True)
    assert _run(job, epochs=epochs)[:3] == (512, PRIOR_ROUND, True)
    while job.state.arms is None:
        _run(job, epochs=epochs)
    assert 512 in job.state.arms
    assert any(t.batch_size == 512 and t.round == 1 for t in job.trials)


@pytest.mark.parametrize(
    ("costs", "message"),
    [({}, "at least one"), ({64: 0.0}, "positive and finite"), ({64: float("inf")}, "positive")],
)
def test_a_prior_without_a_usable_cost_is_refused(costs: dict[int, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Prior(costs)
