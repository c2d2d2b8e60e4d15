"""Simulation in-process and through a real server, and the regret figures it produces."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests import forkserver
from tests.helpers import ZEUS_BSO, ServerProcess
from tests.ports import free_port
from zeus_bso.client import ServerClient
from zeus_bso.policy import zeus_cost
from zeus_bso.policy.power import profile_goes_on
from zeus_bso.sim import (
    ServerBackend,
    TraceError,
    TrialOutcome,
    in_process,
    job_spec,
    load_trace_job,
    simulate,
)
from zeus_bso.sim.report import causes_of, over_the_default, seed_result, summarize
from zeus_bso.sim.trace import TraceJob, read_power_trace
from zeus_bso.spec import UPSTREAM_OPTIONS, GpuConfig, JobSpecFromClient, policy_options


def run(
    backend_factory: object, workload: str, seed: int, recurrences: int, **options: object
) -> list:
    trace = load_trace_job(workload, "v100")
    spec = job_spec(trace, f"sim-{workload}-{seed}", mab_seed=seed, **options)
    backend = backend_factory(spec)  # type: ignore[operator]
    return simulate(trace, backend, recurrences=recurrences, seed=seed, eta_knob=0.5)


@pytest.mark.parametrize(
    ("workload", "seed", "options"),
    [
        ("squad", 3, {}),
        ("movielens-1m", 3, {"learning_curve_stop": False}),
        ("sentiment140", 3, UPSTREAM_OPTIONS),
        ("librispeech", 2, {"bandit": "ucb"}),
        # Seed 8 has a run the learning-curve stop ends (charged its predicted cost).
        ("movielens-1m", 8, {}),
        # Uncapped, its third recurrence's run at 8 costs 1.67x the default's.
        ("sentiment140", 0, {"max_run_cost_ratio": 1.5}),
        # Five runs expected: after its third it runs the cheapest so far (kind "exploit").
        ("sentiment140", 0, {"expected_recurrences": 5}),
    ],
)
def test_same_results_in_process_and_through_a_server(
    server: ServerProcess, workload: str, seed: int, options: dict
) -> None:
    local = run(in_process, workload, seed=seed, recurrences=12, **options)
    with ServerClient(server.url) as client:
        remote = run(lambda spec: ServerBackend(client, spec), workload, seed, 12, **options)
        state = client.job_state(f"sim-{workload}-{seed}")
        client.delete_job(f"sim-{workload}-{seed}")
    assert [r.trials for r in remote] == [r.trials for r in local]
    stopped = [t for t in state["trials"] if "learning curve" in (t["message"] or "")]
    if seed == 8:
        assert stopped
    if not options.get("learning_curve_stop", True):
        assert not stopped
    if "max_run_cost_ratio" in options:
        assert any("max_run_cost_ratio" in (t["message"] or "") for t in state["trials"])
    if "expected_recurrences" in options:
        assert any(t["kind"] == "exploit" for t in state["trials"])


def test_the_server_backend_knows_why_every_trial_ran_beyond_the_job_view_s_page(
    server: ServerProcess,
) -> None:
    # The job's view shows its latest 50 trials; a simulation's report needs every one's kind.
    spec = job_spec(load_trace_job("squad", "v100"), "sim-kinds", mab_seed=0)
    with ServerClient(server.url) as client:
        backend = ServerBackend(client, spec)
        numbers = []
        for _ in range(52):  # each run converges in its first epoch
            trial = backend.next_trial()
            backend.report(
                trial, time=1.0, energy=100.0, metric=spec.target_metric, current_epoch=1
            )
            backend.end_trial(trial)
            numbers.append(trial.trial_number)
        kinds = backend.kinds()
        client.delete_job("sim-kinds")
    assert sorted(kinds) == numbers
    assert kinds[numbers[0]] == "exploration"  # the default's first run


def moved_alike(
    server: ServerProcess,
    spec: JobSpecFromClient,
    phases: tuple[TraceJob, TraceJob],
    recurrences: tuple[int, int],
) -> tuple[list[Any], dict[str, Any]]:
    """A job that runs ``recurrences[0]`` recurrences of ``phases[0]``, is registered again on
    the GPUs of ``phases[1]`` and runs ``recurrences[1]`` of it, in-process and through
    ``server``: checks that both made the same decisions, and returns the in-process
    recurrences and the server's view of the job."""
    gpu = GpuConfig(max_power=phases[1].max_power, number_of_gpus=1, gpu_model=phases[1].gpu)

    def both_phases(backend: Any) -> list[Any]:
        first = simulate(phases[0], backend, recurrences=recurrences[0], seed=1, eta_knob=0.5)
        backend.register(gpu)
        return first + simulate(
            phases[1], backend, recurrences=recurrences[1], seed=2, eta_knob=0.5
        )

    local = both_phases(in_process(spec))
    with ServerClient(server.url) as client:
        remote = both_phases(ServerBackend(client, spec))
        state = client.job_state(spec.job_id or "")
        client.delete_job(spec.job_id or "")
    assert [r.trials for r in remote] == [r.trials for r in local]
    return local, state


def test_a_job_that_moves_to_other_gpus_decides_the_same_in_process_and_through_a_server(
    server: ServerProcess,
) -> None:
    # 15 recurrences of librispeech on a V100, then 15 on a P100 with the same job (registered
    # again), on the batch sizes both GPUs have: the server's profiles are the policy's.
    before, after = load_trace_job("librispeech", "v100"), load_trace_job("librispeech", "p100")
    sizes = set(before.batch_sizes) & set(after.batch_sizes)
    v100, p100 = (
        dataclasses.replace(t, profiles={b: p for b, p in t.profiles.items() if b in sizes})
        for t in (before, after)
    )
    default = max(b for b in sizes if b <= before.default_batch_size)
    spec = job_spec(v100, "move-librispeech-1", mab_seed=1, default_batch_size=default)
    _, state = moved_alike(server, spec, (v100, p100), (15, 15))
    assert state["profiles"] == ["1xv100@250W", "1xp100@250W"]


def test_a_job_that_explores_beyond_its_arms_on_other_gpus_decides_the_same_through_a_server(
    server: ServerProcess,
) -> None:
    # sentiment140: 12 recurrences on a V100 (pruning keeps 32, 64 and 128), then 8 on a GPU
    # where larger batch sizes are relatively slower (time per epoch x (b / 8) ** 0.5): the job
    # explores 16 there, which joins its arms (`zeus_bso.policy.profiles.extension`).
    before = load_trace_job("sentiment140", "v100")
    slower = {
        b: dataclasses.replace(p, time_per_epoch=p.time_per_epoch * (b / 8) ** 0.5)
        for b, p in before.profiles.items()
    }
    after = dataclasses.replace(before, gpu="down", profiles=slower)
    spec = job_spec(before, "extend-sentiment140-0", mab_seed=0)
    local, state = moved_alike(server, spec, (before, after), (12, 8))
    explored = [(t.batch_size, t.kind) for r in local[12:] for t in r.trials]
    assert (16, "exploration") in explored, explored
    # 8 ran on the V100 (pruning left it out for its cost): converted, it costs more than 16.
    assert 8 not in [size for size, _ in explored], explored
    assert state["arms"] == [16, 32, 64, 128]


def test_recurrences_end_with_a_converged_trial_and_costs_add_up() -> None:
    results = run(in_process, "cifar100", seed=0, recurrences=10)
    trace = load_trace_job("cifar100", "v100")
    for recurrence in results:
        assert recurrence.trials[-1].converged
        assert all(not t.converged for t in recurrence.trials[:-1])
        for trial in recurrence.trials:
            assert trial.cost == pytest.approx(
                trial.epochs * trace.epoch_cost(trial.batch_size, 0.5)
            )
    assert results[0].trials[0].batch_size == trace.default_batch_size


def test_defaults_beat_upstream_options_on_the_trace() -> None:
    trace = load_trace_job("movielens-1m", "v100")

    def regret(**options: object) -> float:
        seeds = [
            seed_result(s, run(in_process, "movielens-1m", s, 50, **options)) for s in range(3)
        ]
        return summarize(trace, 0.5, 50, seeds).regret

    ours, upstream = regret(), regret(**UPSTREAM_OPTIONS)
    assert ours < upstream
    assert upstream > 1.2  # upstream explores down from the default, far from the oracle


def test_each_run_is_charged_to_one_cause() -> None:
    """A hand-made history: the first run, a stopped exploration, a converged exploration off
    the oracle, bandit runs at and off the oracle, a stopped bandit run, and a recurrence that
    never converged (it owes no converged run: one oracle run less)."""
    oracle = 100.0

    def run_of(size: int, cost: float, converged: bool, kind: str) -> TrialOutcome:
        return TrialOutcome(size, 5, cost, converged, kind=kind)

    history = [
        [run_of(64, 300.0, True, "exploration")],  # the default, first
        [run_of(32, 150.0, False, "exploration"), run_of(16, 180.0, True, "exploration")],
        [run_of(8, 90.0, True, "bandit")],  # the oracle size, cheaper than its mean
        [run_of(16, 40.0, False, "bandit"), run_of(16, 120.0, True, "bandit")],
        [run_of(16, 70.0, False, "bandit"), run_of(8, 60.0, False, "bandit")],
    ]
    charged = causes_of(history, oracle_batch_size=8, oracle_cost=oracle)
    assert charged == {
        "first_run": 200.0,
        "stopped_exploration": 150.0,
        "converged_exploration": 80.0,
        "bandit_off_oracle": 20.0,
        "stopped_bandit": 40.0 + 70.0 + 60.0 - 100.0,
        "oracle_noise": -10.0,
    }
    total = sum(t.cost for r in history for t in r)
    assert sum(charged.values()) == pytest.approx(total - len(history) * oracle)


def test_the_causes_add_up_to_the_regret_and_the_floor_is_the_defaults_first_run() -> None:
    trace = load_trace_job("cifar100", "v100")
    seeds = [seed_result(s, run(in_process, "cifar100", s, 20)) for s in range(2)]
    summary = summarize(trace, 0.5, 20, seeds)
    causes = summary.causes()
    assert 1 + sum(causes.values()) / 100 == pytest.approx(summary.regret)
    excess = trace.expected_cost(trace.default_batch_size, 0.5) / summary.oracle_cost - 1
    assert summary.floor == pytest.approx(1 + excess / 20)
    # The first run is the default's, at its drawn cost: near the floor's excess.
    assert causes["first_run"] == pytest.approx(100 * excess / 20, rel=0.5)
    assert summary.regret > summary.floor
    data = summary.to_dict()
    assert data["causes"] == causes
    assert data["floor"] == summary.floor


@pytest.mark.parametrize(("workload", "seed"), [("sentiment140", 0), ("librispeech", 7)])
def test_with_a_run_cost_cap_no_run_costs_more_than_that_times_the_default(
    workload: str, seed: int
) -> None:
    """Uncapped, a run of these explorations costs 1.67x (1.74x) the default's; with the cap at
    1.5 none passes it, and every recurrence still ends converged."""
    default = load_trace_job(workload, "v100").default_batch_size
    free = run(in_process, workload, seed, recurrences=8)
    assert max(over_the_default([r.trials for r in free], default)) > 1.5
    capped = run(in_process, workload, seed, recurrences=8, max_run_cost_ratio=1.5)
    assert max(over_the_default([r.trials for r in capped], default)) <= 1.5
    assert all(r.trials[-1].converged for r in capped)


def test_a_loaded_machine_spreads_each_runs_pace(tmp_path: Path) -> None:
    """``pace_noise``: each run's epochs cost one factor apart from the trace's (its own, the
    same for each of its epochs), and the server is told that pace: it judged the costs the
    run paid."""
    trace = load_trace_job("cifar100", "v100")
    spec = job_spec(trace, "sim-loaded", mab_seed=0)
    backend = in_process(spec)
    loaded = simulate(trace, backend, recurrences=6, seed=0, eta_knob=0.5, pace_noise=0.3)
    runs = [t for r in loaded for t in r.trials]
    factors = [t.cost / (t.epochs * trace.epoch_cost(t.batch_size, 0.5)) for t in runs]
    assert len({round(f, 9) for f in factors}) == len(factors) > 5  # each run its own pace
    assert all(0.2 < f < 5.0 for f in factors)
    told = {
        t.trial_number: zeus_cost(t.energy or 0.0, t.time or 0.0, 0.5, trace.max_power)
        for t in backend.trials
    }
    assert told == pytest.approx({t.trial_number: t.cost for t in runs})
    # The command line simulates the same loaded machine.
    out = tmp_path / "loaded.json"
    command = ["simulate", "--workload", "cifar100", "--recurrences", "6", "--seeds", "0"]
    done = forkserver.run(
        [ZEUS_BSO, *command, "--pace-noise", "0.3", "--json", str(out)],
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    (written,) = json.loads(out.read_text())["results"]
    assert written["seeds"][0]["costs"] == pytest.approx([r.cost for r in loaded])


def test_data_that_grows_makes_each_recurrence_dearer_counted_at_the_first_ones_data(
    tmp_path: Path,
) -> None:
    """``growth``: recurrence t's epochs take (1 + growth)^t times the trace's, and the server is
    told that (it judged what the run paid); each run's cost is counted at the first
    recurrence's data, so regret measures the decisions. None grows at 0."""
    trace = load_trace_job("cifar100", "v100")
    backend = in_process(job_spec(trace, "sim-growing", mab_seed=0))
    grown = simulate(trace, backend, recurrences=6, seed=0, eta_knob=0.5, growth=0.1)
    told = {
        t.trial_number: zeus_cost(t.energy or 0.0, t.time or 0.0, 0.5, trace.max_power)
        for t in backend.trials
    }
    for index, recurrence in enumerate(grown):
        for trial in recurrence.trials:
            paid = trial.epochs * trace.epoch_cost(trial.batch_size, 0.5)
            assert trial.cost == pytest.approx(paid)
            assert told[trial.trial_number] == pytest.approx(trial.cost * 1.1**index)
    same = in_process(job_spec(trace, "sim-cifar100-0", mab_seed=0))
    flat = simulate(trace, same, recurrences=6, seed=0, eta_knob=0.5, growth=0.0)
    assert [r.cost for r in flat] == [r.cost for r in run(in_process, "cifar100", 0, 6)]
    # The command line simulates the same growth.
    out = tmp_path / "growing.json"
    command = ["simulate", "--workload", "cifar100", "--recurrences", "6", "--seeds", "0"]
    done = forkserver.run(
        [ZEUS_BSO, *command, "--data-growth", "0.1", "--json", str(out)], timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "--data-growth 0.1: recurrence t's epochs cost 1.1^t times" in done.stdout
    (written,) = json.loads(out.read_text())["results"]
    assert written["seeds"][0]["costs"] == pytest.approx([r.cost for r in grown])


def test_a_horizon_is_the_simulation_of_that_many_recurrences() -> None:
    """The policy does not know how often a job will recur: its first 5 of 12 recurrences are
    the 5-recurrence simulation, and so are the regret, floor and savings `Summary.at` gives."""
    trace = load_trace_job("cifar100", "v100")
    seeds = range(2)
    long = summarize(
        trace, 0.5, 12, [seed_result(s, run(in_process, "cifar100", s, 12)) for s in seeds]
    )
    short = summarize(
        trace, 0.5, 5, [seed_result(s, run(in_process, "cifar100", s, 5)) for s in seeds]
    )
    at5 = long.at(5)
    assert (at5.regret, at5.floor, at5.savings) == (short.regret, short.floor, short.savings)
    assert at5.causes() == short.causes()
    assert long.at(12).regret == long.regret
    assert at5.floor > long.floor  # the default's first run weighs more in fewer recurrences
    with pytest.raises(ValueError, match="horizon 13"):
        long.at(13)


def test_cli_writes_json_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    png = tmp_path / "r.png"
    plotting = importlib.util.find_spec("matplotlib") is not None  # the plot extra
    result = forkserver.run(
        [ZEUS_BSO, "simulate", "--workload", "sentiment140", "--gpu", "p100", "--recurrences", "8"]
        + ["--seeds", "0", "1", "--json", str(out), "--upstream"]
        + (["--plot", str(png)] if plotting else []),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "sentiment140" in result.stdout
    # Captured, the console is 80 columns wide: the nine causes' headers are whole there.
    assert all(label in result.stdout for label in ("off oracle", "converged", "noise"))
    assert "…" not in result.stdout
    # The regret after 5 of the 8 recurrences, beside the floor.
    horizons = result.stdout.split("Regret / floor at fewer recurrences")[1]
    assert all(column in horizons for column in ("at 5", "at 8", "worst vs default"))
    data = json.loads(out.read_text())
    assert data["options"]["bandit"] == "zeus-0.16"
    (summary,) = data["results"]
    assert [s["seed"] for s in summary["seeds"]] == [0, 1]
    assert all(len(s["costs"]) == 8 for s in summary["seeds"])
    if plotting:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_refuses_outputs_it_could_not_write_before_it_simulates(tmp_path: Path) -> None:
    """A folder that does not exist, or a plot without matplotlib (the ``plot`` extra), is said
    in a line before any simulation, which can take minutes; a file that cannot be written
    after it, in a line too (no traceback)."""
    command = [ZEUS_BSO, "simulate", "--workload", "all", "--seeds", "0", "1", "2"]
    missing = forkserver.run([*command, "--json", str(tmp_path / "no" / "r.json")], timeout=60)
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        f"error: --json {tmp_path / 'no' / 'r.json'}: there is no folder {tmp_path / 'no'}"
    )
    assert missing.stdout == ""  # nothing simulated
    short = [ZEUS_BSO, "simulate", "--workload", "squad", "--seeds", "0", "--recurrences", "3"]
    folder = tmp_path / "taken"
    folder.mkdir()
    unwritable = forkserver.run([*short, "--json", str(folder)], timeout=60)
    assert unwritable.returncode == 1
    assert unwritable.stderr.strip() == f"error: cannot write {folder}: Is a directory"
    without_matplotlib = (  # as where the plot extra is not installed
        "import sys; sys.modules['matplotlib'] = None; "
        "sys.argv = ['zeus-bso', 'simulate', '--workload', 'all', '--plot', sys.argv[1]]; "
        "from zeus_bso.entry import main; main()"
    )
    plotless = subprocess.run(
        [sys.executable, "-c", without_matplotlib, str(tmp_path / "r.png")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert plotless.returncode == 1
    assert (
        plotless.stderr.strip() == "error: plotting needs matplotlib: pip install 'zeus-bso[plot]'"
    )
    assert plotless.stdout == ""


def test_cli_tables_fit_80_columns_at_every_horizon() -> None:
    """Captured, the console is 80 columns wide: every table of a 50-recurrence simulation of
    every workload, the four horizons' too, is whole there (nothing cut to an ellipsis)."""
    result = forkserver.run(
        [ZEUS_BSO, "simulate", "--workload", "all", "--seeds", "0"],
        timeout=120,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert result.returncode == 0, result.stderr
    horizons = result.stdout.split("Regret / floor at fewer recurrences")[1]
    assert all(f"at {h}" in horizons for h in (5, 10, 20, 50))
    assert "\u2026" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80


def test_cli_rejects_unknown_workload() -> None:
    result = forkserver.run([ZEUS_BSO, "simulate", "--workload", "mnist"], timeout=60)
    assert result.returncode == 2
    assert "unknown workload" in result.stderr


def test_cli_keeps_the_jobs_it_simulated_on_a_server_when_asked(
    sqlite_server: ServerProcess,
) -> None:
    """Simulated through a server, each seed's job is deleted after it; with ``--keep-jobs``
    each stays, named for its workload and GPU (the prefix of its seeds alone), and said."""
    command = [ZEUS_BSO, "simulate", "--workload", "squad", "--recurrences", "3"]
    server = sqlite_server
    command += ["--server", server.url, "--seeds", "0", "1"]
    with ServerClient(server.url) as client:
        before = {job.job_id for job in client.jobs_page("sim-squad-v100", limit=1000)[0]}
        assert forkserver.run(command, timeout=120).returncode == 0
        assert {j.job_id for j in client.jobs_page("sim-squad-v100", limit=1000)[0]} == before
        kept = forkserver.run([*command, "--keep-jobs"], timeout=120)
        assert kept.returncode == 0, kept.stderr
        jobs = [
            j for j in client.jobs_page("sim-squad-v100", limit=1000)[0] if j.job_id not in before
        ]
        assert len(jobs) == 2
        assert {j.job_id_prefix for j in jobs} == {"sim-squad-v100"}
        for job in jobs:
            assert f"kept job {job.job_id} on {server.url}" in " ".join(kept.stderr.split())
            assert len(client.trials(job.job_id)) >= 3  # its recurrences' runs
            client.delete_job(job.job_id)
    alone = forkserver.run([ZEUS_BSO, "simulate", "--keep-jobs", "--seeds", "0"], timeout=60)
    assert alone.returncode == 2
    assert "--keep-jobs needs --server" in alone.stderr


def test_cli_rejects_a_server_url_without_a_scheme() -> None:
    """As the client checks it: every request would fail as an outage instead."""
    result = forkserver.run(
        [ZEUS_BSO, "simulate", "--server", "localhost:8000", "--seeds", "0"],
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert result.returncode == 2
    assert "has no scheme: use 'http://localhost:8000'" in result.stderr


def test_cli_exit_status_tells_a_usage_error_from_a_failure() -> None:
    """2: what to change is in the message; 1: it failed at run time (as both CLIs do)."""
    unreachable = forkserver.run(
        [ZEUS_BSO, "simulate", "--recurrences", "1", "--seeds", "0"]
        + ["--server", f"http://127.0.0.1:{free_port()}"],
        timeout=120,
    )
    assert unreachable.returncode == 1, unreachable.stderr
    assert "cannot reach" in unreachable.stderr.lower() or "connect" in unreachable.stderr.lower()
    assert "Traceback" not in unreachable.stderr
    usage = forkserver.run(
        [ZEUS_BSO, "simulate", "--workload", "squad", "--gpu", "a100"],
        timeout=60,
    )
    assert usage.returncode == 2
    assert "unknown GPU" in usage.stderr
    # A job's option the server would refuse for a new job, refused before anything simulates.
    stopping = forkserver.run([ZEUS_BSO, "simulate", "--beta-knob", "1"], timeout=60)
    assert stopping.returncode == 2
    assert "--beta-knob 1: beta_knob=1 would stop runs" in " ".join(stopping.stderr.split())
    assert "Exit status: 0 done; 1 failed at run time" in " ".join(
        forkserver.run(
            [ZEUS_BSO, "--help"],
        ).stdout.split()
    )


def simulate_help(columns: int) -> str:
    """What ``zeus-bso simulate --help`` prints on a terminal ``columns`` wide."""
    env = {**os.environ, "COLUMNS": str(columns)}
    command = [ZEUS_BSO, "simulate", "--help"]
    return forkserver.run(command, timeout=60, env=env).stdout


def test_the_simulate_help_reads_on_an_80_column_terminal() -> None:
    """Over forty options, ten of them flags with a negative name beside: each option's help
    keeps a column wide enough to read (rich's table gave it 17 characters, every phrase broken
    over lines), and a long flag's name goes on a line of its own."""
    shown = simulate_help(columns=80)
    assert "Stop a run once its cost passes this many" in shown, shown
    assert "  --early-stop-predictive / --no-early-stop-predictive\n" in shown, shown
    assert max(len(line) for line in shown.splitlines()) <= 80


def test_the_reports_titles_wrap_from_the_left_on_an_80_column_terminal() -> None:
    """A title longer than its table wraps onto lines that start at the left edge (rich centred
    each, and a title's last words stood alone mid-line)."""
    command = [ZEUS_BSO, "simulate", "--workload", "squad", "--recurrences", "6", "--seeds", "0"]
    env = {**os.environ, "COLUMNS": "80"}
    shown = forkserver.run(command, timeout=120, env=env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    (at,) = [i for i, line in enumerate(lines) if "Where the regret goes" in line]
    assert lines[at].startswith("Where the regret goes"), shown.stdout
    assert lines[at + 1][:1].strip(), shown.stdout  # its second line, from the left edge
    caption = next(line for line in lines if "floor: the regret of running" in line)
    assert caption.startswith("floor:"), shown.stdout


def test_every_policy_option_is_a_simulate_flag_validated_as_the_job_validates_it(
    tmp_path: Path,
) -> None:
    shown = simulate_help(columns=250)
    for name, option in policy_options().items():
        flag = option.flag or "--" + name.replace("_", "-")
        assert flag.split("/")[0] in shown, name
    out = tmp_path / "r.json"
    given = ["--bandit-exploit-after", "none", "--num-pruning-rounds", "2", "--prune-down-first"]
    result = forkserver.run(
        [ZEUS_BSO, "simulate", "--workload", "squad", "--recurrences", "2", "--seeds", "0"]
        + [*given, "--json", str(out)],
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    options = json.loads(out.read_text())["options"]
    assert options == {
        "bandit_exploit_after": None,
        "num_pruning_rounds": 2,
        "prune_up_first": False,
    }
    refused = forkserver.run(
        [ZEUS_BSO, "simulate", "--workload", "squad", "--prune-cost-ratio", "0.5"],
        timeout=60,
    )
    assert refused.returncode == 2
    assert "--prune-cost-ratio 0.5: Input should be greater than 1" in refused.stderr


class Recorder:
    """An in-process backend that keeps every report's metric, by trial."""

    def __init__(self, spec: object) -> None:
        self.inner = in_process(spec)  # type: ignore[arg-type]
        self.metrics: dict[int, list[float]] = {}

    def next_trial(self) -> object:
        return self.inner.next_trial()

    def report(self, trial: object, **values: object) -> object:
        number = trial.trial_number  # type: ignore[attr-defined]
        self.metrics.setdefault(number, []).append(values["metric"])  # type: ignore[arg-type]
        return self.inner.report(trial, **values)  # type: ignore[arg-type]

    def end_trial(self, trial: object) -> None:
        self.inner.end_trial(trial)  # type: ignore[arg-type]

    def kinds(self) -> dict[int, str]:
        return self.inner.kinds()


def test_runs_report_their_learning_curve_from_the_trace() -> None:
    """A simulated run reports the metric its trace run had at each epoch, rising through the
    thresholds, not a jump to the target at the end."""
    recorder: Recorder | None = None

    def factory(spec: object) -> Recorder:
        nonlocal recorder
        recorder = Recorder(spec)
        return recorder

    results = run(factory, "cifar100", seed=0, recurrences=5)
    assert recorder is not None
    trace = load_trace_job("cifar100", "v100")
    outcomes = [t for r in results for t in r.trials]
    assert len(outcomes) == len(recorder.metrics)
    long_runs = 0
    for outcome, metrics in zip(outcomes, recorder.metrics.values(), strict=True):
        assert len(metrics) == outcome.epochs
        assert metrics == sorted(metrics)  # accuracy: never worse
        if outcome.epochs >= 10:  # (the learning-curve stop ends some runs sooner)
            long_runs += 1
            assert len(set(metrics)) > 3  # a curve through several thresholds
        assert (metrics[-1] >= trace.workload.target_metric) == outcome.converged
    assert long_runs > 0


def test_a_memory_cap_costs_at_most_one_start_per_size_in_process_and_through_a_server(
    server: ServerProcess,
) -> None:
    """movielens-1m's cheapest size on the V100 is 16384: with every size from 4096 on running
    out of memory, the walk up meets 4096 once, marks it infeasible and never dispatches it (or
    a larger one) again; the oracle is the cheapest size below the cap, and the server agrees
    with the policy in-process."""
    trace = load_trace_job("movielens-1m", "v100")
    spec = job_spec(trace, "sim-capped-3", mab_seed=3)
    local = simulate(trace, in_process(spec), recurrences=20, seed=3, eta_knob=0.5, memory_cap=4096)
    with ServerClient(server.url) as client:
        backend = ServerBackend(client, spec)
        remote = simulate(trace, backend, recurrences=20, seed=3, eta_knob=0.5, memory_cap=4096)
        state = client.job_state(backend.job_id, limit=1000)
        client.delete_job(backend.job_id)
    assert [r.trials for r in remote] == [r.trials for r in local]
    starved = [t for r in local for t in r.trials if t.out_of_memory]
    assert [(t.batch_size, t.cost) for t in starved] == [(4096, 0.0)]
    assert all(t.batch_size < 4096 for r in local for t in r.trials if not t.out_of_memory)
    assert all(r.trials[-1].converged for r in local)
    assert [t["status"] for t in state["trials"]].count("infeasible") == 1
    assert list(state["memory_caps"].values()) == [4096]
    summary = summarize(trace, 0.5, 20, [seed_result(3, local)], memory_cap=4096)
    assert summary.oracle_batch_size == trace.oracle_batch_size(0.5, memory_cap=4096) == 2048
    assert summary.out_of_memory_starts() == [{4096: 1}]
    assert summary.to_dict()["memory_cap"] == 4096
    # Without a cap, nothing of it shows.
    plain = summarize(trace, 0.5, 20, [seed_result(3, local)])
    assert "memory_cap" not in plain.to_dict()
    assert plain.oracle_batch_size == 16384


def test_cli_takes_a_memory_cap_as_a_size_or_a_multiple_of_the_default(tmp_path: Path) -> None:
    out = tmp_path / "capped.json"
    common = [ZEUS_BSO, "simulate", "--workload", "movielens-1m", "--recurrences", "10"]
    done = forkserver.run(
        [*common, "--seeds", "0", "--memory-cap", "4x", "--json", str(out)],
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Out of memory" in done.stdout
    (summary,) = json.loads(out.read_text())["results"]
    assert (summary["memory_cap"], summary["oracle_batch_size"]) == (4096, 2048)
    for bad, words in (("512", "leaves out movielens-1m's default"), ("big", "a batch size")):
        refused = forkserver.run([*common, "--memory-cap", bad], timeout=60)
        assert refused.returncode == 2, refused.stderr
        assert words in refused.stderr


def test_accumulating_runs_reach_sizes_above_the_cap_in_process_and_through_a_server(
    server: ServerProcess,
) -> None:
    """movielens-1m with every size from 2048 on out of memory, and runs that accumulate: the
    walk up (every other size) meets 4096, whose run tries 4096 and then 2048 a micro-batch,
    each once (a start that lowers the cap), and trains in micro-batches of 1024 at 1024's
    pace; nothing is infeasible, and the server agrees with the policy in-process."""
    trace = load_trace_job("movielens-1m", "v100")
    spec = job_spec(trace, "sim-accumulating-3", mab_seed=3)
    options: dict[str, Any] = {"memory_cap": 2048, "accumulate": True}
    local = simulate(trace, in_process(spec), recurrences=20, seed=3, eta_knob=0.5, **options)
    with ServerClient(server.url) as client:
        backend = ServerBackend(client, spec)
        remote = simulate(trace, backend, recurrences=20, seed=3, eta_knob=0.5, **options)
        state = client.job_state(backend.job_id, limit=1000)
        client.delete_job(backend.job_id)
    assert [r.trials for r in remote] == [r.trials for r in local]
    runs = [t for r in local for t in r.trials]
    assert [t.batch_size for t in runs if t.out_of_memory] == [4096, 2048]
    accumulated = {t.batch_size: t.accumulation_steps for t in runs if t.accumulation_steps > 1}
    assert accumulated
    assert all(size >= 2048 and size // steps == 1024 for size, steps in accumulated.items())
    assert "infeasible" not in {t["status"] for t in state["trials"]}
    assert list(state["memory_caps"].values()) == [2048]
    paced = trace.accumulated(2048)
    assert paced.profiles[4096].time_per_epoch == trace.profiles[1024].time_per_epoch
    assert paced.profiles[4096].target_epochs == trace.profiles[4096].target_epochs
    summary = summarize(trace, 0.5, 20, [seed_result(3, local)], 2048, accumulate=True)
    assert summary.oracle_batch_size == paced.oracle_batch_size(0.5)
    assert summary.to_dict()["accumulate"] is True


def test_a_size_with_no_micro_batch_in_the_trace_is_refused_not_dispatched_for_ever(
    tmp_path: Path,
) -> None:
    """ImageNet on the V100 at a memory cap of 360, above its default: no trace size below 360
    divides it, so the simulator has no pace to accumulate it at. Each run reported it out of
    memory, and the policy gives a run that accumulates any size: the first recurrence never
    ended, nor did `zeus-bso simulate`."""
    trace = load_trace_job("imagenet", "v100")
    backend = in_process(job_spec(trace, "sim-no-micro", mab_seed=0))
    words = "no batch size of the trace below the memory cap 360 divides 360"
    with pytest.raises(TraceError, match=words):
        simulate(
            trace, backend, recurrences=3, seed=0, eta_knob=0.5, memory_cap=360, accumulate=True
        )
    refused = subprocess.run(
        [ZEUS_BSO, "simulate", "--workload", "imagenet", "--gpu", "v100", "--recurrences", "3"]
        + ["--seeds", "0", "--memory-cap", "360", "--accumulate"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert refused.returncode == 2, refused.stderr
    assert words in refused.stderr
    assert "Traceback" not in refused.stderr


def test_power_limits_are_profiled_once_per_batch_size_and_never_at_eta_0(
    server: ServerProcess,
) -> None:
    """Each batch size's first run pays a profiling epoch at the mean over the power limits it
    profiles (from the highest down, until three in a row cost more than the cheapest) and
    trains at the cheapest of them after; the server, which sees only the reports, decides as
    the policy in-process; at eta 0 nothing is profiled and the runs are today's exactly."""
    trace = load_trace_job("cifar100", "v100")
    spec = job_spec(trace, "sim-power-1", mab_seed=1, eta_knob=1.0)
    options: dict[str, Any] = {"recurrences": 12, "seed": 1, "eta_knob": 1.0}
    local = simulate(trace, in_process(spec), power_limits=True, **options)
    with ServerClient(server.url) as client:
        backend = ServerBackend(client, spec)
        remote = simulate(trace, backend, power_limits=True, **options)
        client.delete_job(backend.job_id)
    assert [r.trials for r in remote] == [r.trials for r in local]
    runs = [t for r in local for t in r.trials]

    for run in runs:
        profiled = trace.profiled(run.batch_size, 1.0)
        costs = [trace.pace_cost(p, 1.0) for p in profiled]
        assert len(profiled) == len(trace.paces[run.batch_size]) or not profile_goes_on(costs)
        assert run.power_limit == trace.best_pace(run.batch_size, 1.0, profiled).power_limit
    assert any(run.power_limit != trace.max_power for run in runs)  # energy alone: lower limits
    plain = simulate(trace, in_process(spec), **options)
    assert sum(r.cost for r in local) < sum(r.cost for r in plain)
    # The first run of a batch size pays its profiling epoch: dearer than a later run's epochs.
    first = next(t for t in runs if t.epochs > 1)
    best = trace.best_pace(first.batch_size, 1.0)
    profiling = trace.profiling_pace(first.batch_size, 1.0)
    assert trace.pace_cost(profiling, 1.0) > trace.pace_cost(best, 1.0)
    # A profile runs from the highest limit down; some stop before the lowest.
    for size in trace.batch_sizes:
        limits = [p.power_limit for p in trace.profiled(size, 1.0)]
        every = sorted((p.power_limit for p in trace.paces[size]), reverse=True)
        assert limits == every[: len(limits)]
    assert any(len(trace.profiled(b, 1.0)) < len(trace.paces[b]) for b in trace.batch_sizes)
    summary = summarize(trace, 1.0, 12, [seed_result(1, local)], power_limits=True)
    assert summary.joint_oracle_regret is not None
    assert summary.joint_oracle_regret < 1.0
    assert summary.to_dict()["power_limits"] is True
    # Time alone: the maximum limit is the fastest, nothing is profiled, today's runs exactly.
    spec0 = job_spec(trace, "sim-power-0", mab_seed=1, eta_knob=0.0)
    at_zero = {"recurrences": 12, "seed": 1, "eta_knob": 0.0}
    profiled = simulate(trace, in_process(spec0), power_limits=True, **at_zero)
    assert [r.trials for r in profiled] == [
        r.trials for r in simulate(trace, in_process(spec0), **at_zero)
    ]


def test_with_power_limits_the_floor_is_the_cold_start_that_profiles() -> None:
    """The floor with power limits: the default's first run profiles, then the batch size
    that costs least at its chosen limit, whose first run profiles too; below today's floor,
    above the joint oracle, and under the policy's own regret; at eta 0 today's floor. The
    causes of the regret are then charged over that batch size's runs at their limit."""
    trace = load_trace_job("cifar100", "p100")
    seeds = [seed_result(s, run(in_process, "cifar100", s, 20)) for s in range(2)]
    plain = summarize(trace, 1.0, 20, seeds)
    spec = job_spec(trace, "sim-floor", mab_seed=0, eta_knob=1.0)
    profiled = simulate(
        trace, in_process(spec), recurrences=20, seed=0, eta_knob=1.0, power_limits=True
    )
    summary = summarize(trace, 1.0, 20, [seed_result(0, profiled)], power_limits=True)

    def trained(b: int) -> float:
        return trace.expected_cost(b, 1.0, trace.pace_cost(trace.chosen_pace(b, 1.0), 1.0))

    def profiling(b: int) -> float:
        chosen = trace.pace_cost(trace.chosen_pace(b, 1.0), 1.0)
        return trace.pace_cost(trace.profiling_pace(b, 1.0), 1.0) - chosen

    best = min(trace.batch_sizes, key=trained)
    default = trace.default_batch_size
    assert best != default  # cifar100: 128 at energy alone, the default 1024
    expected = trained(default) + profiling(default) + profiling(best) + 19 * trained(best)
    assert summary.power_floor_cost == pytest.approx(expected)
    assert summary.floor == pytest.approx(expected / (20 * summary.oracle_cost))
    assert summary.joint_oracle_regret is not None
    assert summary.joint_oracle_regret < summary.floor < plain.floor
    assert summary.floor < summary.regret
    assert summary.to_dict()["floor"] == summary.floor
    # The causes are charged over the oracle of runs that profile, and add up from its regret.
    assert summary.power_oracle == (best, trained(best))
    assert summary.charged_from == pytest.approx(trained(best) / summary.oracle_cost)
    causes = summary.causes()
    assert summary.charged_from + sum(causes.values()) / 100 == pytest.approx(summary.regret)
    assert abs(causes["oracle_noise"]) < 2.0  # the trace's spread, not what the limits save
    # One recurrence: the default's profiling run alone.
    assert trace.power_floor(1.0, 1) == pytest.approx(trained(default) + profiling(default))
    at_zero = summarize(trace, 0.0, 20, seeds, power_limits=True)
    assert at_zero.power_floor_cost is None
    assert at_zero.floor == summarize(trace, 0.0, 20, seeds).floor


def test_a_power_trace_of_ones_own_gpus(tmp_path: Path) -> None:
    """``--power-trace``: the shipped columns, one's own numbers (here the V100's at half the
    time per epoch); a file without a column is refused, saying which."""
    shipped = (
        Path(__file__).parents[2] / "src/zeus_bso/sim/data/summary_power_v100.csv"
    ).read_text()
    header, *rows = shipped.splitlines()
    columns = header.split(",")
    faster = [header]
    for row in rows:
        values = row.split(",")
        at = columns.index("time_per_epoch")
        values[at] = str(float(values[at]) / 2)
        faster.append(",".join(values))
    own = tmp_path / "power.csv"
    own.write_text("\n".join(faster) + "\n")
    trace = load_trace_job("cifar100", "v100", power_rows=read_power_trace(str(own)))
    shipped_trace = load_trace_job("cifar100", "v100")
    assert trace.profiles[1024].time_per_epoch == shipped_trace.profiles[1024].time_per_epoch / 2
    out = tmp_path / "r.json"
    done = forkserver.run(
        [ZEUS_BSO, "simulate", "--workload", "cifar100", "--recurrences", "5", "--seeds", "0"]
        + ["--power-limits", "--power-trace", str(own), "--json", str(out)],
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Power limits" in done.stdout
    (summary,) = json.loads(out.read_text())["results"]
    assert summary["power_limits"] is True
    broken = tmp_path / "broken.csv"
    broken.write_text("dataset,network,batch_size\ncifar100,shufflenetv2,1024\n")
    refused = forkserver.run(
        [ZEUS_BSO, "simulate", "--power-trace", str(broken)],
    )
    assert refused.returncode == 2, refused.stderr
    assert "lacks the column(s)" in refused.stderr


def test_a_slowdown_bound_keeps_every_run_within_it(tmp_path: Path) -> None:
    """``--power-max-slowdown``: every run trains at a limit whose epoch takes at most that
    many times the epoch at the highest limit, and a tighter bound chooses other limits; the
    command line simulates what the job's option does in-process."""
    loose = load_trace_job("cifar100", "v100")
    tight = dataclasses.replace(loose, max_slowdown=1.02)
    options: dict[str, Any] = {"recurrences": 8, "seed": 0, "eta_knob": 1.0}
    chosen = {}
    for trace in (loose, tight):
        spec = job_spec(trace, "sim-slow-0", mab_seed=0, eta_knob=1.0)
        runs = [
            t
            for r in simulate(trace, in_process(spec), power_limits=True, **options)
            for t in r.trials
        ]
        chosen[trace.max_slowdown] = {(t.batch_size, t.power_limit) for t in runs}
    for size, limit in chosen[1.02]:
        paces = {p.power_limit: p.time_per_epoch for p in loose.paces[size]}
        assert paces[limit] <= 1.02 * paces[loose.max_power]
    assert any(
        {p.power_limit: p.time_per_epoch for p in loose.paces[size]}[limit]
        > 1.02 * loose.profiles[size].time_per_epoch
        for size, limit in chosen[None]
    )  # unbound, some run trains slower than the bound allows
    out = tmp_path / "r.json"
    command = ["simulate", "--workload", "cifar100", "--gpu", "v100", "--recurrences", "8"]
    done = forkserver.run(
        [ZEUS_BSO, *command, "--seeds", "0", "--eta-knob", "1", "--power-limits"]
        + ["--power-max-slowdown", "1.02", "--json", str(out)],
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    written = json.loads(out.read_text())
    assert written["options"]["power_max_slowdown"] == 1.02
    spec = job_spec(tight, "sim-slow-0", mab_seed=0, eta_knob=1.0)
    in_process_runs = simulate(tight, in_process(spec), power_limits=True, **options)
    expected = summarize(tight, 1.0, 8, [seed_result(0, in_process_runs)], power_limits=True)
    assert written["results"][0]["regret"] == pytest.approx(expected.regret)


def test_seeds_are_read_as_a_user_types_them(tmp_path: Path) -> None:
    """``--seeds -1 3`` said "No such option: -1" (click took the negative number for an
    option), and a bare ``--seeds`` was dropped without a word (the default seeds ran); the
    values are the seeds, and a bare ``--seeds`` asks for one."""
    out = tmp_path / "seeds.json"
    command = [ZEUS_BSO, "simulate", "--workload", "cifar100", "--recurrences", "2"]
    done = forkserver.run([*command, "--seeds", "-1", "3", "--json", str(out)], timeout=120)
    assert done.returncode == 0, done.stderr
    (written,) = json.loads(out.read_text())["results"]
    assert [s["seed"] for s in written["seeds"]] == [-1, 3]
    bare = forkserver.run([*command, "--seeds"], timeout=120)
    assert bare.returncode == 2
    assert "'--seeds' requires an argument" in bare.stderr
