"""`ReadApi`: the routes that read and administer jobs (``GET /api/jobs``, a job's view and
its trials, the fleet's summary, pinning, forgetting profiles and caps, deleting), which
`zeus-bso jobs` and a run's closing line use; `zeus_bso.client.http.ServerClient` has them
beside the protocol's. Their answers are read as the wire's read models
(`zeus_bso.wire.reads`), loaded with the first read, not with every training script."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx
from pydantic import TypeAdapter, ValidationError

from zeus_bso.errors import UnexpectedAnswerError

if TYPE_CHECKING:
    from zeus_bso.wire.reads import (
        FleetSummary,
        ForgottenMemoryCaps,
        JobSummary,
        JobView,
        TrialView,
    )


class ReadApi:
    """The read and administration routes, over a client's `_request`."""

    def _request(
        self,
        method: str,
        path: str,
        *,
        idempotent: bool | None = None,
        patience: float | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """Send a request, with the client's retries and errors (`ServerClient`'s)."""
        raise NotImplementedError

    def delete_job(self, job_id: str) -> None:
        """Delete a job and its history."""
        self._request("DELETE", "/jobs", params={"job_id": job_id})

    def list_jobs(
        self,
        prefix: str | None = None,
        limit: int = 100,
        offset: int = 0,
        not_learning: bool = False,
        mixed_models: bool = False,
    ) -> list[JobSummary]:
        """Registered jobs ordered by id (``GET /api/jobs``), a page at a time; with
        ``not_learning``, only those that learn nothing now (`JobSummary.not_learning`); with
        ``mixed_models``, only those whose runs trained other models
        (`JobSummary.mixed_models`)."""
        return self.jobs_page(prefix, limit, offset, not_learning, mixed_models)[0]

    def jobs_page(
        self,
        prefix: str | None = None,
        limit: int = 100,
        offset: int = 0,
        not_learning: bool = False,
        mixed_models: bool = False,
    ) -> tuple[list[JobSummary], list[str]]:
        """A page of `list_jobs`, and the ids of its jobs whose stored state the server cannot
        read (left out of the page: its ``Zeus-BSO-Unreadable-Jobs`` header)."""
        from zeus_bso.wire.reads import JobSummary

        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if prefix:
            params["prefix"] = prefix
        if not_learning:
            params["not_learning"] = "true"
        if mixed_models:
            params["mixed_models"] = "true"
        response = self._request("GET", "/api/jobs", params=params)
        unreadable = response.headers.get("Zeus-BSO-Unreadable-Jobs", "")
        jobs: list[JobSummary] = read_answer(list[JobSummary], response.json(), "GET /api/jobs")
        # A server that predates a filter lists every job.
        if not_learning:
            jobs = [job for job in jobs if job.not_learning]
        if mixed_models:
            jobs = [job for job in jobs if job.mixed_models]
        return jobs, [i for i in unreadable.split(",") if i]

    def summary(self, prefix: str | None = None) -> FleetSummary:
        """Every job's spending and savings together, or those of the jobs whose id starts with
        ``prefix`` (``GET /api/summary``)."""
        from zeus_bso.wire.reads import FleetSummary

        params = {"prefix": prefix} if prefix else {}
        answer = self._request("GET", "/api/summary", params=params).json()
        summary: FleetSummary = read_answer(FleetSummary, answer, "GET /api/summary")
        return summary

    def trials(self, job_id: str) -> list[TrialView]:
        """Every trial of a job, oldest first (``GET /api/jobs/{job_id}``, page by page).

        Raises:
            UnexpectedAnswerError: a page is not a job's view (another version's server).
        """
        found: list[TrialView] = []
        before: int | None = None
        while True:
            page = self._job_page(job_id, 1000, before).trials
            found.extend(page)
            if len(page) < 1000:
                return sorted(found, key=lambda trial: trial.trial_number)
            before = min(trial.trial_number for trial in page)

    def pin(self, job_id: str, batch_size: int | None = None) -> int:
        """Pin the job to ``batch_size`` (None: the one recommended now); returns it."""
        path = f"/api/jobs/{quote(job_id, safe='')}/pin"
        response = self._request("PUT", path, json={"batch_size": batch_size})
        return int(response.json()["batch_size"])

    def unpin(self, job_id: str) -> None:
        """Unpin the job: the optimizer chooses its runs' batch sizes again."""
        self._request("DELETE", f"/api/jobs/{quote(job_id, safe='')}/pin")

    def forget_power_profiles(
        self, job_id: str, profile: str | None = None, batch_size: int | None = None
    ) -> list[dict[str, Any]]:
        """Forget the job's power profiles on ``profile`` of ``batch_size`` (None: every one);
        the next run at each of those sizes on those GPUs profiles again. Returns those
        forgotten (``profile``, ``batch_size``)."""
        path = f"/api/jobs/{quote(job_id, safe='')}/power_profiles"
        params = {"profile": profile, "batch_size": batch_size}
        response = self._request(
            "DELETE", path, params={k: v for k, v in params.items() if v is not None}
        )
        return list(response.json()["forgotten"])

    def forget_memory_caps(self, job_id: str, profile: str | None = None) -> ForgottenMemoryCaps:
        """Forget the job's memory cap and doubt on ``profile`` (None: every one): runs there
        get every batch size again. Returns what was forgotten."""
        from zeus_bso.wire.reads import ForgottenMemoryCaps

        path = f"/api/jobs/{quote(job_id, safe='')}/memory_caps"
        params = {"profile": profile} if profile is not None else {}
        answer = self._request("DELETE", path, params=params).json()
        forgotten: ForgottenMemoryCaps = read_answer(ForgottenMemoryCaps, answer, f"DELETE {path}")
        return forgotten

    def job(self, job_id: str, limit: int = 50, patience: float | None = None) -> JobView:
        """Everything the server knows of a job, with its latest ``limit`` trials (zeus-bso
        servers only; ``patience``: the most seconds to wait, where less than the client's own).

        Raises:
            UnexpectedAnswerError: the answer is not a job's view (another version's server).
        """
        return self._job_page(job_id, limit, patience=patience)

    def job_state(self, job_id: str, limit: int = 50) -> dict[str, Any]:
        """`job`'s answer as the server sent it, unread: JSON for a tool that passes it on."""
        return dict(self._job_answer(job_id, {"limit": limit}))

    def _job_answer(
        self, job_id: str, params: dict[str, Any], patience: float | None = None
    ) -> Any:
        path = f"/api/jobs/{quote(job_id, safe='')}"
        return self._request("GET", path, params=params, patience=patience).json()

    def _job_page(
        self, job_id: str, limit: int, before: int | None = None, patience: float | None = None
    ) -> JobView:
        """A job's view with its ``limit`` trials before trial ``before`` (None: the latest)."""
        from zeus_bso.wire.reads import JobView

        params: dict[str, Any] = {"limit": limit}
        if before is not None:
            params["before"] = before
        answer = self._job_answer(job_id, params, patience)
        view: JobView = read_answer(JobView, answer, f"GET /api/jobs/{job_id}")
        return view


def read_answer(model: Any, answer: Any, request: str) -> Any:
    """``answer`` read as ``model`` (a read route's, `zeus_bso.wire.reads`, or a list of one).

    Raises:
        UnexpectedAnswerError: it is not one (another version's server, or not a zeus-bso one).
    """
    try:
        return _adapter(model).validate_python(answer)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the answer"
        raise UnexpectedAnswerError(
            f"{request} answered what this client does not read ({where}: {first['msg']}): "
            "is the server a zeus-bso server of this version? Upgrade the older of the two"
        ) from None


@functools.cache
def _adapter(model: Any) -> TypeAdapter[Any]:
    return TypeAdapter(model)
