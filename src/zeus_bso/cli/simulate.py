"""``zeus-bso simulate``: the optimizer's decisions, and their cost against the oracle's, on the
measured traces of the Zeus paper (`zeus_bso.sim`), in this process or against a server."""

from __future__ import annotations

import contextlib
import inspect
import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from typer.core import TyperCommand

from zeus_bso.cli.server_options import server_url_option
from zeus_bso.cli.simulate_tables import print_out_of_memory, print_power, print_summaries
from zeus_bso.errors import (
    EXIT_FAILURE,
    EXIT_USAGE,
    ConfigurationError,
    ServerRejectedError,
    ZeusBSOError,
)
from zeus_bso.policy.types import PriorMode
from zeus_bso.sim import GPUS, WORKLOADS, in_process, job_spec, load_trace_job, simulate
from zeus_bso.sim.parents import ParentCurve, parent_curve
from zeus_bso.sim.report import (
    Summary,
    seed_result,
    summarize,
)
from zeus_bso.sim.trace import TraceJob, read_power_trace
from zeus_bso.spec import (
    NOT_UPSTREAM,
    UPSTREAM_OPTIONS,
    JobSpec,
    early_stop_refused,
    policy_options,
)

console = Console()
err = Console(stderr=True, soft_wrap=True)


def _server_url_if_given(value: str | None) -> str | None:
    return None if value is None else server_url_option(value)


def simulate_command(
    workload: Annotated[
        str, typer.Option(help=f"One of {', '.join(WORKLOADS)}, or 'all'")
    ] = "cifar100",
    gpu: Annotated[str, typer.Option(help=f"GPU trace: {', '.join(GPUS)}")] = "v100",
    recurrences: Annotated[int, typer.Option(min=1, max=10_000)] = 50,
    seeds: Annotated[
        list[int] | None, typer.Option(help="Seeds, e.g. --seeds 0 1 2 3 4 [default: 0 1 2 3 4]")
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            help="Run against this zeus-bso server instead of in-process",
            callback=_server_url_if_given,
        ),
    ] = None,
    keep_jobs: Annotated[
        bool,
        typer.Option(
            help="With --server: keep the simulated jobs there (their ids are printed), to look"
            " at them in the dashboard or with `zeus-bso jobs`; they count in its fleet's"
            " totals, so use a server of their own. Otherwise each is deleted after its seed"
        ),
    ] = False,
    plot: Annotated[Path | None, typer.Option(help="Write a PNG of cumulative cost")] = None,
    json_path: Annotated[
        Path | None, typer.Option("--json", help="Write the results as JSON")
    ] = None,
    upstream: Annotated[
        bool, typer.Option(help="Start from upstream Zeus 0.16's policy options")
    ] = False,
    memory_cap: Annotated[
        str | None,
        typer.Option(
            help="The smallest batch size that runs out of memory on the GPU (e.g. 2048, or 4x: "
            "four times each workload's default): runs at or above it fail at their first step "
            "(infeasible); the oracle is the cheapest size below it",
        ),
    ] = None,
    accumulate: Annotated[
        bool,
        typer.Option(
            help="With --memory-cap: runs accumulate gradients, so sizes from the cap on train "
            "in micro-batches below it (at the micro-batch's speed) instead of being infeasible"
        ),
    ] = False,
    power_limits: Annotated[
        bool,
        typer.Option(
            help="Each batch size's first run profiles the GPU's power limits in its first "
            "epoch (paid at their mean) and trains at the cheapest after; never at eta 0"
        ),
    ] = False,
    power_trace: Annotated[
        Path | None,
        typer.Option(
            help="A power trace of your own GPUs, in the shipped one's columns (dataset, "
            "network, batch_size, optimizer, power_limit, time_per_epoch, average_power)"
        ),
    ] = None,
    pace_noise: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=2.0,
            help="A loaded or shared machine: each run's epochs take exp(N(0, this)) times the "
            "trace's (0.2: a run often 20% off its batch size's pace)",
        ),
    ] = 0.0,
    data_growth: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Data that grows between recurrences: recurrence t's epochs take (1 + this)^t "
            "times the trace's (0.01: 1% more a recurrence); costs are shown at the first "
            "recurrence's data, so regret measures the decisions",
        ),
    ] = 0.0,
    parent: Annotated[
        str | None,
        typer.Option(
            help="Seed each new job with a related job's learned curve: 'self' (the workload's "
            "own, with --parent-sigma or --parent-shift) or another workload (a wrong prior)",
        ),
    ] = None,
    parent_mode: Annotated[
        str,
        typer.Option(
            help="check: the default runs first and is held against the parent's; trust: the "
            "parent's best runs first (a declared parent)",
        ),
    ] = "check",
    parent_sigma: Annotated[
        float,
        typer.Option(
            min=0.0, max=2.0, help="The parent's costs drawn around the truth: lognormal spread"
        ),
    ] = 0.0,
    parent_shift: Annotated[
        int,
        typer.Option(
            min=-3,
            max=3,
            help="The parent's costs (its optimum with them) moved by this many sizes, toward"
            " the smaller ones where positive (each size is said to cost what the next larger"
            " one does), in every seed alike (benchmarks/regret_priors.py's shifted parent"
            " alternates +1 and -1 by seed)",
        ),
    ] = 0,
    **given: Any,
) -> None:
    """Simulate recurrences of a trace workload and compare with the oracle and the default.

    Every policy option of a job is a flag (generated from `zeus_bso.spec.policy_options`)."""
    options: dict[str, Any] = dict(UPSTREAM_OPTIONS) if upstream else {}
    try:
        options.update(_policy_option_values(given))
    except ConfigurationError as error:
        _error(str(error))
        raise typer.Exit(code=error.exit_code) from None
    names = list(WORKLOADS) if workload == "all" else [workload]
    seed_list = seeds if seeds else [0, 1, 2, 3, 4]
    try:
        _check_outputs(json_path, plot)  # before the simulation, which may take minutes
        if accumulate and memory_cap is None:
            raise ConfigurationError("--accumulate needs --memory-cap: without one every size fits")
        if power_limits and memory_cap is not None:
            raise ConfigurationError("--power-limits and --memory-cap are simulated one at a time")
        if keep_jobs and server is None:
            raise ConfigurationError("--keep-jobs needs --server: in-process jobs end with it")
        simulated = SimulatedGpu(
            memory_cap,
            accumulate,
            power_limits,
            read_power_trace(str(power_trace)) if power_trace is not None else None,
            pace_noise,
            _parent(parent, parent_mode, parent_sigma, parent_shift),
            keep_jobs,
            data_growth,
        )
        summaries = [
            _simulate_one(name, gpu, recurrences, seed_list, options, server, simulated)
            for name in names
        ]
    except (ZeusBSOError, ValueError) as error:  # ValueError: a job the options make invalid
        _error(str(error))
        raise typer.Exit(code=getattr(error, "exit_code", EXIT_USAGE)) from None
    print_summaries(console, summaries)
    if data_growth:
        console.print(
            f"--data-growth {data_growth:g}: recurrence t's epochs cost {1 + data_growth:g}^t "
            "times the trace's; every cost and regret above is counted at the first "
            "recurrence's data"
        )
    if memory_cap is not None:
        print_out_of_memory(console, summaries)
    if power_limits:
        print_power(console, summaries)
    try:
        if json_path is not None:
            results = [s.to_dict() for s in summaries]
            json_path.write_text(json.dumps({"options": options, "results": results}, indent=2))
            console.print(escape(f"wrote {json_path}"))
        if plot is not None:
            from zeus_bso.sim.plot import plot_cumulative

            plot_cumulative(summaries, plot)
            console.print(escape(f"wrote {plot}"))
    except OSError as error:
        _error(f"cannot write {error.filename}: {error.strerror}")
        raise typer.Exit(code=EXIT_FAILURE) from None


def _error(message: str) -> None:
    """``message`` on standard error after a red "error:", as written (no markup: a package's
    extra, ``zeus-bso[plot]``, is not a style)."""
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False)


def _check_outputs(json_path: Path | None, plot: Path | None) -> None:
    """Refuse, before any simulation, outputs that could not be written: a folder that does not
    exist, or a plot without matplotlib.

    Raises:
        ConfigurationError: a folder is missing.
        ZeusBSOError: matplotlib is not installed.
    """
    for flag, path in (("--json", json_path), ("--plot", plot)):
        if path is not None and not path.parent.is_dir():
            raise ConfigurationError(f"{flag} {path}: there is no folder {path.parent}")
    if plot is not None:
        from zeus_bso.sim.plot import check_plotting

        check_plotting()


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def simulate_flags(name: str) -> str:
    """The ``simulate`` flag of policy option ``name``: ``--on/--off`` for a boolean (its
    `PolicyOption.flag`, or ``--name/--no-name``), else ``--name``."""
    option = policy_options()[name]
    if JobSpec.model_fields[name].annotation is not bool:
        return _flag(name)
    return option.flag or f"{_flag(name)}/--no-{_flag(name)[2:]}"


def _option_parameters() -> list[inspect.Parameter]:
    """A ``simulate`` flag for each policy option: booleans as ``--on/--off`` pairs, the rest as
    values (``none`` for an option that may be None), each validated as the job validates it."""
    parameters = []
    for name, option in policy_options().items():
        field = JobSpec.model_fields[name]
        sentence = " ".join((field.description or "").split()).split(". ")[0].rstrip(".")
        upstream = "" if option.upstream is NOT_UPSTREAM else f" Upstream: {option.upstream!r}."
        text = f"{sentence}. Default: {field.default!r}.{upstream}".replace("``", "'")
        if field.annotation is bool:
            info = typer.Option(simulate_flags(name), help=text, show_default=False)
            annotation: Any = Annotated[bool | None, info]
        else:
            info = typer.Option(
                simulate_flags(name), help=text, show_default=False, metavar="VALUE"
            )
            annotation = Annotated[str | None, info]
        parameters.append(
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=annotation
            )
        )
    return parameters


def _policy_option_values(given: dict[str, Any]) -> dict[str, Any]:
    """The options given on the command line, validated as a job's fields.

    Raises:
        ConfigurationError: a value the job would refuse (says which flag and why).
    """
    values: dict[str, Any] = {}
    for name, raw in given.items():
        if raw is None:
            continue
        field = JobSpec.model_fields[name]
        value = None if isinstance(raw, str) and raw.lower() == "none" else raw
        declared: Any = Annotated[(field.annotation, *field.metadata)]
        adapter: TypeAdapter[Any] = TypeAdapter(declared)
        try:
            values[name] = adapter.validate_python(value)
        except ValidationError as error:
            reason = "; ".join(e["msg"] for e in error.errors())
            raise ConfigurationError(f"{_flag(name)} {raw}: {reason}") from None
    if (refused := early_stop_refused(values.get("beta_knob"))) is not None:
        raise ConfigurationError(f"{_flag('beta_knob')} {given['beta_knob']}: {refused}")
    return values


_fixed = list(inspect.signature(simulate_command, eval_str=True).parameters.values())[:-1]
simulate_command.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
    [*_fixed, *_option_parameters()]
)


@dataclass(frozen=True)
class SimulatedGpu:
    """What ``simulate``'s flags say of the GPU beyond the trace's (the flags checked)."""

    memory_cap: str | None = None
    """``--memory-cap`` as given (a batch size, or a multiple of the default)."""
    accumulate: bool = False
    power_limits: bool = False
    power_rows: list[dict[str, str]] | None = None
    """``--power-trace``'s rows (read once)."""
    pace_noise: float = 0.0
    parent: SimulatedParent | None = None
    keep_jobs: bool = False
    """``--keep-jobs``: the jobs simulated on a server stay there."""
    data_growth: float = 0.0
    """``--data-growth``: `simulate`'s ``growth``."""


@dataclass(frozen=True)
class SimulatedParent:
    """``--parent`` and its settings (`zeus_bso.sim.parents.parent_curve`)."""

    workload: str
    """A workload of the trace, or ``self``."""
    mode: PriorMode
    sigma: float
    shift: int


def _parent(workload: str | None, mode: str, sigma: float, shift: int) -> SimulatedParent | None:
    """The parent the flags give (None: cold jobs), checked."""
    if workload is None:
        if sigma or shift or mode != PriorMode.CHECK:
            raise ConfigurationError(
                "--parent-mode, --parent-sigma and --parent-shift need --parent"
            )
        return None
    if workload != "self" and workload not in WORKLOADS:
        raise ConfigurationError(
            f"--parent {workload!r}: give 'self' or one of {', '.join(WORKLOADS)}"
        )
    if mode not in {m.value for m in PriorMode}:
        raise ConfigurationError(f"--parent-mode {mode!r}: give check or trust")
    return SimulatedParent(workload, PriorMode(mode), sigma, shift)


def _simulate_one(
    name: str,
    gpu: str,
    recurrences: int,
    seeds: list[int],
    options: dict[str, Any],
    server: str | None,
    simulated: SimulatedGpu,
) -> Summary:
    trace = load_trace_job(name, gpu, power_rows=simulated.power_rows)
    trace = replace(trace, max_slowdown=options.get("power_max_slowdown"))
    given = simulated.memory_cap
    cap = None if given is None else _memory_cap(given, trace.default_batch_size)
    if cap is not None and cap <= trace.default_batch_size:
        raise ConfigurationError(
            f"--memory-cap {given} leaves out {name}'s default batch size "
            f"({trace.default_batch_size}), which its users train at: give one above it"
        )
    eta = float(options.get("eta_knob", 0.5))
    results = []
    with Progress(console=err, transient=True) as progress:
        task = progress.add_task(f"{name} on {gpu}", total=recurrences * len(seeds))

        def advance(_: int, __: object) -> None:
            progress.advance(task)

        for seed in seeds:
            # A workload's jobs share a prefix: kept on a server (--keep-jobs), the seeds of one
            # are the same job's runs elsewhere, and other workloads' are no relatives of it.
            prefix = f"sim-{name}-{gpu}"
            spec = job_spec(
                trace,
                f"{prefix}-{secrets.token_hex(4)}",
                mab_seed=seed,
                **({"job_id_prefix": prefix} | options),
            )
            curve = _curve(simulated.parent, trace, gpu, eta, seed)
            seeded = None
            if curve is not None and simulated.parent is not None:
                seeded = (trace, curve, simulated.parent.mode)
            with _backend(spec, server, seeded, keep=simulated.keep_jobs) as backend:
                recurrence_results = simulate(
                    trace,
                    backend,
                    recurrences=recurrences,
                    seed=seed,
                    eta_knob=eta,
                    on_recurrence=advance,
                    memory_cap=cap,
                    accumulate=simulated.accumulate,
                    power_limits=simulated.power_limits and spec.power_profiling,
                    pace_noise=simulated.pace_noise,
                    growth=simulated.data_growth,
                )
            results.append(seed_result(seed, recurrence_results))
    return summarize(
        trace, eta, recurrences, results, cap, simulated.accumulate, simulated.power_limits
    )


def _memory_cap(value: str, default_batch_size: int) -> int:
    """``--memory-cap``: a batch size, or ``<factor>x`` the default's."""
    text = value.strip().lower()
    try:
        if text.endswith("x"):
            return int(float(text[:-1]) * default_batch_size)
        return int(text)
    except ValueError:
        raise ConfigurationError(
            f"--memory-cap {value!r}: give a batch size (2048) or a multiple of the default (4x)"
        ) from None


def _curve(
    parent: SimulatedParent | None, trace: TraceJob, gpu: str, eta: float, seed: int
) -> ParentCurve | None:
    """What ``parent`` learned of a new job of ``trace`` in ``seed`` (None: no parent)."""
    if parent is None:
        return None
    theirs = trace if parent.workload == "self" else load_trace_job(parent.workload, gpu)
    return parent_curve(
        trace, theirs, eta_knob=eta, seed=seed, sigma=parent.sigma, shift=parent.shift
    )


@contextlib.contextmanager
def _backend(
    spec: Any,
    server: str | None,
    seeded: tuple[TraceJob, ParentCurve, PriorMode] | None = None,
    keep: bool = False,
) -> Iterator[Any]:
    """Where the policy runs: in this process (a new job seeded by the parent's curve in
    ``seeded``, if any), or on ``server`` (the job deleted after, unless ``keep``: then its id
    is said), where the parent is a job that ran once at each size its curve knows and the new
    job names it in ``prior_from`` (`zeus_bso.sim.parent_job`: the server learns the prior
    from its runs, as from a user's)."""
    if server is None:
        yield in_process(spec, None if seeded is None else seeded[1].prior(seeded[2]))
        return
    from zeus_bso.client.http import ServerClient
    from zeus_bso.sim import ServerBackend, parent_job

    with ServerClient(server) as client:
        made = []
        try:
            if seeded is not None:
                trace, curve, mode = seeded
                parent_id = f"{spec.job_id_prefix}-parent-{secrets.token_hex(4)}"
                made.append(parent_id)  # deleted after, even where its seeding fails midway
                found = parent_job(
                    client, trace, curve, parent_id, spec.eta_knob, spec.job_id_prefix
                )
                if found is None:  # nothing to seed from: no parent registered
                    made.remove(parent_id)
                else:
                    spec = spec.model_copy(update={"prior_from": found, "prior_mode": mode})
            backend = ServerBackend(client, spec)
            made.append(backend.job_id)
            yield backend
        finally:
            for job_id in made:
                if keep:
                    err.print(
                        escape(f"kept job {job_id} on {server} (seed {spec.mab_seed})"),
                        highlight=False,
                    )
                else:
                    _delete_made(client, job_id)


def _delete_made(client: Any, job_id: str) -> None:
    """Delete ``job_id``, a job this simulation made (none there: a parent whose seeding
    failed before it was registered)."""
    try:
        client.delete_job(job_id)
    except ServerRejectedError as error:
        if error.status != 404:
            raise


class PlainHelpCommand(TyperCommand):
    """A command whose ``--help`` is click's two-column layout instead of rich's table.
    ``simulate`` has over forty options, ten of them flags with a negative name beside
    (``--early-stop-predictive --no-early-stop-predictive``): rich's table sizes its name column
    to the longest, which left their help a column of 17 characters on an 80-column terminal
    (476 lines); click's wraps a long name onto a line of its own (203 lines)."""

    def format_help(self, ctx: Any, formatter: Any) -> None:  # Typer's own (vendored) click
        mode, self.rich_markup_mode = self.rich_markup_mode, None  # Typer's plain layout
        try:
            super().format_help(ctx, formatter)
        finally:
            self.rich_markup_mode = mode


def expand_multi_value_options(argv: list[str], names: set[str]) -> list[str]:
    """Let ``--seeds 0 1 2`` mean ``--seeds=0 --seeds=1 --seeds=2`` (click takes one value); a
    negative number is a value too (``--seeds -1``: click took it for an option)."""
    out: list[str] = []
    current: str | None = None
    for token in argv:
        if current is not None and (not token.startswith("-") or _is_number(token)):
            value = f"{current}={token}"
            if out[-1] == current:  # its first value (a name left bare asks click for one)
                out[-1] = value
            else:
                out.append(value)
            continue
        current = token if token in names else None
        out.append(token)
    return out


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True
