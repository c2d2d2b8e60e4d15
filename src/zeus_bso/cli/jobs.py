"""``zeus-bso jobs``: the jobs of a running server, over its read API.

The server is ``--server`` (or ``ZEUS_BSO_SERVER_URL``), its token ``ZEUS_BSO_TOKEN``.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from zeus_bso.cli.job_words import print_job, totals_in_words, whose_id
from zeus_bso.cli.server_options import DEFAULT_SERVER, Server, Token, default_server_words
from zeus_bso.cli.tables import print_fitted, when
from zeus_bso.client.http import ServerClient
from zeus_bso.errors import (
    EXIT_FAILURE,
    EXIT_USAGE,
    RouteMissingError,
    ServerConnectionError,
    ServerRejectedError,
    ZeusBSOError,
)
from zeus_bso.options import token_from
from zeus_bso.spec import ESTIMATED_MODEL
from zeus_bso.units import duration_text, energy_unit, percent_text
from zeus_bso.wire.reads import JobStage, JobSummary

T = TypeVar("T")

jobs_app = typer.Typer(
    help="The jobs of a running server: list, summary, show, trials, pin, unpin, reprofile, "
    "forget-memory, delete.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()
err = Console(stderr=True, soft_wrap=True)


def _job_id(value: str) -> str:
    if not value.strip():
        raise typer.BadParameter("it is empty; `zeus-bso jobs list` shows the jobs' ids")
    return value


JobId = Annotated[str, typer.Argument(help="The job's id", callback=_job_id)]
HardwareProfile = Annotated[
    str | None,
    typer.Option(
        "--gpu",
        help="The hardware profile, as `jobs show` names it (e.g. '1xNVIDIA H200@700W'); "
        "default: every one",
    ),
]

TRIAL_COLUMNS = (
    "trial_number",
    "batch_size",
    "kind",
    "status",
    "epochs",
    "time",
    "energy",
    "metric",
    "cost",
    "converged",
)
# The trials table's headers: short, for an 80-column terminal (CSV and JSON keep the names).
TRIAL_HEADERS = {
    "trial_number": "#",
    "batch_size": "batch",
    "converged": "conv.",
}
# The list's columns, and the same in the order they are worth keeping on a narrow terminal.
LIST_COLUMNS = ("job id", "stage", "trials", "GPU", "recommended", "saved", "updated")
LIST_KEEP = ("job id", "stage", "recommended", "saved", "trials", "updated", "GPU")
COUNTED_COST = (
    "A run that stopped below the target (conv. False) shows the cost the job counts for it,"
    " which can be more than it spent: what its learning curve predicted at convergence, or its"
    " job's max_epochs at its pace, where its message says so (--format json); its time and"
    " energy are what it spent."
)
"""Under the trials table where a run did not converge: its cost column is not its spending."""

# The trials table's columns (their headers) in the order they are worth keeping on a narrow
# terminal: the figures behind the cost go first, the metric before them.
TRIALS_KEEP = (
    *("#", "batch", "kind", "status", "conv.", "cost"),
    *("epochs", "time", "energy", "metric"),
)
STAGE_PAGE = 1000
"""Jobs a request reads while ``jobs list --stage`` looks through them (the list's largest
page)."""
# How the trials table writes a column's figures for people (CSV and JSON keep the numbers).
TRIAL_FIGURES: dict[str, Any] = {"time": duration_text}
ENERGY_COLUMNS = ("energy", "cost")
"""The trials table's columns in joules, each written in one unit (`energy_unit`)."""


def _ids_starting_with(client: ServerClient, job_id: str) -> list[str]:
    """The ids of the jobs that start with ``job_id`` but are not it (one the server knows
    answered a 404 of another kind), escaped for the console; a few."""
    page, _ = client.jobs_page(job_id, limit=7)
    return [escape(job.job_id) for job in page if job.job_id != job_id]


def _ask(
    server: str,
    token: str | None,
    request: Callable[[ServerClient], T],
    job_id: str | None = None,
) -> T:
    """One request to the server; an error is printed, saying what to do, and the command exits
    with its ``exit_code`` (1: the server could not be reached or refused the request). A
    ``job_id`` the server does not know is said so, with the ids that start with it (a job's id
    is its ``job_id_prefix`` and a hash), or with where the jobs are listed."""
    sent = token_from(token) or None
    try:
        with ServerClient(server, token=sent, retry_seconds=5.0) as client:
            try:
                return request(client)
            except ServerRejectedError as error:
                if error.status != 404 or job_id is None or isinstance(error, RouteMissingError):
                    raise
                near = _ids_starting_with(client, job_id)
            if near:
                listed = ", ".join(near[:5]) + (", ..." if len(near) > 5 else "")
                err.print(
                    f"[red]error:[/] no job {escape(job_id)}; the ids that start with it: "
                    f"{listed} (zeus-bso jobs list --prefix {escape(job_id)})"
                )
            else:
                err.print(
                    f"[red]error:[/] no job {escape(job_id)} on the server at "
                    f"{escape(client.shown_url)} (zeus-bso jobs list lists its jobs)"
                )
            raise typer.Exit(EXIT_FAILURE)
    except ZeusBSOError as error:
        if isinstance(error, ServerRejectedError) and error.status == 401 and sent is None:
            err.print(
                "[red]error:[/] the server wants a token: set ZEUS_BSO_TOKEN or "
                "ZEUS_BSO_TOKEN_FILE (or --token)"
            )
        elif isinstance(error, ServerRejectedError) and error.status == 401:
            err.print(
                "[red]error:[/] the server refused the token (from --token, ZEUS_BSO_TOKEN or "
                "ZEUS_BSO_TOKEN_FILE): give it the server's ZEUS_BSO_TOKEN"
            )
        else:
            unreached = isinstance(error, ServerConnectionError)
            words = default_server_words(server) if unreached else ""
            err.print(f"[red]error:[/] {escape(str(error) + words)}")
        raise typer.Exit(error.exit_code) from error


def _number(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _figure(column: str, value: Any) -> str:
    """A trials table cell: time in its units (`TRIAL_FIGURES`), yes or no (as the dashboard
    says them), else `_number`."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    shown = TRIAL_FIGURES.get(column)
    return _number(value) if value is None or shown is None else str(shown(value))


@jobs_app.command("list")
def list_command(
    server: Server = DEFAULT_SERVER,
    token: Token = None,
    prefix: Annotated[str | None, typer.Option(help="Only ids that start with this")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    offset: Annotated[int, typer.Option(min=0)] = 0,
    stage: Annotated[
        JobStage | None,
        typer.Option(
            metavar="STAGE",
            help="Only the jobs at this stage: pruning, bandit, blocked (their next run is "
            "refused) or pinned; --limit and --offset then count those",
        ),
    ] = None,
    not_learning: Annotated[
        bool,
        typer.Option(
            "--not-learning",
            help="Only the jobs that learn nothing now: their newest ended runs, three or "
            "more, were all released",
        ),
    ] = False,
    mixed_models: Annotated[
        bool,
        typer.Option(
            "--mixed-models",
            help="Only the jobs whose runs on one hardware profile trained other models "
            "(another size, precision or way of training)",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table")] = False,
) -> None:
    """The registered jobs, ordered by id."""
    only = {"not_learning": not_learning, "mixed_models": mixed_models}

    def page(client: ServerClient) -> tuple[tuple[list[JobSummary], list[str]], bool]:
        if stage is not None:
            return _at_stage(client, prefix, stage, limit, offset, only)
        found = client.jobs_page(prefix, limit, offset, **only)
        full = len(found[0]) + len(found[1]) >= limit  # the unreadable are left out of a page
        return found, full and any(client.jobs_page(prefix, 1, offset + limit, **only))

    (jobs, unreadable), more = _ask(server, token, page)
    beyond = f"more jobs than these {limit}: --offset {offset + limit} shows the next page"
    if unreadable:
        err.print(
            escape(
                f"left out: {len(unreadable)} job(s) whose stored state the server cannot read "
                f"({', '.join(unreadable)}); `zeus-bso jobs show JOB` says what to do"
            )
        )
    if as_json:
        typer.echo(json.dumps([job.model_dump(mode="json") for job in jobs], indent=2))
        if more:
            err.print(beyond)
        return
    rows = []
    for job in jobs:
        gpu = f"{job.number_of_gpus} x {job.gpu_model}"
        if job.gpu_model == ESTIMATED_MODEL:
            gpu = "none measured"
        recommended, savings = job.recommended, job.savings
        rows.append(
            [
                escape(job.job_id),
                job.stage.value
                + (", not learning" if job.not_learning else "")
                + (", mixed models" if job.mixed_models else ""),
                str(job.trials),
                escape(gpu),
                str(recommended.batch_size) if recommended else "-",
                f"{percent_text(100 * savings.fraction)}%" if savings else "-",  # vs default
                when(job.updated_at),
            ]
        )
    # The id is what `show` takes: whole, on one line. No cell is folded ("band/it") or cut
    # ("pruni…"): where the terminal is too narrow, the columns least needed are left out.
    print_fitted(console, LIST_COLUMNS, rows, LIST_KEEP, err=err, hint="--json has them all")
    if more:  # after the table, whose end is what a terminal shows
        err.print(beyond)
    if not jobs:
        at = f" at stage {stage.value}" if stage is not None else ""
        which = " and ".join(
            words
            for words, kept in (("learn nothing now", not_learning), ("mix models", mixed_models))
            if kept
        )
        err.print(escape("no jobs" + (f" that {which}" if which else "") + at + whose_id(prefix)))


def _at_stage(
    client: ServerClient,
    prefix: str | None,
    stage: JobStage,
    limit: int,
    offset: int,
    only: dict[str, bool],
) -> tuple[tuple[list[JobSummary], list[str]], bool]:
    """The page ``limit`` and ``offset`` say of the jobs at ``stage`` (whose id starts with
    ``prefix``), the ids the server cannot read, and whether more follow: every page of the
    job list is read (a stage is the policy's reading of each job, which the list cannot be
    asked for)."""
    matching: list[JobSummary] = []
    unreadable: list[str] = []
    start = 0
    while True:
        found, unread = client.jobs_page(prefix, STAGE_PAGE, start, **only)
        matching += [job for job in found if job.stage is stage]
        unreadable += unread
        if len(found) + len(unread) < STAGE_PAGE:
            break
        start += STAGE_PAGE
    return (matching[offset : offset + limit], unreadable), len(matching) > offset + limit


@jobs_app.command("summary")
def summary_command(
    server: Server = DEFAULT_SERVER,
    token: Token = None,
    prefix: Annotated[str | None, typer.Option(help="Only ids that start with this")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of words")] = False,
) -> None:
    """Every job's spending and savings together (the dashboard's totals)."""
    totals = _ask(server, token, lambda client: client.summary(prefix))
    if as_json:
        typer.echo(json.dumps(totals.model_dump(mode="json"), indent=2))
        return
    typer.echo(totals_in_words(totals, prefix))


@jobs_app.command("show")
def show_command(
    job_id: JobId,
    server: Server = DEFAULT_SERVER,
    token: Token = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of tables")] = False,
) -> None:
    """A job: its settings, stage, recommended batch size, savings and batch sizes."""
    state = _ask(server, token, lambda client: client.job(job_id, limit=0), job_id)
    if as_json:
        typer.echo(json.dumps(state.model_dump(mode="json"), indent=2))
        return
    print_job(console, state)


@jobs_app.command("trials")
def trials_command(
    job_id: JobId,
    server: Server = DEFAULT_SERVER,
    token: Token = None,
    output: Annotated[
        str, typer.Option("--format", help="table, csv or json", case_sensitive=False)
    ] = "table",
) -> None:
    """Every trial of a job, oldest first."""
    if output.lower() not in ("table", "csv", "json"):
        err.print(f"[red]error:[/] --format is table, csv or json, not {escape(repr(output))}")
        raise typer.Exit(EXIT_USAGE)
    trials = [
        t.model_dump(mode="json") for t in _ask(server, token, lambda c: c.trials(job_id), job_id)
    ]
    if output.lower() == "json":
        typer.echo(json.dumps(trials, indent=2))
    elif output.lower() == "csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, TRIAL_COLUMNS, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows(trials)
        typer.echo(buffer.getvalue(), nl=False)
    else:
        headers = [TRIAL_HEADERS.get(c, c) for c in TRIAL_COLUMNS]
        # Energy and cost each in one unit down their column (`energy_unit`).
        units = {c: energy_unit(t[c] for t in trials) for c in TRIAL_COLUMNS if c in ENERGY_COLUMNS}
        rows = [
            [units[c](t[c]) if c in units else _figure(c, t[c]) for c in TRIAL_COLUMNS]
            for t in trials
        ]
        hint = "--format csv or json has them all"
        print_fitted(console, headers, rows, TRIALS_KEEP, err=err, hint=hint)
        if any(t["status"] == "reported" and t["converged"] is False for t in trials):
            console.print(COUNTED_COST, highlight=False, soft_wrap=False)


@jobs_app.command(
    "pin",
    short_help="Pin a job to one batch size, for runs that must deliver a model (a release week).",
)
def pin_command(
    job_id: JobId,
    batch_size: Annotated[
        int | None,
        typer.Argument(help="The batch size every run gets (default: the recommended one)"),
    ] = None,
    server: Server = DEFAULT_SERVER,
    token: Token = None,
) -> None:
    """Pin a job for runs that must deliver a model (a release week): every run gets the batch
    size and nothing is explored; its runs stop only at the target or max_epochs. Pinned runs
    still report, so learning goes on after `unpin`."""
    size = _ask(server, token, lambda client: client.pin(job_id, batch_size), job_id)
    console.print(f"pinned {escape(job_id)} to batch size {size}")


@jobs_app.command("unpin")
def unpin_command(
    job_id: JobId,
    server: Server = DEFAULT_SERVER,
    token: Token = None,
) -> None:
    """Unpin a job: the optimizer chooses its runs' batch sizes again."""
    _ask(server, token, lambda client: client.unpin(job_id), job_id)
    console.print(f"unpinned {escape(job_id)}")


@jobs_app.command(
    "reprofile",
    short_help="Forget a job's power profiles: the next runs profile the GPUs' limits again.",
)
def reprofile_command(
    job_id: JobId,
    gpu: HardwareProfile = None,
    batch_size: Annotated[
        int | None,
        typer.Option("--batch-size", min=1, help="The batch size (default: every one)"),
    ] = None,
    server: Server = DEFAULT_SERVER,
    token: Token = None,
) -> None:
    """Forget a job's power profiles (power_limit="optimize"), so that the next run at each of
    those batch sizes on those GPUs profiles the limits again: for a profile measured badly (a
    run warned that its profile is coarse), or GPUs whose power curve changed (a new driver,
    other cooling). Runs that train at a limit now keep it."""
    forgotten = _ask(
        server,
        token,
        lambda client: client.forget_power_profiles(job_id, gpu, batch_size),
        job_id,
    )
    if not forgotten:
        console.print(f"{escape(job_id)} has no power profile to forget there")
        return
    for each in forgotten:
        console.print(
            f"forgot the power profile of batch size {each['batch_size']} on "
            f"{escape(each['profile'])}"
        )
    console.print("the next run at each profiles its power limits again")


@jobs_app.command(
    "forget-memory",
    short_help="Forget a job's memory caps and doubts: runs get every batch size again.",
)
def forget_memory_command(
    job_id: JobId,
    gpu: HardwareProfile = None,
    server: Server = DEFAULT_SERVER,
    token: Token = None,
) -> None:
    """Forget a job's memory caps and doubts, so that runs on those GPUs are dispatched at every
    batch size again, and the sizes that trained there are taken to fit (the next that runs out
    of memory sets the cap anew): for an out-of-memory error that was a bug of the script's,
    fixed since. The trials that ran out stay in the history."""
    forgot = _ask(server, token, lambda client: client.forget_memory_caps(job_id, gpu), job_id)
    if not forgot.forgotten and not forgot.forgotten_doubts:
        console.print(f"{escape(job_id)} has no memory cap or doubt to forget there")
        return
    for profile, cap in forgot.forgotten.items():
        console.print(f"forgot the memory cap of {escape(profile)} ({cap} and above)")
    for profile, doubt in forgot.forgotten_doubts.items():
        console.print(
            f"forgot the memory doubt of {escape(profile)} ({doubt} and above: the sizes that "
            "trained there fit again)"
        )
    console.print("runs there get every batch size again")


@jobs_app.command("delete")
def delete_command(
    job_id: JobId,
    server: Server = DEFAULT_SERVER,
    token: Token = None,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for confirmation")] = False,
) -> None:
    """Delete a job with all its trials (what it learned is lost)."""
    if not yes:
        state = _ask(server, token, lambda client: client.job(job_id, limit=0), job_id)
        running = state.trials_by_status.get("dispatched", 0)
        question = f"Delete job {job_id} and all its trials?"
        if running:  # each trains on without the server (`JobConversation.lost_trial`)
            question = (
                f"Job {job_id} has {running} run{'s' if running != 1 else ''} in progress, "
                "which would train on without the server, reporting nothing. " + question
            )
        if not typer.confirm(question):
            raise typer.Exit(1)
    _ask(server, token, lambda client: client.delete_job(job_id), job_id)
    console.print(f"deleted {escape(job_id)}")
