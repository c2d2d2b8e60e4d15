"""A job whose runs trained models of other sizes: say so, to the run and on the job's view.

A job is known by its settings (or by the id a script gives it), not by its model: a script
whose model changed (a deeper network, another backbone) while its settings did not continues
the old job, and the costs the job learns from then mix two models that cost differently per
epoch and per batch size, so its batch sizes are judged on another model's runs, silently. A
run's reports say how many parameters it trains (`zeus_bso.spec.TrainingResult`'s
``model_parameters``), which the trial keeps; where the job's other runs on the run's hardware
profile trained other numbers, the run's first report is answered with a notice
(`model_changed`) and the job's view says so (`mixed_models`). Runs on one profile are compared
alone (`zeus_bso_server.store.repository.models`), and sizes within `ALIKE` of each other are
one model. Nothing the policy decides changes: what to do (a job of its own for the new model,
seeded from the old one's curve) is the user's to choose.
"""

from __future__ import annotations

from collections.abc import Sequence

from zeus_bso_server.store.repository import ModelRuns

ALIKE = 1.05
"""Sizes of models at most this ratio apart are taken as one model: a vocabulary grown by a few
tokens, a bias added to a layer, cost about what the model cost before (within the noise
between runs), and a notice at every run would only teach its readers to skip it."""


def _apart(one: int, other: int) -> bool:
    return max(one, other) > ALIKE * min(one, other)


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


def mixed_models(job_id: str, models: Sequence[ModelRuns], first_profile: str) -> str | None:
    """Why the job's view warns of its models (`repo.models_of`), in words; None: its runs on
    each hardware profile trained one model (sizes within `ALIKE`), or did not say.
    ``first_profile``: the name of the job's first profile, which its trials leave unnamed."""
    on: dict[str | None, list[ModelRuns]] = {}
    for model in models:
        on.setdefault(model.profile, []).append(model)
    mixed = {
        profile: each
        for profile, each in on.items()
        if _apart(max(m.parameters for m in each), min(m.parameters for m in each))
    }
    if not mixed:
        return None
    sizes = max(len(each) for each in mixed.values())
    said = "; ".join(
        _sizes_words(each) if len(on) == 1 else f"on {p or first_profile}: {_sizes_words(each)}"
        for p, each in mixed.items()
    )
    return f"its runs trained models of {sizes} sizes ({said}): " + _what_to_do(job_id)


def model_changed(
    job_id: str,
    trial_number: int,
    parameters: int,
    profile: str | None,
    models: Sequence[ModelRuns],
) -> str | None:
    """What to tell the run of ``trial_number`` on ``profile`` whose first report said it
    trains ``parameters`` parameters, where the job's other runs there trained models of sizes
    more than `ALIKE` apart from it (``models``, `repo.models_of`); None: they did not."""
    others = [m for m in models if m.profile == profile and _apart(m.parameters, parameters)]
    if not others:
        return None
    return (
        f"trial {trial_number} of job {job_id} trains a model of {parameters:,} parameters, "
        f"and the job's other runs trained models of other sizes ({_sizes_words(others)}): "
        + _what_to_do(job_id)
    )
