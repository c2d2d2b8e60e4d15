"""No sequence of accepted reports stores a non-finite number (hypothesis): reports anywhere in
the accepted range (time up to 1e9 s, energy up to 1e15 J, zero and near-zero readings), on
hardware profiles whose power limits span the accepted range, moved between at any point.

The job is driven through the policy's state machine as the server drives it
(`zeus_bso.sim.InMemoryJob`); after every step, what the server would store (each batch size's
statistics as the repository writes them, the early-stop reference, each trial's cost) must be
finite, and strict JSON must take it (PostgreSQL's JSON rejects ``NaN`` and ``Infinity``).
"""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from zeus_bso.errors import NoConvergedBatchSizeError
from zeus_bso.sim import InMemoryJob
from zeus_bso.spec import MAX_ENERGY_J, MAX_POWER_W, MAX_TIME_S, CreatedJob, GpuConfig
from zeus_bso_server.store.repository.rows import by_profile_json, stats_json

# The ends of the range, where overflow lives, and a few values between.
readings = st.sampled_from([0.0, 1e-300, 1.0, 1e6, MAX_ENERGY_J])
times = st.sampled_from([0.0, 1e-300, 1.0, 1e3, MAX_TIME_S])
powers = st.sampled_from([1e-6, 1.0, 300.0, MAX_POWER_W])
steps = st.lists(
    st.one_of(
        st.tuples(st.just("move"), powers, st.integers(1, 8)),
        st.tuples(
            st.sampled_from(["converged", "not_converged", "progress", "failed"]), readings, times
        ),
    ),
    max_size=30,
)


def assert_storable(memory: InMemoryJob) -> None:
    stats = stats_json(memory.state.stats.values())
    json.dumps(stats, allow_nan=False)  # raises on NaN and Infinity
    if memory.state.best is not None:
        assert math.isfinite(memory.state.best.cost)
    if memory.state.by_profile is not None:
        json.dumps(by_profile_json(memory.state.by_profile), allow_nan=False)
    for trial in memory.trials:
        for value in (trial.cost, trial.energy, trial.time):
            assert value is None or math.isfinite(value), trial


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([0.0, 0.5, 1.0]), powers, steps)
# The reproduction of the overflow through profile conversion: on the new GPUs a run reads
# almost nothing (a cost per epoch 1e300 times smaller), then one costs what it should.
@example(0.5, 1.0, [("converged", 1e6, 1e3), ("converged", 1e6, 1e3), ("move", 300.0, 1),
                      ("converged", 1e-300, 1e-300), ("converged", 1e6, 1e3)])  # fmt: skip
def test_no_accepted_report_stores_a_non_finite_number(
    eta: float, first_power: float, script: list[tuple[str, float, float]]
) -> None:
    job = CreatedJob(
        job_id="job-1", job_id_prefix="job", batch_sizes=[32, 64],
        default_batch_size=32, eta_knob=eta, target_metric=0.9, max_epochs=5,
        num_pruning_rounds=1, mab_num_explorations=1, mab_seed=0,
        max_power=first_power, number_of_gpus=1, gpu_model="GPU",
    )  # fmt: skip
    memory = InMemoryJob(job)
    for step in script:
        if step[0] == "move":
            _, power, count = step
            memory.register(GpuConfig(max_power=power, number_of_gpus=int(count), gpu_model="GPU"))
            assert_storable(memory)
            continue
        outcome, energy, time = step
        try:
            trial = memory.next_trial()
        except NoConvergedBatchSizeError:
            return
        if outcome == "failed":
            memory.end_trial(trial)
        elif outcome == "progress":
            memory.report(trial, time=time, energy=energy, metric=0.1, current_epoch=1)
            memory.end_trial(trial)
        else:
            converged = outcome == "converged"
            memory.report(
                trial, time=time, energy=energy, metric=0.95 if converged else 0.1,
                current_epoch=2 if converged else job.max_epochs,
            )  # fmt: skip
            memory.end_trial(trial)
        assert_storable(memory)
