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

import ast
import gc
import importlib.util
import logging
import os
import runpy
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the corpus needs torch (pip install torch)")
pytest.importorskip("lightning", reason="pip install 'zeus-bso[lightning]'")
pytest.importorskip("transformers", reason="pip install 'zeus-bso[hf]'")

import torch

from tests.helpers import ServerProcess, kept_environment, unique_id
from tests.scripts.hardware import ACCELERATOR, ON_CPU, PRECISION
from tests.scripts.probe import Probe, Step
from zeus_bso import until_converged
from zeus_bso.client import ServerClient
from zeus_bso.errors import BatchSizeDoesNotFitError, ConfigurationError, ZeusBSOTrainFailError
from zeus_bso.wire.reads import JobView

SCRIPTS = Path(__file__).parent
ROOT = SCRIPTS.parent.parent
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
        with kept_environment():  # what its imports set is not the worker's after
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


def run_apart(name: str, *argv: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``tests/scripts/<name>`` as ``python <name> argv...`` in a process of its own, the
    repository first on its ``PYTHONPATH`` (a script imports ``tests.scripts``) and what was
    there kept (zeus-bso itself may be installed there)."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(SCRIPTS / name), *argv],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_killed(name: str, *argv: str) -> None:
    """Run ``tests/scripts/<name>`` in a child process that its ``--kill-at-epoch`` fault
    SIGKILLs (forked from this one, whose imports it shares: it starts at once, and nothing of
    it runs after the kill; on a GPU, where CUDA cannot start again in a forked child, started
    afresh)."""
    if not ON_CPU:
        killed = run_apart(name, *argv, timeout=300)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
        return
    pid = os.fork()
    if pid == 0:  # the child, which never returns into the tests
        status = 3  # it raised
        try:
            status = 4 + run_script(name, *argv, failure_signal=True)  # it was not killed
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status), f"not killed: exit status {os.waitstatus_to_exitcode(status)}"
    assert os.WTERMSIG(status) == signal.SIGKILL


def cli_config(
    path: Path,
    prefix: str,
    *,
    target: float | str | None = None,
    callbacks: str = "",
    **more: str,
) -> Path:
    """``lightning_cli.yaml`` for the job ``prefix``, at ``path``: with another ``target``,
    more ``callbacks`` (YAML list items), and more of the callback's init arguments."""
    text = (SCRIPTS / "lightning_cli.yaml").read_text().replace("corpus-cli", prefix)
    text = text.replace("accelerator: cpu", f"accelerator: {ACCELERATOR}\n  precision: {PRECISION}")
    if target is not None:
        text = text.replace("target_metric: 0.85", f"target_metric: {target}")
    for name, value in more.items():
        text = text.replace("lr_rule: linear", f"lr_rule: linear\n        {name}: {value}")
    if callbacks:
        text = text.replace("enable_checkpointing: false", "enable_checkpointing: true")
        text += callbacks
    path.write_text(text)
    return path


def job_id_of(server: ServerProcess, prefix: str) -> str:
    """The id of the one job of ``prefix``."""
    with ServerClient(server.url) as client:
        (job,) = client.list_jobs(prefix=f"{prefix}-")
    return job.job_id


def job_of(server: ServerProcess, prefix: str) -> JobView:
    """The view of the one job of ``prefix``."""
    with ServerClient(server.url) as client:
        return client.job(job_id_of(server, prefix))


def trials_of(server: ServerProcess, prefix: str) -> list[dict[str, Any]]:
    """The trials of the one job of ``prefix``, oldest first."""
    with ServerClient(server.url) as client:
        trials = client.job_state(job_id_of(server, prefix))["trials"]
    return sorted(trials, key=lambda t: t["trial_number"])


def check_run(
    steps: list[Step],
    trial: dict[str, Any],
    rule: str = "linear",
    *,
    tried: bool = False,
    beside: int = 0,
    texts: int = 1,
) -> None:
    """What one run must hold: it trained ``trial``'s batch size at every optimizer step, at
    the schedule's rate times the rule's factor at every step, and was charged so.
    ``tried``: the run's batch size was new on this hardware, so its fit began with the memory
    check's steps, which are undone (`MEMORY_CHECK_STEPS`, of a micro-batch each where the
    run accumulates): they are not the run's. ``beside``: the samples each step trains beside
    the batch size's (another train DataLoader's, of a fixed size). ``texts``: the texts each
    sample trains (a preference pair's two answers)."""
    size = trial["batch_size"]
    if tried:
        steps = steps[MEMORY_CHECK_STEPS:]
    assert steps, "the run took no optimizer step"
    assert [s.samples for s in steps] == [size * texts + beside] * len(steps), trial
    factor = size / REFERENCE if rule == "linear" else 1.0
    factors = [s.factor for s in steps if s.schedule > 1e-6]
    assert factors, steps
    assert factors == pytest.approx([factor] * len(factors), rel=2e-3), (size, steps)
    assert trial["status"] == "reported", trial
    assert trial["epochs"] >= 1


def check_runs(
    runs: list[list[Step]],
    trials: list[dict[str, Any]],
    rule: str = "linear",
    beside: int = 0,
    texts: int = 1,
) -> None:
    """`check_run` for each run of a job and its trial, in order."""
    seen: set[int] = set()
    for steps, trial in zip(runs, trials, strict=True):
        tried = trial["batch_size"] not in seen
        check_run(steps, trial, rule, tried=tried, beside=beside, texts=texts)
        seen.add(trial["batch_size"])


# Each script, the arguments it needs besides --job, and the lr rule it trains with.
CORPUS = {
    "lightning_onecycle.py": ((), "linear"),
    "lightning_warmup_cosine.py": ((), "linear"),  # 'auto' on SGD
    "lightning_step_warmup.py": ((), "linear"),  # its docs' warm-up in optimizer_step
    "lightning_hparams_warmup.py": ((), "linear"),  # its tutorial's: hparams.warmup_steps
    "lightning_datamodule.py": ((), "linear"),
    "lightning_plateau.py": ((), "linear"),  # ReduceLROnPlateau on the validation loss
    "lightning_iterable.py": ((), "linear"),  # a stream: max_steps, val_check_interval batches
    "lightning_fit_loaders.py": ((), "linear"),  # trainer.fit(model, train_loader, val_loader)
    "classic_pytorch_lightning.py": ((), "linear"),
    "hf_trainer.py": (("--output-dir", "{tmp}"), "linear"),
    "hf_weighted_loss.py": (("--output-dir", "{tmp}"), "linear"),  # compute_loss of its own
    # Seq2SeqTrainer, its evaluation generating (run_translation.py, run_summarization.py)
    "hf_seq2seq.py": (("--output-dir", "{tmp}"), "linear"),
    "accelerate_loop.py": ((), "linear"),
    "accelerate_accumulate.py": ((), "linear"),  # accelerator.accumulate, micro-batches of 8
    "accelerate_find_batch_size.py": ((), "linear"),  # its memory.py: find_executable_batch_size
    "fabric_loop.py": ((), "linear"),
    "upstream_loop.py": ((), "none"),  # scaled by hand, as upstream's examples do
    "iteration_loop.py": ((), "linear"),  # nanoGPT's shape: iterations, eval_interval, get_lr
    "trl_sft.py": (("--output-dir", "{tmp}"), "linear"),
    "trl_dpo.py": (("--output-dir", "{tmp}"), "linear"),  # preference pairs: two texts each
    "peft_lora.py": (("--output-dir", "{tmp}"), "linear"),  # a LoRA adapter on a frozen model
    "hf_streaming.py": (("--output-dir", "{tmp}"), "linear"),  # no length: max_steps, eval_steps
    # Sentence Transformers' trainer: sentence pairs, judged by its evaluator's metric
    "st_embeddings.py": (("--output-dir", "{tmp}"), "linear"),
}


NEEDS = {
    "trl_sft.py": "trl",
    "trl_dpo.py": "trl",
    "peft_lora.py": "peft",
    "hf_streaming.py": "datasets",
    "st_embeddings.py": "sentence_transformers",
    "hf_seq2seq.py": "datasets",
}
"""A script's package beyond the corpus's own (the dev group installs it)."""
TEXTS = {"trl_dpo.py": 2, "st_embeddings.py": 2, "hf_seq2seq.py": 2}
"""The scripts whose every sample trains several texts (a preference pair's chosen and rejected
answers, a pair of sentences, a source and its target through the embedding the encoder and the
decoder share), and how many."""


APART = {"hf_streaming.py": 8 * 16, "lightning_iterable.py": 4 * 16, "iteration_loop.py": 6 * 16}
"""The scripts that evaluate every so many steps (batches) of the default's 16 samples, and the
samples between two evaluations: the same at every batch size."""
WARMUP = {"lightning_hparams_warmup.py": 4}
"""The scripts that warm up over a fixed number of steps at the default's 16 samples (a
transformers schedule's ``num_warmup_steps``), and how many: the same samples at every batch
size, so the schedule peaks after as many steps as hold them."""
PLAIN_LOOPS = {"upstream_loop.py", "iteration_loop.py"}
"""Loops on `BatchSizeOptimizer`, which tries no steps before the run (no memory check); they
train where their tensors are (the CPU), as upstream's examples do."""
HF_BESIDE = {
    *("trl_sft.py", "trl_dpo.py", "hf_weighted_loss.py", "peft_lora.py", "hf_streaming.py"),
    *("st_embeddings.py", "hf_seq2seq.py"),
}
"""HF Trainer scripts beside ``hf_trainer.py``, whose kill and resume it holds for them."""
ACCELERATE_BESIDE = {"accelerate_accumulate.py", "accelerate_find_batch_size.py"}
"""Accelerate scripts beside ``accelerate_loop.py``, whose kill and resume it holds for them."""


def needs(script: str) -> None:
    """Skip a test of ``script`` where its package is not installed, saying which."""
    if script in NEEDS and importlib.util.find_spec(NEEDS[script]) is None:  # not imported:
        pytest.skip(f"{script} needs pip install {NEEDS[script]}")  # the script imports it


@pytest.mark.parametrize("script", sorted(CORPUS))
def test_three_recurrences_train_what_the_server_dispatched(
    script: str, probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    needs(script)
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
    check_runs(runs, trials, rule, texts=TEXTS.get(script, 1))
    if script == "lightning_plateau.py":  # the factor held past a reduction of the rate
        assert any(len({step.schedule for step in steps}) > 1 for steps in runs)
    seen: set[int] = set()
    for steps, trial in zip(runs, trials, strict=True):  # each run's own steps, past its check
        tried = trial["batch_size"] not in seen and script not in PLAIN_LOOPS
        own = steps[MEMORY_CHECK_STEPS:] if tried else steps
        seen.add(trial["batch_size"])
        if script in APART:  # every evaluation the same samples apart, at any size
            assert sum(step.samples for step in own) == trial["epochs"] * APART[script], trial
        if script in WARMUP:  # the warm-up the same samples long, at any size
            rates = [step.schedule for step in own]
            warmup = round(WARMUP[script] * REFERENCE / trial["batch_size"])
            assert rates.index(max(rates)) == warmup, (trial, rates)
    trained_on = {step.device for steps in runs for step in steps}
    assert trained_on == {"cpu" if script in PLAIN_LOOPS else ACCELERATOR}  # theirs: the CPU
    sizes = [t["batch_size"] for t in trials]
    assert sizes[0] == REFERENCE  # the job's default first
    assert len(set(sizes)) >= 2, sizes  # the server explored: the checks saw other sizes


def test_manual_optimization_trains_what_the_server_dispatched(
    probe: Probe, server: ServerProcess
) -> None:
    """Two optimizers stepped by hand (``automatic_optimization = False``), each after its own
    forward pass, with schedules sized from ``estimated_stepping_batches``: every step of each
    takes the dispatched size at its schedule's rate times the factor. The memory check tries
    no steps of such a module (its steps cannot be tried alone), so none is set aside."""
    prefix = unique_id("corpus").replace("-", "")
    runs = []
    for _ in range(3):
        status = run_script("lightning_manual_optimization.py", "--job", prefix)
        assert status in (0, 1)
        runs.append(probe.take())
    trials = trials_of(server, prefix)
    assert len({t["batch_size"] for t in trials}) > 1  # the server moved the size
    for steps, trial in zip(runs, trials, strict=True):
        check_run(steps, trial)
        # Both optimizers stepped every batch: an even count, in pairs.
        assert len(steps) % 2 == 0


def test_a_dict_of_train_loaders_trains_what_the_server_dispatched_beside_a_fixed_one(
    probe: Probe, server: ServerProcess
) -> None:
    """``train_dataloader()`` returns a dict of DataLoaders (Lightning combines them), one at a
    fixed size and listed first, the other at the module's batch size: each step trains the
    dispatched size beside the fixed one's samples, at the factor of the dispatched size, and
    the memory check tries the combined steps. (The memory check had crashed on the dict; the
    first batch's check read the fixed DataLoader's size and refused every size but 8.)"""
    from tests.scripts.lightning_replay_loaders import REPLAY

    prefix = unique_id("corpus").replace("-", "")
    runs = []
    for _ in range(3):
        status = run_script("lightning_replay_loaders.py", "--job", prefix, failure_signal=True)
        assert status in (0, 1)
        runs.append(probe.take())
    trials = trials_of(server, prefix)
    check_runs(runs, trials, beside=REPLAY)
    assert len({t["batch_size"] for t in trials}) >= 2, trials


def test_a_per_device_size_derived_in_the_datamodules_setup_is_named_before_a_step_is_tried(
    probe: Probe, server: ServerProcess
) -> None:
    """The lightning-hydra-template's datamodule: its ``setup()``, which Lightning runs before
    any callback's, derives ``batch_size_per_device`` from ``hparams.batch_size``, and its
    DataLoaders read that. The callback sets ``batch_size``: at the default the two agree; at
    another size the run is refused before the memory check tries a step (its steps had tried
    the old size, and said the new one fit), uncharged, naming the attribute to set instead;
    set so, each run trains the size the server dispatched."""
    prefix = unique_id("corpus").replace("-", "")
    assert run_script("lightning_per_device.py", "--job", prefix) in (0, 1)  # at the default
    check_run(probe.take(), trials_of(server, prefix)[0], tried=True)
    with pytest.raises(ConfigurationError, match="batch_arg_name='batch_size_per_device'"):
        run_script("lightning_per_device.py", "--job", prefix)
    assert probe.take() == []  # not a step, tried or trained
    _, refused = trials_of(server, prefix)
    assert (refused["status"], refused["batch_size"] == REFERENCE) == ("released", False)
    prefix = unique_id("corpus").replace("-", "")
    runs = []
    for _ in range(3):
        argv = ("--job", prefix, "--batch-arg-name", "batch_size_per_device")
        assert run_script("lightning_per_device.py", *argv) in (0, 1)
        runs.append(probe.take())
    trials = trials_of(server, prefix)
    check_runs(runs, trials)
    assert len({t["batch_size"] for t in trials}) >= 2, trials


def test_an_hf_script_of_parsed_arguments_and_its_optimizer_trains_what_was_dispatched(
    probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    """As the Transformers examples are written: TrainingArguments parsed from a command line
    (``HfArgumentParser``) at a size of its own, ``start()``'s set on them after, and
    ``Trainer(optimizers=(optimizer, schedule))``, the schedule's length from that size; every
    step trains the dispatched size (in micro-batches) at the schedule's rate times the factor,
    warm-up included."""
    prefix = unique_id("corpus").replace("-", "")
    runs = []
    for _ in range(3):
        argv = ("--job", prefix, "--output-dir", str(tmp_path), "--own-optimizer")
        status = run_script("hf_trainer.py", *argv, failure_signal=True)
        assert status in (0, 1)
        runs.append(probe.take())
    check_runs(runs, trials_of(server, prefix))


def test_an_hf_trainer_evaluating_several_datasets_reports_the_one_its_metric_names(
    probe: Probe, server: ServerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``eval_dataset`` a dict: the Trainer evaluates each dataset apart, its metrics prefixed
    with its name, the training data first. The run's metric is the second's: each evaluation
    reports it (the first dataset's evaluation raised before, its metrics lacking it), every
    step trains the dispatched size, and a metric that no dataset gives is named with every
    dataset's metrics, the trial released."""
    prefix = unique_id("corpus").replace("-", "")
    argv = ("--job", prefix, "--output-dir", str(tmp_path), "--eval-sets")
    runs, held_out = [], []
    for _ in range(2):
        capsys.readouterr()
        assert run_script("hf_trainer.py", *argv, failure_signal=True) in (0, 1)
        runs.append(probe.take())
        printed = [  # the Trainer prints each evaluation's metrics (disable_tqdm)
            ast.literal_eval(line) for line in capsys.readouterr().out.splitlines()
            if line.startswith("{") and "eval_held_out_accuracy" in line
        ]  # fmt: skip
        held_out.append(float(printed[-1]["eval_held_out_accuracy"]))
    trials = trials_of(server, prefix)
    check_runs(runs, trials)
    assert [t["metric"] for t in trials] == pytest.approx(held_out, abs=1e-4)
    with pytest.raises(ConfigurationError) as refused:
        run_script("hf_trainer.py", *argv, "--metric", "eval_accuracy")
    said = str(refused.value)
    assert "'eval_accuracy' is not among" in said
    assert "'eval_seen_accuracy'" in said
    assert "'eval_held_out_accuracy'" in said
    assert trials_of(server, prefix)[-1]["status"] == "released"


def test_a_lightning_cli_yaml_file_trains_what_the_server_dispatched(
    probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    prefix = unique_id("corpuscli").replace("-", "")
    config = cli_config(tmp_path / "config.yaml", prefix)
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
    needs(script)
    prefix = unique_id("corpusfail").replace("-", "")
    if script == "lightning_cli.py":
        path = tmp_path / "config.yaml"
        config = cli_config(path, prefix, target=0.999, raise_if_unconverged="true")
        with pytest.raises(ZeusBSOTrainFailError, match="did not reach the target"):
            run_script(script, "fit", "--config", str(config))
    else:
        extra, _ = CORPUS[script]
        argv = [arg.format(tmp=tmp_path) for arg in extra]
        assert run_script(script, "--job", prefix, "--target", "0.999", *argv) == 1
    (trial,) = trials_of(server, prefix)
    assert (trial["status"], trial["converged"]) == ("reported", False)
    assert trial["epochs"] == 4  # its max_epochs, charged as a run that did not converge


CLI_STOPS_EARLY = """\
    - class_path: lightning.pytorch.callbacks.EarlyStopping
      init_args:
        monitor: val_acc
        mode: max
        patience: 0
        min_delta: 1.0
"""
"""An EarlyStopping that ends every fit after its second validation (no epoch improves by 1)."""


def test_early_stopping_in_a_lightning_cli_yaml_file_counts_against_the_size(
    probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    """A LightningCLI fit whose YAML file adds Lightning's EarlyStopping, as such files do: the
    fit it ends below the target did not converge at its size, charged as if it had trained
    the job's max_epochs, and the next recurrence explores another size."""
    prefix = unique_id("corpusstop").replace("-", "")
    config = cli_config(tmp_path / "config.yaml", prefix, target=0.999)
    config.write_text(config.read_text() + CLI_STOPS_EARLY)  # no checkpoints: none to write
    runs = []
    for _ in range(2):
        assert run_script("lightning_cli.py", "fit", "--config", str(config)) == 0
        runs.append(probe.take())
    first, second = trials_of(server, prefix)
    check_runs(runs, [first, second])
    assert (first["converged"], first["epochs"]) == (False, 2)
    assert first["batch_size"] == REFERENCE
    assert second["batch_size"] != REFERENCE


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


LIGHTNING = [
    "lightning_onecycle.py",
    "lightning_fit_loaders.py",
    "lightning_warmup_cosine.py",
    "lightning_datamodule.py",
    "classic_pytorch_lightning.py",
    "lightning_cli.py",
]


def lightning_run(script: str, prefix: str, tmp_path: Path, *argv: str) -> int:
    """Run a Lightning script of the job ``prefix`` at a target of 0.6, which its fits at
    batch size 8 reach (the LightningCLI one from its YAML file; ``argv``: the CLI's own
    arguments)."""
    if script != "lightning_cli.py":
        return run_script(script, "--job", prefix, "--target", "0.6", *argv)
    config = cli_config(tmp_path / "config.yaml", prefix, target=0.6)
    return run_script(script, "fit", "--config", str(config), *argv)


@pytest.mark.parametrize("script", LIGHTNING)
def test_out_of_memory_in_the_memory_check_moves_the_fit_and_its_schedule(
    script: str, probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    """The default, 16, runs out of memory when tried: the fit goes on at 8 with its DataLoader
    and schedule built for 8 (OneCycleLR sized from estimated_stepping_batches at 16's length
    would crash half-way, stepped more times than its total; the classic package's Trainer
    takes the callback as the new one's does)."""
    prefix = unique_id("corpusoom").replace("-", "")
    oom = ["--model.oom_above", "8"] if script == "lightning_cli.py" else ["--oom-above", "8"]
    for _ in range(2):
        assert lightning_run(script, prefix, tmp_path, *oom) == 0
        steps = probe.take()
        trial = trials_of(server, prefix)[-1]
        assert trial["batch_size"] == 8
        check_run(steps, trial)
    statuses = [(t["batch_size"], t["status"]) for t in trials_of(server, prefix)]
    assert statuses == [(16, "infeasible"), (8, "reported"), (8, "reported")]


@pytest.mark.parametrize("script", ["accelerate_loop.py", "fabric_loop.py", "upstream_loop.py"])
def test_out_of_memory_while_a_loop_trains_is_infeasible_and_the_next_run_fits(
    script: str, probe: Probe, server: ServerProcess
) -> None:
    """A hand-written loop has no memory check: its first step at 16 runs out of memory, and
    the error ends the run (the adapter's ``with``; upstream's loop shape has none, and dies of
    it, uncaught: the trial is marked at exit, in a process of its own). The trial is marked
    infeasible, not failed, and the next run trains at 8."""
    prefix = unique_id("corpusloopoom").replace("-", "")
    argv = ["--job", prefix, "--oom-above", "8", "--target", "0.6"]
    if script == "upstream_loop.py":
        died = run_apart(script, *argv, timeout=120)
        assert died.returncode == 1, died.stderr
        assert "OutOfMemoryError: CUDA out of memory" in died.stderr
    else:
        with pytest.raises(torch.OutOfMemoryError):
            run_script(script, *argv)
    probe.take()
    assert run_script(script, *argv, failure_signal=True) == 0
    infeasible, trial = trials_of(server, prefix)
    assert (infeasible["batch_size"], infeasible["status"]) == (16, "infeasible")
    assert trial["batch_size"] == 8
    check_run(probe.take(), trial, CORPUS[script][1])


@pytest.mark.parametrize(
    "more", [(), ("--keep-memory",), ("--rate-by-hand",), ("--accumulate-to-start",)], ids=str
)
def test_a_loop_that_finds_an_executable_batch_size_goes_on_outside_the_optimizer(
    more: tuple[str, ...], probe: Probe, server: ServerProcess
) -> None:
    """Accelerate's ``memory.py`` shape: the loop under ``find_executable_batch_size`` runs out
    of memory at the dispatched 16 and is called again at 14, 12, 10 and 9 (each out of memory
    at its first step) and 8, which trains. The run goes on outside the optimizer: 16's trial is
    infeasible (it was reported as 16's, converged, at 8's cost), every step at 8 takes 8's
    rate by the linear rule (it took 16's), the run stops at the target, and the next run is
    dispatched 8 (it was sent 32). Also where the loop keeps what it prepared before (no
    ``free_memory()``), where it builds its optimizer at ``bso.learning_rate``'s rate, and where
    its accelerator accumulates 16 over batches of 8 (Accelerate's automatic gradient
    accumulation: the run goes on at 16, outside the optimizer, at 16's rate)."""
    prefix = unique_id("corpusfind").replace("-", "")
    argv = ["--job", prefix, "--oom-above", "8", "--target", "0.6", *more]
    assert run_script("accelerate_find_batch_size.py", *argv) == 0  # its target, at 8
    went_on = probe.take()
    (ran_out,) = trials_of(server, prefix)
    assert (ran_out["batch_size"], ran_out["status"]) == (16, "infeasible")
    assert run_script("accelerate_find_batch_size.py", *argv) == 0
    trial = trials_of(server, prefix)[-1]
    assert trial["batch_size"] == 8
    dispatched = probe.take()
    if "--rate-by-hand" not in more:  # its schedule's rates are 16's: the factor is the rule's
        check_run(dispatched, trial)
    if "--accumulate-to-start" in more:  # 2 micro-batches of 8 a step: 16, at 16's rate
        assert went_on
        assert {step.samples for step in went_on} == {16}
        factors = [step.factor for step in went_on if step.schedule > 1e-6]
        assert factors == pytest.approx([1.0] * len(factors), rel=2e-3)  # it took 8's
        return
    if "--rate-by-hand" not in more:
        check_run(went_on, trial)  # as the run dispatched 8 (outside the optimizer: no trial)
    # The same model, data and schedule at 8: the run outside the optimizer took the rates of
    # the run the server dispatched 8 to, step by step.
    taken = [step.taken for step in dispatched]
    assert {step.samples for step in went_on} == {8}
    assert [step.taken for step in went_on[: len(taken)]] == pytest.approx(taken[: len(went_on)])


def modules_alive() -> list[torch.nn.Module]:
    """The torch modules with weights alive in this process, after a collection (not those a
    package keeps from its first import: transformers' activations)."""
    gc.collect()
    return [
        o
        for o in gc.get_objects()
        if isinstance(o, torch.nn.Module) and next(o.parameters(), None) is not None
    ]


RAN_OUT_MID_RUN = {
    "upstream_loop.py": ("--oom-above", "8"),  # no memory check: its first step
    "accelerate_loop.py": ("--oom-above", "8"),
    # After the memory check's steps, which fit, and one of the run's.
    "lightning_datamodule.py": ("--oom-above", "8", "--oom-after", "4"),
    "hf_weighted_loss.py": ("--output-dir", "{tmp}", "--oom-above", "8", "--oom-after", "4"),
}


@pytest.mark.parametrize("script", sorted(RAN_OUT_MID_RUN))
def test_out_of_memory_while_it_trains_starts_until_convergeds_next_attempt_at_a_size_that_fits(
    script: str, probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    """A recurrence run by `until_converged` whose run at 16 runs out of memory while it
    trains goes on with the next attempt, in the same process, at a size that fits: the error
    ends the run as infeasible where the entry point hears of it (Lightning's callback, the
    ``with`` of Accelerate's adapter), and, where nothing does (the HF Trainer calls no callback
    when ``train()`` raises; upstream's loop shape has no ``with``), the next attempt's start
    ends the run left open by the error `until_converged` caught. Before, the error ended the
    recurrence with no model. Nothing holds the failed run's model (on a GPU, its memory) when
    the recurrence is over: the error kept to judge the run left open holds no frame's locals."""
    prefix = unique_id("corpusretry").replace("-", "")
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in RAN_OUT_MID_RUN[script]]
    before = modules_alive()  # held here, so that no new one takes one's id
    assert run_script(script, "--job", prefix, "--target", "0.6", "--attempts", "3", *argv) == 0
    known = {id(module) for module in before}
    assert [module for module in modules_alive() if id(module) not in known] == []
    steps = probe.take()
    ran_out, trial = trials_of(server, prefix)
    assert (ran_out["batch_size"], ran_out["status"]) == (16, "infeasible")
    assert trial["batch_size"] == 8
    second = steps[max((i for i, s in enumerate(steps) if s.samples == 16), default=-1) + 1 :]
    tried = script in {"lightning_datamodule.py", "hf_weighted_loss.py"}  # a memory check
    check_run(second, trial, CORPUS[script][1], tried=tried)


def test_out_of_memory_in_validation_is_not_charged_to_the_batch_size(
    server: ServerProcess, probe: Probe, caplog: pytest.LogCaptureFixture
) -> None:
    """A fit whose validation runs out of memory after its first epoch trained (what the
    validation gathers, not the training's batches): the training's batch size fits, so its
    trial is released, the job's memory cap is left alone, and `until_converged` raises the
    error rather than start again, which would run out the same way at any size and, before,
    lowered the cap an attempt at a time."""
    prefix = unique_id("corpusvaloom").replace("-", "")
    argv = ["--job", prefix, "--attempts", "3", "--oom-in-validation"]
    with caplog.at_level(logging.WARNING, logger="zeus_bso"), pytest.raises(torch.OutOfMemoryError):
        run_script("lightning_datamodule.py", *argv)
    probe.take()
    (trial,) = trials_of(server, prefix)
    assert (trial["batch_size"], trial["status"]) == (16, "released")
    assert "ran out of memory in evaluation" in caplog.text
    assert "per_device_eval_batch_size" in caplog.text  # what to change
    assert job_of(server, prefix).memory_caps == {}


def test_out_of_memory_in_the_hf_trainers_evaluation_is_not_charged_at_the_processs_exit(
    server: ServerProcess, probe: Probe, tmp_path: Path
) -> None:
    """The HF Trainer's evaluation runs out of memory (its own batch size, the logits it
    gathers), in a script without ``with callback:`` under `until_converged`: the Trainer tells
    the callback nothing, the error is raised at once (no attempt at another size), and the
    process's exit judges it by where it came from, the Trainer's evaluation: the trial is
    released, not infeasible, and the job's memory cap is left alone."""
    prefix = unique_id("corpushfevaloom").replace("-", "")
    argv = ["--job", prefix, "--output-dir", str(tmp_path), "--attempts", "3"]
    died = run_apart("hf_weighted_loss.py", *argv, "--oom-in-evaluation", timeout=180)
    assert died.returncode == 1, died.stderr
    assert "OutOfMemoryError: CUDA out of memory" in died.stderr
    assert "ran out of memory in evaluation" in died.stderr
    (trial,) = trials_of(server, prefix)
    assert (trial["batch_size"], trial["status"]) == (16, "released")
    assert job_of(server, prefix).memory_caps == {}


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
    assert list(job_of(server, prefix).memory_caps.values()) == [8]


def test_the_hf_memory_check_takes_the_longest_texts_before_the_run_trains(
    probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    """A fine-tune of texts of many lengths: batches of 16 fit where their texts are short, and
    run out of memory where one of the longer texts pads them (that batch may come at any step
    of an epoch). The memory check tries the 16 longest texts, so it finds that before the run
    trains, and the next run trains at 8, which fits every batch. Before, the check tried the
    first batches drawn, all short here: it passed, and the run ran out of memory mid-epoch,
    its training lost."""
    needs("trl_sft.py")
    prefix = unique_id("corpussftlong").replace("-", "")
    argv = ["--job", prefix, "--output-dir", str(tmp_path), "--longer", "1"]
    more = ["--oom-above-tokens", "230", "--attempts", "2"]  # 16 x 13 tokens fit; 16 x 16 not
    assert run_script("trl_sft.py", *argv, *more) in (0, 1)
    steps = probe.take()
    first, second = trials_of(server, prefix)
    assert (first["batch_size"], first["status"]) == (16, "infeasible")
    assert first.get("epochs") in (None, 0)
    # 16 ran out at its check's first step; then the job's smallest size, 8, on its longest
    # texts, which fits: the size is to blame.
    assert [s.samples for s in steps[:MEMORY_CHECK_STEPS]] == [8] * MEMORY_CHECK_STEPS
    assert 16 not in {s.samples for s in steps}  # no step of 16 was taken, tried or trained
    check_run(steps[MEMORY_CHECK_STEPS:], second, tried=True)
    assert list(job_of(server, prefix).memory_caps.values()) == [16]


def test_a_size_in_doubt_after_its_texts_grew_is_capped_at_its_check_not_mid_run(
    probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    """A daily fine-tune pinned to 16, whose new data holds a longer text: 16 trained on these
    GPUs before, so it is not checked, and the run runs out of memory mid-epoch (its trial
    released, 16's fit in doubt). The next run's check tries 16's longest texts and caps it
    before a step: one run lost, not two (the check of the first batches drawn, all short,
    passed, and the next run ran out mid-epoch again)."""
    needs("trl_sft.py")
    prefix = unique_id("corpussftgrew").replace("-", "")
    argv = ["--job", prefix, "--output-dir", str(tmp_path), "--oom-above-tokens", "230"]
    assert run_script("trl_sft.py", *argv) in (0, 1)  # texts of one length: 16 fits
    with ServerClient(server.url) as client:
        client.pin(job_id_of(server, prefix), 16)
    # The script dies of the error, uncaught, as any would: its run is judged at exit.
    died = run_apart("trl_sft.py", *argv, "--longer", "1", timeout=120)
    assert died.returncode == 1, died.stderr
    assert "ran out of memory although it trained on this machine before" in died.stderr
    assert trials_of(server, prefix)[-1]["status"] == "released"
    probe.take()
    with pytest.raises(BatchSizeDoesNotFitError):  # the one attempt the script allows
        run_script("trl_sft.py", *argv, "--longer", "1")
    assert 16 not in {s.samples for s in probe.take()}  # capped at its check
    statuses = [(t["batch_size"], t["status"]) for t in trials_of(server, prefix)]
    assert statuses == [(16, "reported"), (16, "released"), (16, "infeasible")]
    shown = job_of(server, prefix)
    assert (shown.memory_caps, shown.memory_doubts) == ({shown.profiles[0]: 16}, {})


def test_the_hf_memory_check_takes_the_trainers_own_loss(
    probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    """A Trainer subclass whose ``compute_loss`` holds more than the model's forward (a
    teacher's, a second view's): its micro-batches of 8 run out of memory there. The memory
    check takes the Trainer's loss, so it finds that before the run trains, and the next run
    trains 16 as micro-batches of 4. Before, the check ran the model's forward alone, which
    fits; the run ran out at its first step, and 16 was marked infeasible on these GPUs,
    though accumulation would train it. The job's next run, like these (they accumulate), is
    not refused: the memory cap holds no size back from micro-batches."""
    prefix = unique_id("corpushfloss").replace("-", "")
    argv = ["--job", prefix, "--output-dir", str(tmp_path), "--target", "0.75"]
    more = ["--max-micro-batch-size", "8", "--oom-in-loss-above", "4", "--attempts", "2"]
    assert run_script("hf_weighted_loss.py", *argv, *more) == 0
    steps = probe.take()
    first, second = trials_of(server, prefix)
    assert (first["batch_size"], first["status"]) == (16, "released")
    assert second["batch_size"] == 16
    tried = [s.samples for s in steps[: 2 * MEMORY_CHECK_STEPS]]
    assert tried == [1] * MEMORY_CHECK_STEPS + [4] * MEMORY_CHECK_STEPS
    check_run(steps[2 * MEMORY_CHECK_STEPS :], second)
    shown = job_of(server, prefix)
    assert list(shown.memory_caps.values()) == [8]
    # Its runs accumulate: the next one is not refused for want of a size under the cap.
    assert shown.next_run is not None
    assert not shown.next_run.refused


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


KILL_AT = 2
"""The epoch (from 0) whose start the kill tests' second run is killed at: two were reported."""
TRAIN_SAMPLES = 96
"""The samples every script trains on, an epoch."""
CLI_KILLS = f"""\
    - class_path: tests.scripts.lightning_faults.KillAtEpoch
      init_args:
        epoch: {KILL_AT}
"""
CLI_SAVES = """\
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args:
        dirpath: {dir}
        save_last: true
"""
AFTER_REPORT = ("--kill-after-report",)


def three_runs(
    script: str, prefix: str, tmp_path: Path, more: tuple[str, ...], kill_more: tuple[str, ...]
) -> tuple[list[str], ...]:
    """The arguments of ``script``'s three runs for the kill tests: a first run, one killed at
    `KILL_AT` that saves its checkpoints, and that one resumed from the last of them
    (upstream's loop shape saves none: its run is launched again with the same run key);
    ``more``: every run's arguments, ``kill_more``: the killed one's."""
    saves = tmp_path / "saves"
    job = ["--job", prefix, "--target", "0.999", *more]
    kill = ["--kill-at-epoch", str(KILL_AT), *kill_more]
    if script == "lightning_cli.py":  # the failure signal from the fit, which returns nothing
        saving = CLI_SAVES.format(dir=saves)
        config = {"target": "0.999", "raise_if_unconverged": "true"}
        first = cli_config(tmp_path / "first.yaml", prefix, **config)
        killed = cli_config(tmp_path / "k.yaml", prefix, callbacks=saving + CLI_KILLS, **config)
        resumed = cli_config(tmp_path / "r.yaml", prefix, callbacks=saving, **config)
        return (
            ["fit", "--config", str(first)],
            ["fit", "--config", str(killed)],
            ["fit", "--config", str(resumed), "--ckpt_path", str(saves / "last.ckpt")],
        )
    if script == "hf_trainer.py":
        run = [*job, "--output-dir", str(saves), "--save"]
        return [*job, "--output-dir", str(tmp_path / "first")], [*run, *kill], [*run, "--resume"]
    if script == "hf_example_script.py":  # launched again as it was: it finds its checkpoint
        run = [*job, "--output_dir", str(saves), "--save_strategy", "epoch"]
        return [*job, "--output_dir", str(tmp_path / "first")], [*run, *kill], run
    if script == "upstream_loop.py":
        return job, [*job, *kill], job
    run = [*job, "--save-to", str(saves)]
    last = saves if script == "accelerate_loop.py" else saves / "last.ckpt"
    return job, [*run, *kill], [*run, "--resume-from", str(last)]


@pytest.mark.parametrize(
    ("script", "more", "kill_more"),
    [
        *(
            pytest.param(script, (), (), id=script)
            # HF Trainers' (hf_trainer.py holds their kill and resume), and
            # the Accelerate ones beside accelerate_loop.py (its)
            # and lightning_iterable.py, iteration_loop.py (no epoch to kill them at)
            for script in sorted(
                {*CORPUS, "lightning_cli.py", "hf_example_script.py"}
                - HF_BESIDE
                - ACCELERATE_BESIDE
                - {"lightning_iterable.py", "iteration_loop.py"}
            )
        ),
        # FSDP's order: the optimizers built before the checkpoint is read
        pytest.param("lightning_onecycle.py", ("--restores-late",), (), id="restores-late"),
        # The checkpoint an epoch behind the server (a deeper rewind, on the plain client:
        # tests/client/test_optimizer.py)
        *(
            pytest.param(script, (), AFTER_REPORT, id=f"{script}-after-report")
            for script in ("lightning_datamodule.py", "fabric_loop.py")
        ),
    ],
)
def test_a_run_killed_then_resumed_continues_its_trial_at_the_factor_once(
    script: str,
    more: tuple[str, ...],
    kill_more: tuple[str, ...],
    probe: Probe,
    server: ServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The job's second run, at a size other than the default (a factor other than 1), is
    SIGKILLed at the start of its third epoch, after two were reported and checkpointed; then
    the run resumed from the checkpoint (or, for upstream's loop shape, launched again with its
    run key) trains the two epochs left of the same trial, at its batch size and at the factor
    once, and the trial is charged for its four epochs once. Also where the checkpoint is read
    after the strategy's setup (FSDP, DeepSpeed, ModelParallel): the fit's new trial is
    withdrawn after its optimizers were built; and where the kill came after the third epoch's
    report, before its checkpoint: the epoch is trained again, and the lost one's time and
    energy count."""
    prefix = unique_id("corpuskill").replace("-", "")
    first, killed, resumed = three_runs(script, prefix, tmp_path, more, kill_more)
    assert run_script(script, *first, failure_signal=True) == 1
    monkeypatch.setenv("ZEUS_BSO_RUN_KEY", f"{prefix}-run")  # what upstream's shape resumes by
    run_killed(script, *killed)
    trial = trials_of(server, prefix)[-1]
    reported = KILL_AT + (1 if kill_more == AFTER_REPORT else 0)
    assert (trial["status"], trial["epochs"]) == ("dispatched", reported)  # nothing sent since
    assert trial["batch_size"] != REFERENCE
    if script != "upstream_loop.py":  # the others resume from their checkpoints
        monkeypatch.delenv("ZEUS_BSO_RUN_KEY")
    probe.take()
    assert run_script(script, *resumed, failure_signal=True) == 1  # no model
    steps = probe.take()
    trials = trials_of(server, prefix)[1:]
    assert trials[0]["trial_number"] == trial["trial_number"]
    trained = trials[0]
    assert (trained["epochs"], trained["status"], trained["converged"]) == (4, "reported", False)
    assert trained["time"] > trial["time"]
    if ON_CPU:
        assert trained["energy"] > trial["energy"]
    else:  # a GPU's energy counter moves every 100 ms or so: these epochs are quicker
        assert trained["energy"] >= trial["energy"]
    # Lightning's fit asks for a trial before it reads the checkpoint, and gives it back.
    assert [t["status"] for t in trials[1:]] in ([], ["released"])
    size = trained["batch_size"]
    assert len(steps) == (4 - KILL_AT) * (TRAIN_SAMPLES // size)  # the epochs left, not four
    check_run(steps, trained, CORPUS.get(script, ((), "linear"))[1])


def test_an_hf_example_scripts_checkpoints_are_resumed_while_their_trial_is_open(
    probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    """A script written as the Transformers examples are (``hf_example_script.py``: the last
    checkpoint in ``output_dir`` detected, or the arguments' ``--resume_from_checkpoint``,
    given to ``trainer.train``; the callback given none). A run killed there and launched again
    without its checkpoint (v4's ``--overwrite_output_dir``) trains its trial again from the
    first epoch: what it reported before counts. A recurrence launched there once that trial
    ended would resume its final checkpoint: refused, saying why, and nothing counted. A
    checkpoint the arguments name continues its trial in another ``output_dir``."""
    prefix = unique_id("corpusexample").replace("-", "")
    job = ["--job", prefix, "--target", "0.999"]
    saves = ["--output_dir", str(tmp_path / "saves"), "--save_strategy", "epoch"]
    assert (
        run_script(
            "hf_example_script.py",
            *job,
            "--output_dir",
            str(tmp_path / "first"),
            failure_signal=True,
        )
        == 1
    )
    run_killed("hf_example_script.py", *job, *saves, "--kill-at-epoch", str(KILL_AT))
    killed = trials_of(server, prefix)[-1]
    assert (killed["status"], killed["epochs"]) == ("dispatched", KILL_AT)
    probe.take()
    assert (
        run_script("hf_example_script.py", *job, *saves, "--from-scratch", failure_signal=True) == 1
    )
    steps = probe.take()
    trials = trials_of(server, prefix)
    assert len(trials) == 2  # the killed run's trial went on, from scratch
    trained = trials[-1]
    assert trained["trial_number"] == killed["trial_number"]
    assert (trained["epochs"], trained["status"]) == (4, "reported")
    assert trained["time"] > killed["time"]
    assert len(steps) == 4 * (TRAIN_SAMPLES // trained["batch_size"])  # four epochs anew
    check_run(steps, trained)

    with pytest.raises(ConfigurationError) as refused:  # the ended trial's last checkpoint
        run_script("hf_example_script.py", *job, *saves)
    words = str(refused.value)
    assert f"holds trial {trained['trial_number']} of job {trained['job_id']}" in words
    assert "which is reported" in words
    assert "give each run an output_dir of its own" in words
    assert [t["status"] for t in trials_of(server, prefix)[2:]] == ["released"]  # not counted

    named = ["--output_dir", str(tmp_path / "named"), "--save_strategy", "epoch"]
    run_killed("hf_example_script.py", *job, *named, "--kill-at-epoch", str(KILL_AT))
    again = trials_of(server, prefix)[-1]
    last = max((tmp_path / "named").glob("checkpoint-*"), key=lambda p: int(p.name[11:]))
    other = ["--output_dir", str(tmp_path / "other"), "--resume_from_checkpoint", str(last)]
    assert run_script("hf_example_script.py", *job, *other, failure_signal=True) == 1
    resumed = trials_of(server, prefix)[-1]
    assert resumed["trial_number"] == again["trial_number"]
    assert (resumed["epochs"], resumed["status"]) == (4, "reported")


# How each hand-written loop's checkpoint is named, and how a refusal says to resume from it.
RESTORES = {
    "accelerate_loop.py": ("", "pass resume='{saves}' to ZeusBSOAccelerate"),
    "fabric_loop.py": ("last.ckpt", 'resume=fabric.load(path)["bso"]'),
}


@pytest.mark.parametrize("script", sorted(RESTORES))
def test_a_checkpoint_restores_only_the_runs_own_trial(
    script: str, probe: Probe, server: ServerProcess, tmp_path: Path
) -> None:
    """``accelerator.save_state``, and ``fabric.save`` of a state holding the session, keep the
    run's trial in the checkpoint. A run killed after two epochs, restored by a script that
    does not give zeus-bso the checkpoint's trial (``--forget-trial``), got a new trial, into
    which ``accelerator.load_state`` or ``fabric.load`` would bring a model trained two epochs
    before: refused before it trains, saying how to continue, and the new trial released.
    Given the checkpoint's trial (``resume=``), the run continues the killed trial and trains
    only the epochs left."""
    prefix = unique_id("corpusload").replace("-", "")
    saves = tmp_path / "saves"
    name, advice = RESTORES[script]
    run = ["--job", prefix, "--target", "0.999", "--save-to", str(saves)]
    run_killed(script, *run, "--kill-at-epoch", str(KILL_AT))
    (killed,) = trials_of(server, prefix)
    assert (killed["status"], killed["epochs"]) == ("dispatched", KILL_AT)
    probe.take()
    resume = ["--resume-from", str(saves / name)]
    with pytest.raises(ConfigurationError) as refused:
        run_script(script, *run, *resume, "--forget-trial")
    message = str(refused.value)
    assert f"trial {killed['trial_number']} of job {killed['job_id']}" in message
    assert advice.format(saves=saves / name) in message
    assert probe.take() == []  # nothing trained
    first, new = trials_of(server, prefix)
    assert (first["status"], first["epochs"]) == ("dispatched", KILL_AT)
    assert (new["status"], new["epochs"]) == ("released", None)  # never reported
    assert run_script(script, *run, *resume) == 1
    continued = trials_of(server, prefix)[0]
    assert (continued["status"], continued["epochs"]) == ("reported", 4)
    size = continued["batch_size"]
    assert len(probe.take()) == (4 - KILL_AT) * (TRAIN_SAMPLES // size)
