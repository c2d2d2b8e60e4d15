"""What the server keeps of accelerator memory, by hardware profile: the caps (the smallest
batch size that ran out of memory there, `zeus_bso.policy.JobState.memory_caps`) and the doubts
(the smallest that ran out although it had trained there, `JobState.memory_doubts`). The rules
are the policy's (`zeus_bso.policy.machine`); these are the units of work that store them."""

from __future__ import annotations

import logging
from collections.abc import Mapping

from sqlalchemy.engine import Connection

from zeus_bso import policy
from zeus_bso.spec import TrialId
from zeus_bso_server.errors import TrialNotFoundError
from zeus_bso_server.registration import registered, stored_trial
from zeus_bso_server.store import repository as repo
from zeus_bso_server.store.repository import StoredTrial

logger = logging.getLogger(__name__)


def release(
    conn: Connection, trial_id: TrialId, why: str | None, *, out_of_memory: bool
) -> StoredTrial:
    """Release an open trial whose run ended for a reason that is not its batch size's (``why``:
    its client's words). ``out_of_memory``: it ran out of memory while it trained at a size that
    had trained on its GPUs (`zeus_bso.policy.ran_out_where_it_fit`): that size's fit is in
    doubt there from now on. Returns the trial.

    Raises:
        JobNotFoundError, TrialNotFoundError: no such job or trial.
    """
    job_id, number = trial_id.job_id, trial_id.trial_number
    if out_of_memory:
        job, config = registered(repo.get_job(conn, job_id, lock=True), job_id)
        before = stored_trial(conn, trial_id).trial
        state = policy.ran_out_where_it_fit(config, job.state, before)
        if state.memory_doubts != job.state.memory_doubts:
            repo.set_memory_doubts(conn, job_id, dict(state.memory_doubts))
            logger.info(
                "job %s: batch size %d ran out of memory on %s although it trained there "
                "(trial %d): the next run of it there is tried first",
                job_id,
                before.batch_size,
                before.profile or "the job's first GPUs",
                number,
            )
    if repo.release_trial(conn, job_id, number, trial_id.batch_size, why) is None:
        raise TrialNotFoundError(f"Could not find the trial: {trial_id.model_dump_json()}")
    return stored_trial(conn, trial_id)


def forget_caps(
    conn: Connection, job_id: str, profile: str | None
) -> tuple[dict[str, int], dict[str, int]]:
    """Forget what the job knows of memory on ``profile`` (None: every one): its caps and its
    doubts, which the same error left (a bug of the script's, fixed since). Returns the caps
    and the doubts forgotten, by hardware profile.

    Raises:
        JobNotFoundError: no such job.
    """
    job, _ = registered(repo.get_job(conn, job_id, lock=True), job_id)
    caps = _forget(job.state.memory_caps, profile)
    if caps:
        repo.set_memory_caps(conn, job_id, _kept(job.state.memory_caps, caps))
    doubts = _forget(job.state.memory_doubts, profile)
    if doubts:
        repo.set_memory_doubts(conn, job_id, _kept(job.state.memory_doubts, doubts))
    for key, cap in caps.items():
        logger.info("job %s: the memory cap %d on %s forgotten", job_id, cap, key)
    for key, doubt in doubts.items():
        logger.info("job %s: the memory doubt %d on %s forgotten", job_id, doubt, key)
    return caps, doubts


def _forget(sizes: Mapping[str, int], profile: str | None) -> dict[str, int]:
    return {k: v for k, v in sizes.items() if profile is None or k == profile}


def _kept(sizes: Mapping[str, int], forgotten: Mapping[str, int]) -> dict[str, int]:
    return {k: v for k, v in sizes.items() if k not in forgotten}
