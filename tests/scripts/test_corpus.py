"""A corpus of training scripts written the way their ecosystems write them (``tests/scripts``),
each run as a recurring job against a real server, one recurrence a run of the script, as a
scheduler runs it. Each run must hold what the user's script cannot see for itself: every
optimizer step takes the batch size the server dispatched (micro-batches included), at every
step the rate is the script's own schedule's times the ``lr_rule``'s factor (past warm-up
milestones, with schedules sized from the data), the trial is charged at the size that trained,
and a run that delivers no model says so to its caller. `tests.scripts.probe` watches from
outside the scripts, through PyTorch's global hooks.
"""

from __future__ import annotations

import runpy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the corpus needs torch (pip install torch)")
pytest.importorskip("lightning", reason="pip install 'zeus-bso[lightning]'")
pytest.importorskip("transformers", reason="pip install 'zeus-bso[hf]'")

from tests.helpers import ServerProcess, unique_id
from tests.scripts.probe import Probe, Step
from zeus_bso import until_converged
from zeus_bso.client import ServerClient
from zeus_bso.errors import ZeusBSOTrainFailError

SCRIPTS = Path(__file__).parent
REFERENCE = 16
"""The batch size every script's rate was tuned at (its job's default)."""
MEMORY_CHECK_STEPS = 3
"""The steps the memory check tries at a batch size new on the hardware (the default)."""


@pytest.fixture(scope="module")
def server(sqlite_server: ServerProcess) -> ServerProcess:
    return sqlite_server


@pytest.fixture
def probe(server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> Iterator[Probe]:
    monkeypatch.setenv("ZEUS_BSO_SERVER_URL", server.url)
    with Probe() as watching:
        yield watching


def run_script(name: str, *argv: str, failure_signal: bool = False) -> int:
    """Run ``tests/scripts/<name>`` as ``python <name> argv...`` would (in this process);
    its exit status (``failure_signal``: 1 for a `ZeusBSOTrainFailError`, which Python would
    print before exiting so)."""
    path = SCRIPTS / name
    saved = sys.argv
    sys.argv = [str(path), *argv]
    try:
        runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 1
    except ZeusBSOTrainFailError:
        if not failure_signal:
            raise
        return 1
    finally:
        sys.argv = saved
    return 0


def trials_of(server: ServerProcess, prefix: str) -> list[dict[str, Any]]:
    """The trials of the one job of ``prefix``, oldest first."""
    with ServerClient(server.url) as client:
        (job,) = client.list_jobs(prefix=f"{prefix}-")
        trials = client.job_state(job["job_id"])["trials"]
    return sorted(trials, key=lambda t: t["trial_number"])


def check_run(
    steps: list[Step], trial: dict[str, Any], rule: str = "linear", *, tried: bool = False
) -> None:
    """What one run must hold: it trained ``trial``'s batch size at every optimizer step, at
    the schedule's rate times the rule's factor at every step, and was charged so.
    ``tried``: the run's batch size was new on this hardware, so its fit began with the memory
    check's steps, which are undone (`MEMORY_CHECK_STEPS`, of a micro-batch each where the
    run accumulates): they are not the run's."""
    size = trial["batch_size"]
    if tried:
        steps = steps[MEMORY_CHECK_STEPS:]
    assert steps, "the run took no optimizer step"
    assert [s.samples for s in steps] == [size] * len(steps), trial
    factor = size / REFERENCE if rule == "linear" else 1.0
    factors = [s.factor for s in steps if s.schedule > 1e-6]
    assert factors, steps
    assert factors == pytest.approx([factor] * len(factors), rel=2e-3), (size, steps)
    assert trial["status"] == "reported", trial
    assert trial["epochs"] >= 1


def check_runs(runs: list[list[Step]], trials: list[dict[str, Any]], rule: str = "linear") -> None:
    """`check_run` for each run of a job and its trial, in order."""
    seen: set[int] = set()
    for steps, trial in zip(runs, trials, strict=True):
        check_run(steps, trial, rule, tried=trial["batch_size"] not in seen)
        seen.add(trial["batch_size"])


# Each script, the arguments it needs besides --job, and the lr rule it trains with.
CORPUS = {
    "lightning_onecycle.py": ((), "linear"),
    "lightning_warmup_cosine.py": ((), "linear"),  # 'auto' on SGD
    "lightning_datamodule.py": ((), "linear"),
    "classic_pytorch_lightning.py": ((), "linear"),
    "hf_trainer.py": (("--output-dir", "{tmp}"), "linear"),
    "accelerate_loop.py": ((), "linear"),
    "fabric_loop.py": ((), "linear"),
    "upstream_loop.py": ((), "none"),  # scaled by hand, as upstream's examples do
}


@pytest.mark.parametrize("script", sorted(CORPUS))
def test_three_recurrences_train_what_the_server_dispatched(
    script: str, probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    extra, rule = CORPUS[script]
    prefix = unique_id("corpus").replace("-", "")
    argv = [arg.format(tmp=tmp_path) for arg in extra]
    runs = []
    for _ in range(3):
        status = run_script(script, "--job", prefix, *argv, failure_signal=True)
        assert status in (0, 1)  # a model, or none this recurrence
        runs.append(probe.take())
    trials = trials_of(server, prefix)
    assert len(trials) == 3
    check_runs(runs, trials, rule)
    sizes = [t["batch_size"] for t in trials]
    assert sizes[0] == REFERENCE  # the job's default first
    assert len(set(sizes)) >= 2, sizes  # the server explored: the checks saw other sizes


def test_a_lightning_cli_yaml_file_trains_what_the_server_dispatched(
    probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    prefix = unique_id("corpuscli").replace("-", "")
    config = tmp_path / "config.yaml"
    config.write_text((SCRIPTS / "lightning_cli.yaml").read_text().replace("corpus-cli", prefix))
    runs = []
    for _ in range(3):
        assert run_script("lightning_cli.py", "fit", "--config", str(config)) == 0
        runs.append(probe.take())
    trials = trials_of(server, prefix)
    check_runs(runs, trials)
    assert len({t["batch_size"] for t in trials}) >= 2


@pytest.mark.parametrize(
    "script", sorted(set(CORPUS) - {"upstream_loop.py"} | {"lightning_cli.py"})
)
def test_a_target_never_reached_reaches_the_caller(
    script: str, probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    """The scripts exit 1 when the run delivered no model (the LightningCLI fit, which returns
    nothing, through raise_if_unconverged in its YAML file)."""
    prefix = unique_id("corpusfail").replace("-", "")
    if script == "lightning_cli.py":
        config = tmp_path / "config.yaml"
        text = (SCRIPTS / "lightning_cli.yaml").read_text().replace("corpus-cli", prefix)
        text = text.replace("target_metric: 0.85", "target_metric: 0.999")
        config.write_text(
            text.replace("lr_rule: linear", "lr_rule: linear\n        raise_if_unconverged: true")
        )
        with pytest.raises(ZeusBSOTrainFailError, match="did not reach the target"):
            run_script(script, "fit", "--config", str(config))
    else:
        extra, _ = CORPUS[script]
        argv = [arg.format(tmp=tmp_path) for arg in extra]
        assert run_script(script, "--job", prefix, "--target", "0.999", *argv) == 1
    (trial,) = trials_of(server, prefix)
    assert (trial["status"], trial["converged"]) == ("reported", False)
    assert trial["epochs"] == 4  # its max_epochs, charged as a run that did not converge


def test_upstreams_loop_shape_gets_the_failure_signal_from_on_evaluate(
    probe: Probe, server: ServerProcess
) -> None:
    """No ``with``, no ``end()``: the report that ends the run raises, as upstream's does; and
    `until_converged` counts it as an attempt, goes on, and raises it when no attempt delivered
    a model."""
    prefix = unique_id("corpusup").replace("-", "")
    with pytest.raises(ZeusBSOTrainFailError) as raised:
        run_script("upstream_loop.py", "--job", prefix, "--target", "0.999")
    assert raised.value.outcome is not None
    assert raised.value.outcome.epochs == 4
    attempts = []

    def recurrence() -> None:
        attempts.append(1)
        run_script("upstream_loop.py", "--job", prefix, "--target", "0.999")

    with pytest.raises(ZeusBSOTrainFailError):
        until_converged(recurrence, attempts=2)
    assert len(attempts) == 2
    trials = trials_of(server, prefix)
    assert [(t["status"], t["converged"]) for t in trials] == [("reported", False)] * 3


@pytest.mark.parametrize("script", ["lightning_onecycle.py", "classic_pytorch_lightning.py"])
def test_out_of_memory_in_the_memory_check_moves_the_fit_and_its_schedule(
    script: str, probe: Probe, server: ServerProcess
) -> None:
    """The default, 16, runs out of memory when tried: the fit goes on at 8 with its DataLoader
    and schedule built for 8 (OneCycleLR sized from estimated_stepping_batches at 16's length
    would crash half-way, stepped more times than its total; the classic package's Trainer
    takes the callback as the new one's does)."""
    prefix = unique_id("corpusoom").replace("-", "")
    for _ in range(2):
        assert run_script(script, "--job", prefix, "--oom-above", "8", "--target", "0.6") == 0
        steps = probe.take()
        trial = trials_of(server, prefix)[-1]
        assert trial["batch_size"] == 8
        check_run(steps, trial)
    statuses = [(t["batch_size"], t["status"]) for t in trials_of(server, prefix)]
    assert statuses == [(16, "infeasible"), (8, "reported"), (8, "reported")]


def test_out_of_memory_in_the_hf_trainers_check_takes_smaller_micro_batches(
    probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    """The HF Trainer cannot change its batch size under way: micro-batches of 8 run out of
    memory in the check before training, the run stops uncharged, and `until_converged` starts
    the next, which takes 16 as four micro-batches of 4: every optimizer step still takes 16
    samples, at 16's rate."""
    prefix = unique_id("corpushfoom").replace("-", "")
    argv = ["--job", prefix, "--output-dir", str(tmp_path), "--oom-above", "4", "--attempts", "2"]
    assert run_script("hf_trainer.py", *argv) in (0, 1)
    steps = probe.take()
    first, second = trials_of(server, prefix)
    assert (first["batch_size"], first["status"]) == (16, "released")
    # The checks' steps, undone: after 8 ran out, one sample (does anything fit? it does, so
    # the size is to blame); then, in the next run, micro-batches of 4. Then the run's.
    tried = [s.samples for s in steps[: 2 * MEMORY_CHECK_STEPS]]
    assert tried == [1] * MEMORY_CHECK_STEPS + [4] * MEMORY_CHECK_STEPS
    check_run(steps[2 * MEMORY_CHECK_STEPS :], second)
    with ServerClient(server.url) as client:
        (job,) = client.list_jobs(prefix=f"{prefix}-")
        assert list(client.job_state(job["job_id"])["memory_caps"].values()) == [8]


@pytest.mark.parametrize("script", ["lightning_datamodule.py", "classic_pytorch_lightning.py"])
def test_a_resumed_fit_trains_its_trials_size_at_the_factor_once(
    script: str, probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    """A fit stopped after two epochs (a preemption's checkpoint), then resumed: it continues
    the trial at its batch size, and its steps take the factor once, not twice."""
    prefix = unique_id("corpusresume").replace("-", "")
    run = ["--job", prefix, "--target", "0.999", "--save-to", str(tmp_path)]
    assert run_script(script, *run, "--max-epochs", "2") == 1
    first = probe.take()
    resume = ["--max-epochs", "4", "--resume-from", str(tmp_path / "last.ckpt")]
    assert run_script(script, *run, *resume) == 1
    resumed = probe.take()
    trial, withdrawn = trials_of(server, prefix)
    assert withdrawn["status"] == "released"  # asked for before the checkpoint was read
    assert trial["epochs"] == 4  # two, then two more of the same trial
    check_run(first, trial)
    check_run(resumed, trial)
