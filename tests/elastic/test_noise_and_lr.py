"""The gradient noise estimator against a problem whose noise is known in closed form, gain
bounds, learning-rate restoration, bounds of the batch size choice."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from zeus_bso.elastic import ElasticBatchSize, GradientNoiseEstimator, lr_factor
from zeus_bso.elastic.goodput import Choice, ThroughputModel, best_choice, candidates


def least_squares_gradients(
    rng: random.Random, d: int, delta: list[float], sigma: float, b: int, k: int
) -> list[list[float]]:
    """k mean gradients over b samples each of 1/2 (x.w - y)^2 at w = w* + delta, with
    x ~ N(0, I_d) and y = x.w* + N(0, sigma^2): per-sample gradient (x.delta + eps) x."""
    out = []
    for _ in range(k):
        total = [0.0] * d
        for _ in range(b):
            x = [rng.gauss(0, 1) for _ in range(d)]
            r = sum(a * c for a, c in zip(x, delta, strict=True)) + rng.gauss(0, sigma)
            for i in range(d):
                total[i] += r * x[i]
        out.append([t / b for t in total])
    return out


def test_estimator_recovers_the_closed_form_noise() -> None:
    # E[g] = delta, Cov(g) = (|delta|^2 + sigma^2) I + delta delta^T:
    # |G|^2 = |delta|^2 and tr(S) = d (|delta|^2 + sigma^2) + |delta|^2.
    rng = random.Random(0)
    d, sigma = 5, 1.0
    delta = [0.3, -0.2, 0.1, 0.0, 0.4]
    sqr_true = sum(v * v for v in delta)
    var_true = d * (sqr_true + sigma**2) + sqr_true
    estimator = GradientNoiseEstimator(smoothing=0.995)
    for _ in range(1500):
        estimator.update_from_gradients(least_squares_gradients(rng, d, delta, sigma, b=8, k=4), 8)
    assert estimator.sqr == pytest.approx(sqr_true, rel=0.15)
    assert estimator.var == pytest.approx(var_true, rel=0.10)
    assert estimator.noise_scale() == pytest.approx(var_true / sqr_true, rel=0.25)


@given(st.floats(1e-6, 1e6), st.floats(0.0, 1e6), st.floats(1.0, 1e4), st.integers(1, 4096))
def test_gain_is_between_one_and_the_scale(
    sqr: float, var: float, scale: float, initial: int
) -> None:
    estimator = GradientNoiseEstimator()
    estimator._sqr.update(sqr)
    estimator._var.update(var)
    gain = estimator.gain(scale, initial)
    assert 1.0 <= gain <= scale * (1 + 1e-12)


def test_no_noise_scale_while_the_squared_gradient_is_not_measured_above_zero() -> None:
    estimator = GradientNoiseEstimator()
    assert estimator.noise_scale() is None  # no data
    # Two micro-batch gradients that cancel: |G|^2's unbiased estimate is negative.
    estimator.update_from_gradients([[1.0, 0.0], [-1.0, 0.0]], local_batch=4)
    assert estimator.sqr == 1e-30  # clipped, for the gain
    assert estimator.noise_scale() is None  # not a ratio of 1e30
    for _ in range(20):
        estimator.update_from_gradients([[1.0, 1.0], [1.2, 0.8]], local_batch=4)
    assert estimator.noise_scale() == pytest.approx(estimator.var / estimator.sqr)


def test_gain_without_data_is_one() -> None:
    assert GradientNoiseEstimator().gain(8.0, 32) == 1.0


def test_lr_rules() -> None:
    assert lr_factor("adascale", 8.0, 4.0) == 4.0
    assert lr_factor("sqrt", 8.0, 4.0) == 2.0
    assert lr_factor("linear", 8.0, 4.0) == 8.0
    assert lr_factor("none", 8.0, 4.0) == 1.0


def test_choices_respect_the_bounds() -> None:
    options = candidates(64, 1024, (32, 256), replicas=1, min_accumulation=2)
    assert options
    for choice in options:
        assert 32 <= choice.local_bsz <= 256
        assert 64 <= choice.global_batch <= 1024
        assert choice.accumulation >= 2


def test_goodput_prefers_large_batches_when_noise_is_high_and_small_when_low() -> None:
    model = ThroughputModel()
    for b, t in ((32, 0.10), (64, 0.11), (128, 0.13), (256, 0.17)):  # fixed cost dominates
        model.observe(b, t)
    options = candidates(64, 1024, (32, 256), replicas=1, min_accumulation=2)
    noisy = best_choice(options, model, lambda s: s, 64)  # perfect scaling: gain = scale
    quiet = best_choice(options, model, lambda s: 1.0, 64)  # no gain from larger batches
    assert noisy is not None
    assert quiet is not None
    assert noisy[0].global_batch > quiet[0].global_batch
    assert quiet[0].global_batch == 64


def test_validation_of_arguments() -> None:
    with pytest.raises(ValueError, match="max_batch_size"):
        ElasticBatchSize(64, max_batch_size=32)
    with pytest.raises(ValueError, match="local_bsz_bounds"):
        ElasticBatchSize(64, local_bsz_bounds=(64, 32))
    with pytest.raises(ValueError, match="lr_rule"):
        ElasticBatchSize(64, lr_rule="cubic")  # type: ignore[arg-type]
    assert Choice(16, 2, 2).global_batch == 64


def _noisy_and_fast_at_large_batches(max_change: float) -> ElasticBatchSize:
    ebs = ElasticBatchSize(
        32, max_batch_size=4096, local_bsz_bounds=(16, 2048), max_change=max_change
    )
    ebs.noise._sqr.update(1e-3)  # noise scale 1e4: large batches lose almost nothing
    ebs.noise._var.update(10.0)
    for local, seconds in ((16, 0.0100), (32, 0.0105), (64, 0.0110)):
        ebs.throughput.observe(local, seconds)
    return ebs


def test_batch_size_changes_are_damped() -> None:
    ebs = _noisy_and_fast_at_large_batches(max_change=2.0)
    sizes = [ebs.choice.global_batch]
    for _ in range(10):
        ebs.schedule_progress.stepped(1.0)  # an epoch's steps: a decision needs them
        ebs.get_local_bsz()
        sizes.append(ebs.choice.global_batch)
    steps = [after / before for before, after in itertools.pairwise(sizes)]
    assert all(0.5 <= s <= 2.0 for s in steps), sizes
    assert sizes == sorted(sizes)  # steady estimates: it climbs, never back and forth
    undamped = _noisy_and_fast_at_large_batches(max_change=1e9)
    undamped.get_local_bsz()
    assert undamped.choice.global_batch == 4096  # one jump without damping
    # The damped climb ends within the change threshold of the best goodput (the last doubling
    # would gain less than the 5% it asks for).
    best = undamped._goodput(undamped.choice)
    reached = ebs._goodput(ebs.choice)
    assert best is not None
    assert reached is not None
    assert best / (1 + ebs.threshold) <= reached <= best


def test_a_new_batch_size_is_said_once_and_the_metrics_say_where_it_stands(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ebs = _noisy_and_fast_at_large_batches(max_change=2.0)
    before = ebs.metrics()
    assert before["elastic/batch_size"] == 32
    assert before["elastic/scale"] == 1.0
    assert before["elastic/noise_scale"] == pytest.approx(1e4)
    assert "elastic/lr" not in before  # no optimizer step yet
    with caplog.at_level("INFO", logger="zeus_bso.elastic"):
        ebs.get_local_bsz()
    said = [r.getMessage() for r in caplog.records if r.name.startswith("zeus_bso.elastic")]
    after = ebs.metrics()
    assert after["elastic/batch_size"] == ebs.choice.global_batch == 64
    assert after["elastic/local_batch_size"] * after["elastic/accumulation"] == 64
    assert after["elastic/scale"] == 2.0
    assert after["elastic/gain"] == pytest.approx(ebs.predict_gain(2.0))
    assert 1.9 < after["elastic/gain"] <= 2.0  # noise scale 1e4: almost the whole scale
    assert len(said) == 1
    assert "from 32 to 64" in said[0]
    assert (
        f"({ebs.choice.local_bsz} a micro-batch x {ebs.choice.accumulation} accumulated"
        in (said[0])
    )
    caplog.clear()
    saturated = _noisy_and_fast_at_large_batches(max_change=1e9)
    saturated.get_local_bsz()  # to the largest at once
    saturated.schedule_progress.stepped(1.0)
    with caplog.at_level("INFO", logger="zeus_bso.elastic"):
        saturated.get_local_bsz()  # kept: nothing to say
    assert not [r for r in caplog.records if r.name.startswith("zeus_bso.elastic")]


def test_a_new_batch_size_is_said_where_show_says_instead_of_the_logger(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ebs = _noisy_and_fast_at_large_batches(max_change=2.0)
    said: list[str] = []
    ebs.show = said.append
    with caplog.at_level("INFO", logger="zeus_bso.elastic"):
        ebs.get_local_bsz()
    assert len(said) == 1
    assert said[0].startswith("ElasticBatchSize: the batch size goes from 32 to 64 ")
    assert not [r for r in caplog.records if r.name.startswith("zeus_bso.elastic")]


def test_max_change_must_be_above_one() -> None:
    with pytest.raises(ValueError, match="max_change"):
        ElasticBatchSize(32, max_change=1.0)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_an_observation_that_is_not_a_number_is_left_out(bad: float) -> None:
    """Gradients that overflowed (AMP's first steps in float16) gave a NaN observation, which
    made the estimates, the gain and the learning rate it scales NaN for good."""
    estimator = GradientNoiseEstimator(smoothing=0.5)
    estimator.update([4.0, 6.0], 3.0, 8)
    before = (estimator.sqr, estimator.var)
    estimator.update([bad, 6.0], 3.0, 8)
    estimator.update([4.0, 6.0], bad, 8)
    assert (estimator.sqr, estimator.var) == before
    assert 1.0 <= estimator.gain(4.0, 32) <= 4.0


def test_a_checkpoint_resumed_on_another_number_of_processes_keeps_its_global_batch() -> None:
    def elastic(replicas: int) -> ElasticBatchSize:
        return ElasticBatchSize(
            64, max_batch_size=4096, local_bsz_bounds=(16, 256), replicas=replicas,
            min_accumulation=1,
        )  # fmt: skip

    four = elastic(4)
    four.update_scale(8.0)  # 512: 128 a process, on 4
    assert four.choice == Choice(128, 1, 4)
    spreads = {4: Choice(128, 1, 4), 2: Choice(256, 1, 2), 1: Choice(256, 2, 1)}
    for replicas, spread in spreads.items():
        resumed = elastic(replicas)
        resumed.load_state_dict(four.state_dict())
        assert resumed.choice == spread  # within the bounds, the fewest micro-batches
        assert resumed.scale == 8.0  # the rate's scale is that of the batch that trains
    eight = elastic(8)
    eight.load_state_dict(four.state_dict())
    assert eight.choice == Choice(64, 1, 8)


def test_asked_again_before_a_step_the_batch_size_is_the_same() -> None:
    # A loop that asks twice an epoch (its DataLoader, then a log line) trained one size while
    # the noise and the rate took the next.
    ebs = _noisy_and_fast_at_large_batches(max_change=2.0)
    first = ebs.get_local_bsz()
    assert ebs.choice.global_batch == 64  # it grew at once: the estimates were there
    assert [ebs.get_local_bsz() for _ in range(3)] == [first] * 3
    assert ebs.choice.global_batch == 64
    ebs.schedule_progress.stepped(1.0)  # the epoch's steps
    assert ebs.get_local_bsz() > first
    assert ebs.choice.global_batch == 128
