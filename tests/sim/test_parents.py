"""Parents for simulated jobs (`zeus_bso.sim.parents`), and what their priors do to a job's
first recurrences."""

from __future__ import annotations

import json
import math
import re
import secrets
import statistics
import subprocess
from pathlib import Path

import pytest

from tests.helpers import ServerProcess
from tests.sim.test_simulate import ZEUS_BSO
from zeus_bso.client import ServerClient
from zeus_bso.policy.types import Prior, PriorMode
from zeus_bso.sim import in_process, job_spec, load_trace_job, simulate
from zeus_bso.sim.parents import parent_curve

ETA = 0.5


def test_a_workload_s_own_curve_is_its_expected_costs_relative_to_the_cheapest() -> None:
    job = load_trace_job("cifar100", "v100")
    prior = parent_curve(job, job, eta_knob=ETA).prior(PriorMode.CHECK)
    assert prior is not None
    costs = {b: job.expected_cost(b, ETA) for b in job.batch_sizes}
    finite = {b: c for b, c in costs.items() if math.isfinite(c)}
    cheapest = min(finite.values())
    assert prior.costs == pytest.approx({b: c / cheapest for b, c in finite.items()})
    assert prior.hopeless == {b for b, c in costs.items() if math.isinf(c)}
    assert prior.best(job.batch_sizes) == job.oracle_batch_size(ETA)
    assert prior.epoch_costs[128] == pytest.approx(job.epoch_cost(128, ETA))
    assert prior.epochs[128] == pytest.approx(costs[128] / job.epoch_cost(128, ETA))
    assert prior.mode is PriorMode.CHECK


def test_a_shifted_parent_says_of_each_size_what_it_learned_of_the_next() -> None:
    job = load_trace_job("librispeech", "v100")
    sizes = job.batch_sizes
    prior = parent_curve(job, job, eta_knob=ETA, shift=1).prior(PriorMode.CHECK)
    assert prior is not None
    assert sizes[-1] not in prior.costs  # unknown: not hopeless either
    assert sizes[-1] not in prior.hopeless
    ratio = prior.costs[sizes[3]] / prior.costs[sizes[4]]
    assert ratio == pytest.approx(
        job.expected_cost(sizes[4], ETA) / job.expected_cost(sizes[5], ETA)
    )
    assert prior.best(sizes) == sizes[sizes.index(job.oracle_batch_size(ETA)) - 1]


def test_another_workload_s_curve_lies_over_the_job_s_sizes_by_rank() -> None:
    job, parent = load_trace_job("squad", "v100"), load_trace_job("movielens-1m", "v100")
    prior = parent_curve(job, parent, eta_knob=ETA).prior(PriorMode.CHECK)
    assert prior is not None
    assert set(prior.costs) | prior.hopeless <= set(job.batch_sizes)
    assert set(prior.epoch_costs) == set(job.batch_sizes)


def test_noise_is_drawn_by_seed_and_a_negative_spread_is_refused() -> None:
    job = load_trace_job("cifar100", "v100")
    one = parent_curve(job, job, eta_knob=ETA, seed=1, sigma=0.2).prior(PriorMode.CHECK)
    again = parent_curve(job, job, eta_knob=ETA, seed=1, sigma=0.2).prior(PriorMode.CHECK)
    other = parent_curve(job, job, eta_knob=ETA, seed=2, sigma=0.2).prior(PriorMode.CHECK)
    assert one == again
    assert one != other
    with pytest.raises(ValueError, match="sigma"):
        parent_curve(job, job, eta_knob=ETA, sigma=-0.1).prior(PriorMode.CHECK)


def test_a_parent_of_a_nearer_target_took_fewer_epochs_and_its_costs_keep_their_ratios() -> None:
    job = load_trace_job("cifar100", "v100")
    alike = parent_curve(job, job, eta_knob=ETA)
    nearer = parent_curve(job, job, eta_knob=ETA, epochs_scale=1 / 3)
    assert nearer.epochs == pytest.approx({b: e / 3 for b, e in alike.epochs.items()})
    assert nearer.epoch_costs == alike.epoch_costs
    near, like = nearer.prior(PriorMode.TRUST), alike.prior(PriorMode.TRUST)
    assert near is not None
    assert like is not None
    assert near.costs == pytest.approx(like.costs)  # relative to the cheapest: as they were
    assert near.hopeless == like.hopeless
    with pytest.raises(ValueError, match="epochs_scale"):
        parent_curve(job, job, eta_knob=ETA, epochs_scale=0)


def test_a_trusted_parent_of_a_nearer_target_leaves_no_job_without_a_converging_size() -> None:
    """P100 ImageNet's cheapest size, 128, run first on the word of a parent whose runs took a
    third of its epochs, trains to the target. (Stopped at 2.5x the parent's epochs and read as
    128's outcome, the walk went on to 64 alone, which never converges there, and the job
    refused every run after the second: "no batch size converged".)"""
    trace = load_trace_job("imagenet", "p100")
    curve = parent_curve(trace, trace, eta_knob=ETA, epochs_scale=1 / 3)
    backend = in_process(job_spec(trace, "p-harder", mab_seed=0), curve.prior(PriorMode.TRUST))
    recs = simulate(trace, backend, recurrences=6, seed=0, eta_knob=ETA)
    first, *_ = backend.trials
    assert (first.batch_size, first.converged) == (128, True)
    assert len(recs) == 6
    assert recs[-1].trials[-1].batch_size == 128
    assert recs[-1].trials[-1].converged


def _first_recurrences(name: str, mode: PriorMode | None, seeds: range) -> float:
    """The mean cost of a job's first 10 recurrences over the oracle's (None: a cold job)."""
    trace = load_trace_job(name, "v100")
    oracle = trace.expected_cost(trace.oracle_batch_size(ETA), ETA)
    regrets = []
    for seed in seeds:
        prior = None
        if mode is not None:
            prior = parent_curve(trace, trace, eta_knob=ETA, seed=seed, sigma=0.1).prior(mode)
        backend = in_process(job_spec(trace, f"p-{seed}", mab_seed=seed), prior)
        assert backend.state.prior == prior
        recs = simulate(trace, backend, recurrences=10, seed=seed, eta_knob=ETA)
        regrets.append(sum(r.cost for r in recs) / (10 * oracle))
    return statistics.fmean(regrets)


@pytest.mark.parametrize("name", ["librispeech", "movielens-1m"])
def test_a_declared_parent_makes_the_first_recurrences_cheaper_than_a_cold_start(
    name: str,
) -> None:
    seeds = range(4)
    cold = _first_recurrences(name, None, seeds)
    trusted = _first_recurrences(name, PriorMode.TRUST, seeds)
    checked = _first_recurrences(name, PriorMode.CHECK, seeds)
    assert trusted < cold
    assert checked < cold


SEEDED = ["--workload", "librispeech", "--recurrences", "6", "--seeds", "0"]
SEEDED += ["--parent", "self", "--parent-mode", "trust", "--parent-sigma", "0.1"]
"""The command line's seeded simulation of the tests (seed 0's parent, trusted)."""


def simulated_alike(prior: Prior | None, out: Path, *options: str) -> str:
    """`SEEDED` (with ``options``) simulated by the command line, whose costs must be those of
    the same simulation in-process with ``prior``; its standard error."""
    trace = load_trace_job("librispeech", "v100")
    backend = in_process(job_spec(trace, "p-cli", mab_seed=0), prior)
    seeded = simulate(trace, backend, recurrences=6, seed=0, eta_knob=ETA)
    done = subprocess.run(
        [ZEUS_BSO, "simulate", *SEEDED, *options, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (written,) = json.loads(out.read_text())["results"]
    assert written["seeds"][0]["costs"] == pytest.approx([r.cost for r in seeded])
    return done.stderr


def test_the_command_line_simulates_the_same_seeded_jobs(tmp_path: Path) -> None:
    trace = load_trace_job("librispeech", "v100")
    prior = parent_curve(trace, trace, eta_knob=ETA, seed=0, sigma=0.1).prior(PriorMode.TRUST)
    simulated_alike(prior, tmp_path / "seeded.json")
    command = ["simulate", "--workload", "librispeech", "--recurrences", "6", "--seeds", "0"]
    for wrong, says in [
        (["--parent", "mnist"], "give 'self' or one of"),
        (["--parent", "self", "--parent-mode", "blind"], "give check or trust"),
        (["--parent-sigma", "0.1"], "need --parent"),
    ]:
        refused = subprocess.run(
            [ZEUS_BSO, *command, *wrong], capture_output=True, text=True, timeout=120
        )
        assert refused.returncode == 2, refused.stderr
        assert says in refused.stderr
        assert "Traceback" not in refused.stderr


def test_the_command_line_seeds_jobs_through_a_server_from_a_parent_job_on_it(
    sqlite_server: ServerProcess, tmp_path: Path
) -> None:
    """Through a server, each seed's parent is a job there that ran once at each size its
    curve knows, and the new job names it (``prior_from``): the server learns the prior from
    its runs, so the jobs decide as in-process with the prior those runs give
    (`ParentCurve.learned`), to the cost of every run; both jobs are kept with --keep-jobs."""
    trace = load_trace_job("librispeech", "v100")
    curve = parent_curve(trace, trace, eta_knob=ETA, seed=0, sigma=0.1)
    said = simulated_alike(
        curve.learned(PriorMode.TRUST),
        tmp_path / "served.json",
        *("--server", sqlite_server.url, "--keep-jobs"),
    )
    kept = re.findall(r"kept job (\S+) on", said)
    assert len(kept) == 2, said
    parent, child = kept
    assert "-parent-" in parent
    with ServerClient(sqlite_server.url) as client:
        view = client.job(child, limit=0)
        assert view.seeded_from is not None
        assert (view.seeded_from.job_id, view.seeded_from.mode) == (parent, "trust")
        assert view.job.job_id_prefix == client.job(parent, limit=0).job.job_id_prefix
        for job_id in kept:
            client.delete_job(job_id)


def test_a_parent_whose_seeding_fails_midway_is_deleted_from_the_server(
    sqlite_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``simulate --server --parent``: where the parent job's runs fail midway (here its second
    report: the connection lost), the parent job, registered and half-seeded, is deleted from
    the server with the rest; it was left there."""
    from zeus_bso.cli.simulate import _backend
    from zeus_bso.errors import ServerConnectionError

    trace = load_trace_job("librispeech", "v100")
    curve = parent_curve(trace, trace, eta_knob=ETA, seed=0, sigma=0.1)
    prefix = f"sim-midway{secrets.token_hex(3)}"
    spec = job_spec(trace, f"{prefix}-child", mab_seed=0, job_id_prefix=prefix)
    reported = ServerClient.report
    calls: list[int] = []

    def fails_second(client: ServerClient, result: object) -> object:
        calls.append(1)
        if len(calls) == 2:
            raise ServerConnectionError("the connection was lost")
        return reported(client, result)  # type: ignore[arg-type]

    monkeypatch.setattr(ServerClient, "report", fails_second)
    with (
        pytest.raises(ServerConnectionError),
        _backend(spec, sqlite_server.url, (trace, curve, PriorMode.TRUST)),
    ):
        pass
    assert len(calls) == 2  # it failed midway, after the parent was registered
    with ServerClient(sqlite_server.url) as client:
        assert client.list_jobs(prefix) == []


def test_a_parent_s_runs_give_the_curve_a_server_learns_from_them() -> None:
    # The runs a real parent job reports for the HTTP replay (benchmarks/regret_priors.py
    # --served): one at each size the curve knows, whole epochs, the hopeless never converging.
    job = load_trace_job("imagenet", "p100")  # two sizes: 64 never converges
    curve = parent_curve(job, job, eta_knob=ETA, seed=3, sigma=0.1)
    runs = {run.batch_size: run for run in curve.runs()}
    assert set(runs) == set(curve.costs) | curve.hopeless == set(job.batch_sizes)
    assert runs[64].epochs is None
    took = runs[128].epochs
    assert took == max(1, round(curve.epochs[128]))
    assert took * runs[128].epoch_cost == pytest.approx(curve.costs[128])
    learned = curve.learned(PriorMode.TRUST)
    ideal = curve.prior(PriorMode.TRUST)
    assert learned is not None
    assert ideal is not None
    assert learned.costs == ideal.costs == {128: 1.0}
    assert learned.hopeless == ideal.hopeless == {64}
    assert learned.epochs == {128: float(took)}
    assert learned.epoch_costs[64] == ideal.epoch_costs[64]
    assert parent_curve(job, job, eta_knob=ETA, shift=-1).learned(PriorMode.TRUST) is None
