"""The shipped traces and the six workloads built on them."""

from __future__ import annotations

import itertools
import math

import pytest

from zeus_bso.policy import zeus_cost
from zeus_bso.sim import GPUS, WORKLOADS, TraceError, load_trace_job
from zeus_bso.sim.trace import power_limits


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("workload", list(WORKLOADS))
def test_every_workload_loads_with_a_converging_oracle(workload: str, gpu: str) -> None:
    job = load_trace_job(workload, gpu)
    assert job.default_batch_size in job.batch_sizes
    assert job.max_power == 250.0
    oracle = job.oracle_batch_size(0.5)
    assert math.isfinite(job.expected_cost(oracle, 0.5))
    assert all(job.expected_cost(b, 0.5) >= job.expected_cost(oracle, 0.5) for b in job.batch_sizes)


def test_defaults_are_capped_by_the_gpu_trace() -> None:
    assert load_trace_job("librispeech", "v100").default_batch_size == 192
    assert load_trace_job("imagenet", "p100").default_batch_size == 128
    assert load_trace_job("cifar100", "v100").default_batch_size == 1024


def test_expected_cost_counts_failed_runs() -> None:
    job = load_trace_job("movielens-1m", "v100")
    # batch size 32: one of its five runs reaches the target, at epoch 34.
    epochs = job.profiles[32].target_epochs
    assert sum(job.converges(e) for e in epochs) == 1
    epoch_cost = job.epoch_cost(32, 0.5)
    expected = 34 * epoch_cost + (1 - 0.2) / 0.2 * job.workload.max_epochs * epoch_cost
    assert job.expected_cost(32, 0.5) == pytest.approx(expected)
    assert job.expected_cost(4, 0.5) == math.inf


def test_epoch_cost_uses_the_maximum_power_limit_row() -> None:
    job = load_trace_job("cifar100", "v100")
    p = job.profiles[1024]
    assert job.epoch_cost(1024, 0.5) == zeus_cost(
        p.time_per_epoch * p.average_power, p.time_per_epoch, 0.5, 250.0
    )


def test_a_lower_power_limit_is_a_slower_gpu_with_that_maximum_power() -> None:
    assert power_limits("v100") == [100.0, 125.0, 150.0, 175.0, 200.0, 225.0, 250.0]
    full, capped = load_trace_job("cifar100", "v100"), load_trace_job("cifar100", "v100", 150)
    assert (full.max_power, capped.max_power) == (250.0, 150.0)
    assert capped.profiles[1024].time_per_epoch > full.profiles[1024].time_per_epoch
    assert capped.profiles[1024].average_power < full.profiles[1024].average_power
    assert capped.profiles[1024].target_epochs == full.profiles[1024].target_epochs
    with pytest.raises(TraceError, match="no power limit 160 W; it has 100, 125"):
        load_trace_job("cifar100", "v100", 160)


def test_unknown_names_are_clear_errors() -> None:
    with pytest.raises(TraceError, match="unknown workload"):
        load_trace_job("mnist", "v100")
    with pytest.raises(TraceError, match="unknown GPU"):
        load_trace_job("cifar100", "a100")


@pytest.mark.parametrize("gpu", GPUS)
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_learning_curves_reach_the_target_at_the_traced_epoch(workload: str, gpu: str) -> None:
    """Each run's curve (the thresholds it reached, epoch by epoch) first meets the target at
    the epoch the trace records for it, never if it records none within max_epochs; it never
    gets worse, and it starts one threshold step below the trace's worst."""
    trace = load_trace_job(workload, gpu)
    w = trace.workload
    better = max if w.higher_is_better else min
    for profile in trace.profiles.values():
        assert len(profile.curves) == len(profile.target_epochs)
        for run, target_epoch in enumerate(profile.target_epochs):
            curve = [profile.metric_at(run, e, w.higher_is_better) for e in range(w.max_epochs + 1)]
            assert curve[0] == profile.start_metric
            assert all(better(a, b) == b for a, b in itertools.pairwise(curve))
            met = [e for e, m in enumerate(curve) if better(m, w.target_metric) == m]
            expected = int(target_epoch) if trace.converges(target_epoch) else None
            assert (met[0] if met else None) == expected
