"""SQL of the models a job's runs trained, each known by its number of parameters, the
precision it trained in and the ways of training it used (a trial's ``model_parameters``,
``precision`` and ``techniques``, from its run's reports), on each hardware profile (where an
optimizer holds each process's part of the parameters, as DeepSpeed's ZeRO stages 1 and 2 do,
the number counted depends on the processes, which another profile's GPU count changes); and the
jobs that mix models."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, bindparam, func, select, update
from sqlalchemy.engine import Connection

from zeus_bso_server.store.repository.jobs import with_prefix
from zeus_bso_server.store.repository.rows import trials


@dataclass(frozen=True, slots=True)
class ModelRuns:
    """The runs of a job on one hardware profile that trained a model of one size in one
    precision."""

    profile: str | None
    """Their hardware profile (None: the job's first)."""
    parameters: int
    precision: str | None
    """As the framework names it (None: not said)."""
    trials: int
    first_trial: int
    last_trial: int
    techniques: str | None = None
    """The ways of training they used beside it, joined by commas (`zeus_bso.spec.Technique`;
    empty: none; None: not said)."""


_NOTE = (
    update(trials)
    .where(
        trials.c.job_id == bindparam("key_job_id"),
        trials.c.trial_number == bindparam("key_number"),
        trials.c.model_parameters.is_(None),
    )
    .values(
        model_parameters=bindparam("parameters"),
        precision=bindparam("precision"),
        techniques=bindparam("techniques"),
    )
)


_MODELS = (
    select(
        trials.c.job_id,
        trials.c.profile,
        trials.c.model_parameters,
        trials.c.precision,
        trials.c.techniques,
        func.count(),
        func.min(trials.c.trial_number),
        func.max(trials.c.trial_number),
    )
    .where(
        trials.c.job_id.in_(bindparam("job_ids", expanding=True)),
        trials.c.model_parameters.is_not(None),
    )
    .group_by(
        trials.c.job_id,
        trials.c.profile,
        trials.c.model_parameters,
        trials.c.precision,
        trials.c.techniques,
    )
    .order_by(func.min(trials.c.trial_number))
)

_CHUNK = 500
"""Jobs one query names at once (databases bound the parameters)."""


def techniques_column(techniques: Iterable[str] | None) -> str | None:
    """A report's ways of training as ``trials.techniques`` keeps them: sorted, each once,
    joined by commas (empty: none; None: not said)."""
    return None if techniques is None else ",".join(sorted(set(techniques)))


def techniques_said(column: str | None) -> list[str] | None:
    """``trials.techniques`` (`techniques_column`) as a list (None: not said)."""
    return None if column is None else [way for way in column.split(",") if way]


def note_model(
    conn: Connection,
    job_id: str,
    trial_number: int,
    parameters: int,
    precision: str | None,
    techniques: str | None = None,
) -> bool:
    """Keep the number of parameters a trial's run trained, the precision it trained in and
    the ways of training it used (joined by commas), where its row holds none yet. Returns
    whether they were kept (the first report of the trial that said them)."""
    params = {
        "key_job_id": job_id,
        "key_number": trial_number,
        "parameters": parameters,
        "precision": precision,
        "techniques": techniques,
    }
    return conn.execute(_NOTE, params).rowcount == 1


def models_of(conn: Connection, job_ids: list[str]) -> dict[str, list[ModelRuns]]:
    """The models each job's runs trained, by profile and size, the first trained first (runs
    that did not say theirs are left out), every job of ``job_ids`` a key."""
    models: dict[str, list[ModelRuns]] = {job_id: [] for job_id in job_ids}
    for start in range(0, len(job_ids), _CHUNK):
        rows = conn.execute(_MODELS, {"job_ids": job_ids[start : start + _CHUNK]})
        for job_id, profile, n, precision, techniques, count, first, last in rows:
            model = ModelRuns(
                profile, int(n), precision, int(count), int(first), int(last), techniques
            )
            models[job_id].append(model)
    return models


def jobs_mixing_models(prefix: str | None, alike: float) -> Select[Any]:
    """The ids of the jobs (whose id starts with ``prefix``) with runs on one hardware profile
    that trained other models: sizes more than ``alike`` times apart, or precisions (or ways of
    training) both said and different (as `zeus_bso_server.mixed_models` judges one job). One
    statement, to count them or to keep a list to them."""
    size = trials.c.model_parameters
    mixing = (
        with_prefix(select(trials.c.job_id).where(size.is_not(None)), prefix, trials.c.job_id)
        .group_by(trials.c.job_id, trials.c.profile)
        .having(
            (func.max(size) > alike * func.min(size))
            | (func.count(trials.c.precision.distinct()) > 1)
            | (func.count(trials.c.techniques.distinct()) > 1)
        )
        .subquery()
    )
    return select(mixing.c.job_id).distinct()


def count_jobs_mixing_models(conn: Connection, prefix: str | None, alike: float) -> int:
    """How many jobs `jobs_mixing_models` names."""
    found = jobs_mixing_models(prefix, alike).subquery()
    return int(conn.execute(select(func.count()).select_from(found)).scalar_one())
