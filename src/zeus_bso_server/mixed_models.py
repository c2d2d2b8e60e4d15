"""A job whose runs trained models of other sizes: say so, to the run and on the job's view.

A job is known by its settings (or by the id a script gives it), not by its model: a script
whose model changed (a deeper network, another backbone) while its settings did not continues
the old job, and the costs the job learns from then mix two models that cost differently per
epoch and per batch size, so its batch sizes are judged on another model's runs, silently. A
run's reports say how many parameters it trains (`zeus_bso.spec.TrainingResult`'s
``model_parameters``), which the trial keeps; where the job's runs trained other numbers, the
run's first report is answered with a notice (`model_changed`) and the job's view says so
(`mixed_models`). Nothing the policy decides changes: what to do (a job of its own for the new
model, seeded from the old one's curve) is the user's to choose.
"""

from __future__ import annotations

from collections.abc import Sequence

from zeus_bso_server.store.repository import ModelRuns


def _trials_words(model: ModelRuns) -> str:
    if model.trials == 1:
        return f"trial {model.first_trial}"
    span = f"{model.first_trial}-{model.last_trial}"
    if model.last_trial - model.first_trial + 1 == model.trials:
        return f"trials {span}"
    return f"{model.trials} trials of {span}"


def _sizes_words(models: Sequence[ModelRuns]) -> str:
    return "; ".join(f"{m.parameters:,} parameters in {_trials_words(m)}" for m in models)


def _what_to_do(job_id: str) -> str:
    return (
        "the costs the job learns from mix models that cost differently, so its batch sizes "
        "are judged on another model's runs. Give the new model a job of its own (another "
        f"job_id_prefix, or job_id), started from this job's curve with prior_from={job_id!r}"
    )


def mixed_models(job_id: str, models: Sequence[ModelRuns]) -> str | None:
    """Why the job's view warns of its models (`repo.models_of`), in words; None: its runs
    trained one model (or did not say)."""
    if len(models) < 2:
        return None
    return f"its runs trained models of {len(models)} sizes ({_sizes_words(models)}): " + (
        _what_to_do(job_id)
    )


def model_changed(
    job_id: str, trial_number: int, parameters: int, models: Sequence[ModelRuns]
) -> str | None:
    """What to tell the run of ``trial_number`` whose first report said it trains
    ``parameters`` parameters, where the job's other runs trained models of other sizes
    (``models``, `repo.models_of`); None: they did not."""
    others = [m for m in models if m.parameters != parameters]
    if not others:
        return None
    return (
        f"trial {trial_number} of job {job_id} trains a model of {parameters:,} parameters, "
        f"and the job's other runs trained models of other sizes ({_sizes_words(others)}): "
        + _what_to_do(job_id)
    )
