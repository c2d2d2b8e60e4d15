"""Wire-model validation: upstream compatibility and the deliberate fixes."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from pydantic import ValidationError

from zeus_bso.spec import (
    MAX_ID_LENGTH,
    UPSTREAM_OPTIONS,
    JobSpec,
    JobSpecFromClient,
    TrainingResult,
    differing_settings,
    new_job_refused,
)


def body(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "job_id_prefix": "job",
        "batch_sizes": [128, 32, 64],
        "default_batch_size": 64,
        "max_power": 300,
        "number_of_gpus": 1,
        "gpu_model": "A100",
    }
    base.update(overrides)
    return base


def test_defaults() -> None:
    job = JobSpecFromClient(**body())
    assert job.batch_sizes == [32, 64, 128]
    assert job.job_id is None
    # As upstream:
    assert (job.eta_knob, job.beta_knob, job.target_metric) == (0.5, 2.0, 0.5)
    assert (job.max_epochs, job.window_size) == (100, 0)
    assert (job.mab_prior_mean, job.mab_prior_precision) == (0, 0)
    assert job.mab_seed is None
    assert job.higher_is_better_metric is True
    # Ours, measured on the trace benchmark; upstream's values stay one option set away.
    assert (job.num_pruning_rounds, job.mab_num_explorations) == (1, 1)
    upstream = JobSpecFromClient(**body(), **UPSTREAM_OPTIONS)
    assert (upstream.num_pruning_rounds, upstream.mab_num_explorations) == (2, 2)
    assert upstream.prune_cost_ratio is None
    assert upstream.bandit == "zeus-0.16"


def test_unknown_fields_are_ignored_and_whole_numbers_coerced() -> None:
    job = JobSpecFromClient(
        **body(
            default_batch_size="64", max_epochs=10.0, surprise="ignored", batch_sizes=[32.0, "64"]
        )
    )
    assert job.default_batch_size == 64
    assert job.max_epochs == 10
    assert job.batch_sizes == [32, 64]
    assert "surprise" not in job.model_dump()


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"batch_sizes": [32, 64, 64]}, "more than once"),
        ({"batch_sizes": [0, 64]}, "greater than 0"),
        ({"batch_sizes": [-32, 64]}, "greater than 0"),
        ({"batch_sizes": []}, "batch_sizes is empty: list at least one"),
        ({"default_batch_size": 48}, "not one of batch_sizes"),
        ({"eta_knob": 1.5}, "less than or equal to 1"),
        ({"beta_knob": 0}, "greater than 0"),
        ({"max_epochs": 0}, "greater than 0"),
        ({"max_epochs": 2.5}, "fractional part"),
        ({"num_pruning_rounds": -1}, "greater than or equal to 0"),
        ({"window_size": -1}, "greater than or equal to 0"),
        ({"job_id": "other-1"}, "does not start with"),
        ({"job_id": "job-" + "x" * MAX_ID_LENGTH}, "at most"),
        ({"gpu_model": ""}, "at least 1"),
        ({"gpu_model": "g" * (MAX_ID_LENGTH + 1)}, "at most"),
        ({"max_power": math.nan}, "finite"),
        ({"max_power": math.inf}, "finite"),
        ({"target_metric": -math.inf}, "finite"),
        ({"batch_sizes": [2**40], "default_batch_size": 2**40}, "less than or equal"),
        ({"mab_seed": 2**70}, "less than or equal"),
    ],
)
def test_invalid_job_specs_are_rejected(overrides: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        JobSpecFromClient(**body(**overrides))
    assert needle in str(info.value)


def test_trust_mode_without_a_declared_parent_is_refused_by_the_user_s_spec() -> None:
    """Trust mode with ``prior_from="auto"`` or without ``prior_from``: the user's `JobSpec`
    refuses it at once; the server's wire model takes it (a job that exists keeps what it
    learned, whatever its seed settings say), and the server refuses it for a new job
    (`tests/api/test_priors.py`)."""
    fields = {"job_id_prefix": "job", "batch_sizes": [32, 64], "default_batch_size": 64}
    with pytest.raises(ValidationError, match="prior_from='auto' seeds in check mode only"):
        JobSpec(**fields, prior_from="auto", prior_mode="trust")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="prior_from is not set: give the parent job's id"):
        JobSpec(**fields, prior_mode="trust")  # type: ignore[arg-type]
    assert JobSpec(**fields, prior_mode="check").prior_from is None  # type: ignore[arg-type]
    assert JobSpecFromClient(**body(prior_mode="trust")).prior_mode == "trust"
    assert JobSpec(**fields, prior_from="auto").prior_mode == "check"  # type: ignore[arg-type]
    assert JobSpec(**fields, prior_from="parent-1", prior_mode="trust")  # type: ignore[arg-type]
    sent = JobSpecFromClient(**body(prior_from="auto", prior_mode="trust"))
    assert sent.prior_mode == "trust"


def test_beta_knob_none_disables_early_stop() -> None:
    assert JobSpecFromClient(**body(beta_knob=None)).beta_knob is None


@pytest.mark.parametrize("beta", [1, 1.0, 0.5, 1e-9])
def test_a_beta_knob_that_stops_runs_cheaper_than_the_reference_is_refused(beta: float) -> None:
    """The user's `JobSpec` refuses it at once, saying what to give; the server's wire model
    takes it (a job stored with one keeps it) and the server refuses it for a new job
    (`tests/api/test_stop_settings.py`)."""
    fields = {"job_id_prefix": "job", "batch_sizes": [32, 64], "default_batch_size": 64}
    with pytest.raises(ValidationError, match=f"beta_knob={beta:g} would stop runs") as info:
        JobSpec(**fields, beta_knob=beta)  # type: ignore[arg-type]
    assert "give more than 1" in str(info.value)
    assert "or None to never stop early" in str(info.value)
    assert JobSpecFromClient(**body(beta_knob=beta)).beta_knob == beta
    assert new_job_refused(JobSpecFromClient(**body(beta_knob=beta))) is not None
    assert JobSpec(**fields, beta_knob=1.01).beta_knob == 1.01  # type: ignore[arg-type]
    assert new_job_refused(JobSpecFromClient(**body(beta_knob=None))) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("time", -1.0),
        ("energy", -0.5),
        ("time", math.nan),
        ("energy", math.inf),
        ("metric", math.nan),
    ],
)
def test_training_results_must_be_finite_and_non_negative(field: str, value: float) -> None:
    fields: dict[str, Any] = {
        "job_id": "job-1",
        "batch_size": 32,
        "trial_number": 1,
        "time": 1.0,
        "energy": 1.0,
        "metric": 0.1,
        "current_epoch": 1,
    }
    fields[field] = value
    with pytest.raises(ValidationError):
        TrainingResult(**fields)


def test_json_with_nan_literal_is_rejected() -> None:
    raw = '{"job_id": "j", "batch_size": 1, "trial_number": 1, "time": NaN, "energy": 1, '
    raw += '"metric": 1, "current_epoch": 1}'
    with pytest.raises(ValidationError):
        TrainingResult.model_validate(json.loads(raw))


def test_a_typo_in_a_job_spec_is_refused_naming_the_nearest_field() -> None:
    fields = {"job_id_prefix": "mnist", "batch_sizes": [32, 64], "default_batch_size": 32}
    with pytest.raises(ValidationError, match=r"'max_epoch' \(did you mean 'max_epochs'\?\)"):
        JobSpec(**fields, max_epoch=10)
    # The cost formula's name, which no close spelling finds.
    with pytest.raises(ValidationError, match=r"'eta' \(did you mean 'eta_knob'\?\)"):
        JobSpec(**fields, max_epochs=10, eta=0.3)
    from zeus_bso.spec import _NAMES_ELSEWHERE

    assert set(_NAMES_ELSEWHERE.values()) <= set(JobSpec.model_fields)
    assert not set(_NAMES_ELSEWHERE) & set(JobSpec.model_fields)
    with pytest.raises(ValidationError, match=r"JobSpec has no field 'zzz';"):
        JobSpec(**fields, zzz=1)
    # The server's wire model keeps ignoring what upstream clients send.
    wire = JobSpecFromClient(
        **fields, max_epoch=10, max_power=300.0, number_of_gpus=1, gpu_model="V100"
    )
    assert wire.max_epochs == JobSpec(**fields).max_epochs


@pytest.mark.parametrize(
    ("bounds", "steps", "default", "sizes"),
    [
        ((16, 256), "pow2", 64, [16, 32, 64, 128, 256]),
        ((16, 256), "pow2", 48, [16, 32, 48, 64, 128, 256]),  # the default is added
        ((20, 100), "pow2_half", 32, [24, 32, 48, 64, 96]),
        ((1, 4), "pow2_half", 1, [1, 2, 3, 4]),
    ],
)
def test_a_batch_size_range_makes_the_batch_sizes(
    bounds: tuple[int, int], steps: str, default: int, sizes: list[int]
) -> None:
    spec = JobSpec(
        job_id_prefix="r",
        batch_size_range=bounds,
        batch_size_steps=steps,  # type: ignore[arg-type]
        default_batch_size=default,
    )
    assert spec.batch_sizes == sizes
    # A registered job's config holds both, and validates again alike.
    assert JobSpec.model_validate(spec.model_dump()).batch_sizes == sizes


def test_a_range_that_makes_nothing_or_contradicts_the_sizes_is_refused() -> None:
    with pytest.raises(ValidationError, match="holds no size of its steps"):
        JobSpec(job_id_prefix="r", batch_size_range=(5, 7), default_batch_size=6)
    with pytest.raises(ValidationError, match=r"0 < min <= max"):
        JobSpec(job_id_prefix="r", batch_size_range=(64, 8), default_batch_size=8)
    with pytest.raises(ValidationError, match="give batch_sizes or batch_size_range, not both"):
        JobSpec(
            job_id_prefix="r",
            batch_sizes=[8, 16],
            batch_size_range=(8, 64),
            default_batch_size=8,
        )


def test_a_range_is_hashed_into_the_job_id_and_ids_without_one_stay() -> None:
    from zeus_bso.client import stable_job_id

    gpu = {"max_power": 300.0, "number_of_gpus": 1, "gpu_model": "A100"}
    listed = JobSpecFromClient(job_id_prefix="x", batch_sizes=[8, 16], default_batch_size=8, **gpu)
    ranged = JobSpecFromClient(
        job_id_prefix="x", batch_size_range=(8, 16), default_batch_size=8, **gpu
    )
    assert ranged.batch_sizes == listed.batch_sizes
    assert stable_job_id(ranged) != stable_job_id(listed)  # the range is part of the job
    assert stable_job_id(listed) == stable_job_id(
        JobSpecFromClient.model_validate(listed.model_dump(exclude={"batch_size_range"}))
    )


def test_differing_settings_are_the_settings_alone() -> None:
    base = JobSpecFromClient(**body()).model_dump(mode="json")
    other = {**base, "job_id": "job-1234", "gpu_model": "other", "max_power": 900.0}
    assert differing_settings(base, other) == []  # the id and the GPUs are not settings
    power = {**base, "power_profiling": False, "power_max_slowdown": 1.1}
    assert differing_settings(base, power) == []  # nor the power settings: the same job
    changed = {**base, "max_epochs": 9, "eta_knob": 1.0, "beta_knob": None}
    assert differing_settings(base, changed) == ["eta_knob", "beta_knob", "max_epochs"]
    older = {k: v for k, v in changed.items() if k != "beta_knob"}  # a setting it predates
    assert differing_settings(base, older) == ["eta_knob", "max_epochs"]


def test_differing_settings_compare_ranges_not_the_sizes_they_make() -> None:
    ranged = JobSpecFromClient(
        **body(batch_sizes=[], batch_size_range=[16, 256], default_batch_size=64)
    ).model_dump(mode="json")
    assert ranged["batch_sizes"] == [16, 32, 64, 128, 256]
    wider = {**ranged, "batch_size_range": [16, 512], "batch_sizes": [16, 32, 64, 128, 256, 512]}
    assert differing_settings(ranged, wider) == ["batch_size_range"]
    listed = {**ranged, "batch_size_range": None, "batch_sizes": [16, 64]}
    assert differing_settings(ranged, listed) == ["batch_sizes", "batch_size_range"]
