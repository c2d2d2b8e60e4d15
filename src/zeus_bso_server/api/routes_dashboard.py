"""The dashboard: HTML pages of the jobs, and of one job's batch sizes, posterior and trials.

Read-only, server-rendered (Jinja2, autoescaped), no scripts. With a token set, a browser signs
in with HTTP Basic auth: any user name, the token as the password (see `auth`).
"""

from __future__ import annotations

import functools
from datetime import UTC, datetime
from importlib.resources import files
from typing import Annotated, Any
from urllib.parse import quote

import jinja2
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from starlette.datastructures import URL

from zeus_bso.spec import (
    ESTIMATED_MODEL,
    INT32_MAX,
    MAX_ID_LENGTH,
    Printable,
    hardware_words,
    profile_words,
)
from zeus_bso.units import percent_text
from zeus_bso_server.api.charts import (
    cost_chart,
    duration,
    energy,
    message,
    number,
    sparkline,
)
from zeus_bso_server.api.deps import Db
from zeus_bso_server.api.docs_pages import DOCS_URL
from zeus_bso_server.errors import JobNotFoundError, UnreadableJobError
from zeus_bso_server.queries import fleet_summary, job_summaries, job_view

router = APIRouter(include_in_schema=False)

PAGE_SIZE = 50
"""Jobs per page of the list."""
TRIALS_SHOWN = 100
"""Trials per page of a job."""


@functools.cache
def templates() -> Jinja2Templates:
    """The page templates (built on first use: nothing happens at import)."""
    pages = Jinja2Templates(directory=str(files("zeus_bso_server.api") / "templates"))
    pages.env.filters["utc"] = _utc
    pages.env.filters["number"] = number
    pages.env.filters["message"] = message
    pages.env.filters["percent"] = percent_text
    pages.env.filters["profile"] = profile_words
    pages.env.filters["energy"] = energy
    pages.env.filters["duration"] = duration
    pages.env.filters["sparkline"] = sparkline
    pages.env.globals["job_url"] = job_url
    pages.env.globals["estimated_model"] = ESTIMATED_MODEL
    pages.env.globals["hardware_words"] = hardware_words
    pages.env.globals["url_for"] = _path_for_template  # paths, never the Host header's name
    pages.env.globals["api_docs_url"] = _api_docs_url
    return pages


def path_for(request: Request, name: str) -> str:
    """The path of a route (below the app's root path), never an absolute URL: the ``Host``
    header, which any client can set, is not echoed into redirects or links."""
    root: str = request.scope.get("root_path", "")
    return root + str(request.app.url_path_for(name))


@jinja2.pass_context
def _path_for_template(context: dict[str, Any], name: str) -> str:
    return path_for(context["request"], name)


@jinja2.pass_context
def _api_docs_url(context: dict[str, Any]) -> str:
    return str(context["request"].scope.get("root_path", "")) + DOCS_URL


def _utc(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M:%S")


def job_url(request: Request, job_id: str) -> str:
    """The address of a job's page, its id percent-encoded whole (``/`` and ``?`` included)."""
    return f"{path_for(request, 'dashboard_jobs')}/jobs/{quote(job_id, safe='')}"


@router.get("/")
@router.get("/dashboard/jobs")
@router.get("/dashboard/jobs/")
async def root(request: Request) -> RedirectResponse:
    """The dashboard is the home page, and the list of jobs is where a job's address without
    the job leads (it answered a JSON validation error)."""
    return RedirectResponse(path_for(request, "dashboard_jobs"), status_code=307)


@router.get("/dashboard", response_class=HTMLResponse, name="dashboard_jobs")
async def jobs_page(
    request: Request,
    db: Db,
    prefix: Annotated[Annotated[str, Printable] | None, Query(max_length=MAX_ID_LENGTH)] = None,
    offset: Annotated[int, Query(ge=0, le=INT32_MAX)] = 0,
    not_learning: bool = False,
    mixed_models: bool = False,
) -> Response:
    """Registered jobs, by id, a page at a time; ``prefix`` keeps those whose id starts with
    it, ``not_learning`` those that learn nothing now, ``mixed_models`` those whose runs
    trained other models."""
    found = await job_summaries(
        db, prefix or None, PAGE_SIZE + 1, offset, not_learning, mixed_models
    )
    fleet = await fleet_summary(db, prefix or None)
    base = URL(path_for(request, "dashboard_jobs"))
    which = " and ".join(
        words
        for words, kept in (("learn nothing now", not_learning), ("mix models", mixed_models))
        if kept
    )

    def page_url(
        start: int, only_not_learning: bool = not_learning, only_mixed: bool = mixed_models
    ) -> str:
        query = {
            "offset": str(max(start, 0)),
            **({"prefix": prefix} if prefix else {}),
            **({"not_learning": "true"} if only_not_learning else {}),
            **({"mixed_models": "true"} if only_mixed else {}),
        }
        return str(base.include_query_params(**query))

    return templates().TemplateResponse(
        request,
        "jobs.html",
        {
            "jobs": found.jobs[:PAGE_SIZE],
            "unreadable": found.unreadable,
            "fleet": fleet,
            "more": len(found.jobs) + len(found.unreadable) > PAGE_SIZE,
            "prefix": prefix,
            "not_learning": not_learning,
            "mixed_models": mixed_models,
            "which": f"that {which}" if which else "",
            "offset": offset,
            "page_size": PAGE_SIZE,
            "page_url": page_url,
        },
    )


@router.get("/dashboard/jobs/{job_id:path}", response_class=HTMLResponse, name="dashboard_job")
async def job_page(
    request: Request,
    db: Db,
    job_id: Annotated[str, Path(min_length=1, max_length=MAX_ID_LENGTH), Printable],
    before: Annotated[int | None, Query(ge=1, le=INT32_MAX)] = None,
) -> Response:
    """One job: its settings, batch sizes with their statistics and posterior, and trials."""
    try:
        state = await job_view(db, job_id, TRIALS_SHOWN, before)
    except JobNotFoundError:
        return templates().TemplateResponse(
            request, "missing.html", {"job_id": job_id}, status_code=404
        )
    except UnreadableJobError as err:
        return templates().TemplateResponse(
            request,
            "unreadable.html",
            {"job_id": job_id, "message": err.message},
            status_code=500,
        )
    costs = [b.mean_cost for b in state.batch_sizes if b.mean_cost is not None]
    levels = {}
    default = state.job.default_batch_size
    default_cost = next((b.mean_cost for b in state.batch_sizes if b.batch_size == default), None)
    if default_cost is not None:
        levels["default"] = (default, default_cost)
    if state.recommended is not None:
        recommended = state.recommended.batch_size
        name = "default, recommended" if recommended == default else "recommended"
        levels[name] = (recommended, state.recommended.expected_cost)
    oldest = state.trials[-1].trial_number if state.trials else None
    older = (
        str(URL(job_url(request, job_id)).include_query_params(before=oldest))
        if oldest is not None and oldest > 1
        else None
    )
    return templates().TemplateResponse(
        request,
        "job.html",
        {
            "state": state,
            "max_cost": max(costs) if costs else None,
            "chart": cost_chart(state.trials, levels),
            "older": older,
        },
    )
