"""A job whose runs trained other models: say so, to the run and on the job's view.

A job is known by its settings (or by the id a script gives it), not by its model: a script whose
model changed (a deeper network, another backbone) or that trains it in another precision
(``bf16-mixed`` for 32-bit) while its settings did not continues the old job, and the costs the job
learns from then mix runs that cost differently per epoch and per batch size, so its batch sizes are
judged on other runs' costs, and the sizes it learned do not fit may fit now. A run's reports say
how many parameters it trains and, from a framework's adapter, the precision and the ways of
training it uses (activation checkpointing, a compiled model: each changes what a batch size costs;
`zeus_bso.spec.TrainingResult`'s ``model_parameters``, ``precision`` and ``techniques``), which the
trial keeps; where the job's other runs on the run's hardware profile trained another model, the
run's first report is answered with a notice (`model_changed`) and the job's view says so
(`mixed_models`). Runs on one profile are compared alone
(`zeus_bso_server.store.repository.models`); sizes within `ALIKE` of each other, and a precision (or
ways of training) one of two runs did not say, are one model. Nothing the policy decides changes:
what to do (a job of its own for the new model, seeded from the old one's curve) is the user's to
choose.
"""

from __future__ import annotations

from collections.abc import Sequence

from zeus_bso_server.store.repository import ModelRuns, techniques_said

ALIKE = 1.05
"""Sizes of models at most this ratio apart are taken as one model: a vocabulary grown by a few
tokens, a bias added to a layer, cost about what the model cost before (within the noise
between runs), and a notice at every run would only teach its readers to skip it."""


def _apart(one: ModelRuns, other: ModelRuns) -> bool:
    """Whether the two are other models: sizes more than `ALIKE` apart, or precisions (or ways
    of training) both said and different."""
    sizes = max(one.parameters, other.parameters) > ALIKE * min(one.parameters, other.parameters)
    precisions = None not in (one.precision, other.precision) and one.precision != other.precision
    ways = None not in (one.techniques, other.techniques) and one.techniques != other.techniques
    return sizes or precisions or ways


def _model_words(model: ModelRuns) -> str:
    said = [model.precision] if model.precision else []
    said += technique_words(model.techniques)
    return f"{model.parameters:,} parameters" + (f" ({', '.join(said)})" if said else "")


def technique_words(techniques: str | None) -> list[str]:
    """The ways of training a trial keeps (``trials.techniques``), in words."""
    return [way.replace("_", " ") for way in techniques_said(techniques) or ()]


def _trials_words(model: ModelRuns) -> str:
    if model.trials == 1:
        return f"trial {model.first_trial}"
    span = f"{model.first_trial}-{model.last_trial}"
    if model.last_trial - model.first_trial + 1 == model.trials:
        return f"trials {span}"
    return f"{model.trials} trials of {span}"


def _each_words(models: Sequence[ModelRuns]) -> str:
    return "; ".join(f"{_model_words(m)} in {_trials_words(m)}" for m in models)


def _what_to_do(job_id: str) -> str:
    return (
        "the costs the job learns from mix runs that cost differently, so its batch sizes are "
        "judged on other runs' costs, and sizes that ran out of memory before may fit now. Give "
        "the new model a job of its own (another job_id_prefix, or job_id), started from this "
        f"job's curve with prior_from={job_id!r}"
    )


def mixed_models(job_id: str, models: Sequence[ModelRuns], first_profile: str) -> str | None:
    """Why the job's view warns of its models (`repo.models_of`), in words; None: its runs on
    each hardware profile trained one model, or did not say. ``first_profile``: the name of the
    job's first profile, which its trials leave unnamed."""
    on: dict[str | None, list[ModelRuns]] = {}
    for model in models:
        on.setdefault(model.profile, []).append(model)
    mixed = {
        profile: each
        for profile, each in on.items()
        if any(_apart(one, other) for one in each for other in each)
    }
    if not mixed:
        return None
    said = "; ".join(
        _each_words(each) if len(on) == 1 else f"on {p or first_profile}: {_each_words(each)}"
        for p, each in mixed.items()
    )
    return f"its runs trained other models ({said}): " + _what_to_do(job_id)


def model_changed(job_id: str, run: ModelRuns, models: Sequence[ModelRuns]) -> str | None:
    """What to tell the run whose first report said the model it trains (``run``: its trial,
    profile, size and precision), where the job's other runs there trained
    other models (``models``, `repo.models_of`); None: they did not."""
    others = [m for m in models if m.profile == run.profile and _apart(m, run)]
    if not others:
        return None
    return (
        f"trial {run.first_trial} of job {job_id} trains a model of {_model_words(run)}, and the "
        f"job's other runs trained other models ({_each_words(others)}): " + _what_to_do(job_id)
    )
