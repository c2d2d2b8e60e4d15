"""How ``zeus-bso jobs`` writes what the server knows for people: a job's view (``show``: its
settings, prior, caps, recommendation, siblings, next run, savings and batch sizes' table) and
the fleet's totals (``summary``), in the words and units the dashboard uses."""

from __future__ import annotations

import json

from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from zeus_bso.cli.tables import COMPACT
from zeus_bso.spec import ESTIMATED_MODEL, CreatedJob, hardware_words, profile_words
from zeus_bso.units import duration_text, energy_text, energy_unit, percent_text
from zeus_bso.wire.reads import FleetSummary, HorizonView, JobView, Savings, SeededFrom


def print_job(console: Console, state: JobView) -> None:
    """``zeus-bso jobs show``'s words and table for a job's view (``state``)."""
    job, trials = state.job, state.trial_count
    counted = f"{trials} trial{'s' if trials != 1 else ''}"
    console.print(f"[bold]{escape(job.job_id or '')}[/]  stage {state.stage}, {counted}")
    console.print(
        f"{escape(hardware(job))}, "
        f"eta {job.eta_knob:g}, target {job.target_metric:g}, "
        f"default batch size {job.default_batch_size}"
    )
    if state.seeded_from:
        console.print(f"seeded from {escape(seed_words(state.seeded_from))}")
    if job.max_run_cost_ratio:
        console.print(
            f"per-run cap: no run at another batch size above {job.max_run_cost_ratio:g}x the "
            "default's measured cost"
        )
    if state.horizon is not None:
        console.print(f"expected recurrences: {horizon_words(state.horizon)}")
    if len(state.profiles) > 1:
        console.print(
            f"hardware profiles {escape(', '.join(map(profile_words, state.profiles)))}; costs"
            " in the current one's units"
        )
    for profile, size in sorted(state.memory_caps.items()):
        console.print(
            f"out of memory: batch size {size} and above on {escape(profile_words(profile))} (not "
            "dispatched there again)"
        )
    for profile, size in sorted(state.memory_doubts.items()):
        console.print(
            f"memory in doubt: batch size {size} and above on {escape(profile_words(profile))} "
            "ran out of memory although it trained there (tried first, capped if it runs out again)"
        )
    slowdown = job.power_max_slowdown
    if slowdown and state.power_profiles:
        console.print(
            f"power limits: the cheapest whose epoch takes at most {slowdown:g}x the highest "
            "limit's"
        )
    for power in state.power_profiles:
        limits = ", ".join(f"{m.power_limit:g}" for m in power.measurements)
        console.print(
            f"power limit: batch size {power.batch_size} trains at {power.power_limit:g} W "
            f"on {escape(power.profile)} (trial {power.trial_number} measured {limits} W)"
        )
    recommended, savings = state.recommended, state.savings
    if recommended is not None:
        console.print(
            f"recommended batch size {recommended.batch_size} (expected cost "
            f"{joules_text(recommended.expected_cost)}, from its {recommended.basis})"
        )
    parent = state.seeded_from.job_id if state.seeded_from else None
    for other in state.siblings:
        differs = ", ".join(
            f"{d.name} {json.dumps(d.there)} there, {json.dumps(d.here)} here"
            for d in other.differences
        )
        if other.job_id == parent:
            differs = f"{differs or 'the same settings'} (this job was seeded from it)"
        console.print(
            f"other job of this prefix: {escape(other.job_id)} ({other.trials} trial"
            + ("" if other.trials == 1 else "s")
            + ")"
            + (
                f": {escape(differs)}"
                if differs
                else ": the same settings, learned apart (upstream Zeus's client draws a new id "
                "at every registration unless given a fixed job_id)"
            )
        )
    upcoming = state.next_run  # None from servers that predate it
    if upcoming is not None:
        chosen = upcoming.batch_size
        first = "refused" if upcoming.refused else (str(chosen) if chosen is not None else "")
        console.print(f"next run: {escape(first + ': ' if first else '')}{escape(upcoming.why)}")
    if state.not_learning:
        console.print(f"[bold]not learning[/bold]: {escape(state.not_learning)}")
    if state.mixed_models:
        console.print(f"[bold]models[/bold]: {escape(state.mixed_models)}")
    elif state.models:  # one model (sizes a few percent apart are one)
        least = min(m.parameters for m in state.models)
        most = max(m.parameters for m in state.models)
        sizes = f"{least:,}" if least == most else f"{least:,} to {most:,}"
        precisions = sorted({m.precision for m in state.models if m.precision})
        ways = sorted({w.replace("_", " ") for m in state.models for w in m.techniques or ()})
        said = f" ({', '.join(precisions + ways)})" if precisions or ways else ""
        console.print(f"model: {sizes} parameters{said}, as its runs said")
    if savings is not None:
        more = savings.cost < 0
        console.print(
            f"against delivering its {savings.runs} models (converged runs, of "
            f"{savings.ended_runs} ended) at {savings.default_batch_size}: "
            f"{saved_words(savings)}; {energy_text(abs(savings.energy))} of energy and "
            f"{duration_text(abs(savings.time))} {'more' if more else 'saved'}"
        )
    elif state.savings_unknown:
        console.print(f"savings: {escape(state.savings_unknown)}")
    best = state.best_batch_size
    if best is not None:
        whose = "its cheapest converged run"
        if job.early_stop_reference != "best_run":
            whose = "the mean of its converged runs"
        console.print(
            f"early-stop reference: batch size {best} ({whose}, {joules_text(state.best_cost)})"
        )
    counts = ", ".join(f"{n} {status}" for status, n in sorted(state.trials_by_status.items()))
    console.print(f"trials: {counts or 'none'}")
    console.print(batch_size_table(state))
    if any(row.reports > row.converged for row in state.batch_sizes):
        console.print(
            "mean cost: of every run, as the job counts it; a run that stopped below the target "
            "counts what its learning curve predicted at convergence, or its max_epochs at its "
            "pace, where its message says so, which can be more than it spent "
            "(`zeus-bso jobs trials`)",
            highlight=False,
        )


def batch_size_table(state: JobView) -> Table:
    """What the job knows of each batch size, with the bandit's posterior of each arm."""
    table = Table(
        *(
            Column(name, overflow="fold")
            for name in ("batch size", "arm", "reports", "converged", "mean cost", "std")
        ),
        Column("posterior", overflow="fold"),
        **COMPACT,
    )
    rows = state.batch_sizes
    joules = energy_unit(  # one unit for the table's costs
        value
        for row in rows
        for value in (
            row.mean_cost,
            row.cost_std,
            None if row.posterior_mean_reward is None else -row.posterior_mean_reward,
            row.posterior_std,
        )
    )
    for row in rows:
        posterior = "-"
        if row.posterior_mean_reward is not None:
            posterior = f"{joules(-row.posterior_mean_reward)} ± {joules(row.posterior_std)}"
        table.add_row(
            str(row.batch_size),
            "yes" if row.is_arm else "",
            str(row.reports),
            str(row.converged),
            joules(row.mean_cost),
            joules(row.cost_std),
            posterior,
        )
    return table


def hardware(job: CreatedJob) -> str:
    """A job's GPUs in words (`zeus_bso.spec.hardware_words`), with ``max power`` named."""
    if job.gpu_model == ESTIMATED_MODEL:
        return hardware_words(job.number_of_gpus, job.gpu_model, job.max_power)
    return f"{job.number_of_gpus} x {job.gpu_model}, max power {job.max_power:g} W"


def horizon_words(horizon: HorizonView) -> str:
    """A short-lived job's budget, in words: ``10 (4 done); it explores only what can pay back
    within them: of a budget of 2.3 MJ, 1.1 MJ spent, and one more exploration may lose 0.28
    of a run``."""
    words = f"{horizon.recurrences}"
    if horizon.expected != horizon.recurrences:
        words += f", now {horizon.expected}"
    words += f" ({horizon.done} done); it explores only what can pay back within them"
    budget, allowance, cheapest = horizon.budget, horizon.allowance, horizon.cheapest_cost
    if budget is None or allowance is None or not cheapest:
        return f"{words} (nothing is bounded before a run converges)"
    words += f": of a budget of {energy_text(budget)}, {energy_text(horizon.spent)} spent"
    if allowance <= 0.0:
        return f"{words}, and nothing more is explored"
    return f"{words}, and one more exploration may lose {allowance / cheapest:.2f} of a run"


def joules_text(value: float | None) -> str:
    """Energy, or a cost (joules), as people read it: ``17.4 kJ``, never ``1.737e+04``."""
    return "-" if value is None else energy_text(value)


def saved_words(savings: Savings) -> str:
    """A job's savings in words: ``12.5% of the cost saved``, or ``3.1% more cost``."""
    share = 100 * savings.fraction
    if share >= 0:
        return f"{percent_text(share)}% of the cost saved"
    return f"{percent_text(-share)}% more cost"


def whose_id(prefix: str | None) -> str:
    """Which jobs a listing covers, after "jobs" (nothing: every job)."""
    return f" whose id starts with {prefix!r}" if prefix else ""


def totals_in_words(totals: FleetSummary, prefix: str | None = None) -> str:
    """The fleet's totals as the dashboard says them."""
    jobs, runs = totals.jobs, totals.runs
    where = whose_id(prefix)
    if not jobs:
        return "no jobs" + where
    text = (
        f"{jobs} job{'' if jobs == 1 else 's'}{where}, {runs} ended run{'' if runs == 1 else 's'}: "
        f"{energy_text(totals.energy)} of energy and {duration_text(totals.time)} of "
        "training spent."
    )
    if flying := totals.runs_in_flight:
        text += f" {flying} run{' is' if flying == 1 else 's are'} training now."
    stuck = totals.jobs_not_learning
    not_learning = (
        f" {stuck} job{' learns' if stuck == 1 else 's learn'} nothing now: the newest runs, "
        "three or more, were all released (zeus-bso jobs list --not-learning names "
        f"{'it' if stuck == 1 else 'them'})."
        if stuck
        else ""
    )
    if mixing := totals.jobs_mixing_models:  # said after those that learn nothing
        whose = "1 job's" if mixing == 1 else f"{mixing} jobs'"
        they = ("it", "it learns") if mixing == 1 else ("them", "they learn")
        not_learning += (
            f" {whose} runs trained other models (another size, precision or way of training), "
            f"whose costs {they[1]} from as one (zeus-bso jobs list --mixed-models names "
            f"{they[0]})."
        )
    if not totals.jobs_with_savings:
        return (
            text
            + (
                " Savings are known once a job has a converged run at its default batch size and "
                "runs at another."
            )
            + not_learning
        )
    energy, cost = totals.energy_saved, totals.cost_saved
    energy_share = percent_text(abs(100 * totals.energy_saved_fraction))
    cost_share = percent_text(abs(100 * totals.cost_saved_fraction))
    energy_words = (
        f"saved {energy_text(energy)} ({energy_share}% of the energy)" if energy >= 0 else
        f"spent {energy_text(-energy)} ({energy_share}% more energy)"
    )  # fmt: skip
    if (energy >= 0) == (cost >= 0):  # one verb for both
        cost_words = f"{cost_share}% " + ("of the cost" if cost >= 0 else "more cost")
    else:
        cost_words = (f"saved {cost_share}% of the cost" if cost >= 0 else
                      f"spent {cost_share}% more cost")  # fmt: skip
    known, saving = totals.jobs_with_savings, totals.jobs_saving
    # An older server does not count them.
    counted = "jobs_saving" in totals.model_fields_set
    counts = f" ({saving} saved, {known - saving} spent more)" if counted else ""
    return (
        f"{text} Against delivering their models at their default batch sizes, the {known} "
        f"job{'' if known == 1 else 's'} whose savings are known{counts} together "
        f"{energy_words} and {cost_words}.{not_learning}"
    )


def seed_words(seeded: SeededFrom) -> str:
    """A job view's ``seeded_from``, for a person."""
    where = {
        "following": "its runs follow that curve",
        "over": "the walk on that curve is over; the bandit chooses among the sizes it found",
        "dropped": "dropped: a run disagreed, and the job went on as a cold one",
    }
    parent = seeded.job_id or "a related job"
    caps = ", its memory caps taken as this job's" if seeded.mode == "trust" else ""
    return (
        f"{parent} ({seeded.mode} mode{caps}; its curve puts {seeded.best_batch_size} "
        f"cheapest): {where.get(seeded.standing, seeded.standing)}"
    )
