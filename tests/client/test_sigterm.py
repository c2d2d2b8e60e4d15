"""SIGTERM during a run (a preemption, a scheduler's time limit, ``kill``): the trial is released,
not left to its lease and charged to its batch size. Real scripts in their own processes, sent
a real SIGTERM, against a real server."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.containers import REPO
from tests.helpers import ServerProcess, environment_without_settings, unique_id
from tests.preloaded_python import preloaded
from zeus_bso import JobSpec
from zeus_bso.client import ServerClient

TERMINATED = 128 + signal.SIGTERM


@pytest.fixture(scope="module")
def server(sqlite_server: ServerProcess) -> ServerProcess:
    return sqlite_server


def spec(prefix: str) -> JobSpec:
    return JobSpec(
        job_id_prefix=unique_id(prefix).replace("-", ""),
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=0.8,
        max_epochs=5,
        learning_curve_stop=False,
    )


HEAD = """
import pathlib, signal, sys, time
from zeus_bso import BatchSizeOptimizer, JobSpec
from zeus_bso.energy import EstimateMeter
job = JobSpec.model_validate_json({job!r})
ready = pathlib.Path({ready!r})

def training():
    ready.write_text("training")
    while True:  # an epoch that the signal interrupts
        time.sleep(0.01)
"""

SCRIPTS = {
    # In `with`, before the first report: what a crash there costs the batch size.
    "with": """
with BatchSizeOptimizer({url!r}, job, energy_meter=EstimateMeter(100)) as bso:
    bso.get_batch_size()
    bso.on_train_begin()
    training()
""",
    # No `with`: the exit hook ends the run, after a report.
    "exit hook": """
bso = BatchSizeOptimizer({url!r}, job, energy_meter=EstimateMeter(100))
bso.get_batch_size()
bso.on_train_begin()
bso.on_evaluate(0.1)
training()
""",
    # The script's own handler stops the loop gracefully and ends the run: it is called, and
    # the run still ends as interrupted; the script goes on and exits as it chooses.
    "own handler": """
stopping = []
signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
bso = BatchSizeOptimizer({url!r}, job, energy_meter=EstimateMeter(100))
bso.get_batch_size()
bso.on_train_begin()
ready.write_text("training")
while not stopping:
    time.sleep(0.01)
bso.end()
assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # the script's own, back
print("handled", stopping, bso.outcome.reason.value)
""",
    # With a run key the trial stays open for the restart, which continues it.
    "run key": """
with BatchSizeOptimizer({url!r}, job, energy_meter=EstimateMeter(100), run_key="node-7") as bso:
    bso.get_batch_size()
    bso.on_train_begin()
    bso.on_evaluate(0.1)
    training()
""",
    # Opted out: SIGTERM ends the process as it always did, leaving the trial to its lease.
    "opted out": """
bso = BatchSizeOptimizer({url!r}, job, energy_meter=EstimateMeter(100), handle_sigterm=False)
bso.get_batch_size()
bso.on_train_begin()
training()
""",
}


def run_script(server: ServerProcess, tmp_path: Path, case: str) -> tuple[Any, JobSpec]:
    """Run the script of ``case``, send it SIGTERM once it trains, and return how it ended and
    its job."""
    job = spec(case.replace(" ", ""))
    ready = tmp_path / "ready"
    script = textwrap.dedent(HEAD).format(job=job.model_dump_json(), ready=str(ready))
    script += SCRIPTS[case].format(url=server.url)
    return terminated(script, ready, tmp_path), job


def terminated(
    script: str, ready: Path, cwd: Path, wait_s: float = 60, python: str = sys.executable
) -> Any:
    """Run ``script`` (in ``python``), send it SIGTERM once it wrote ``ready``, and return how it
    ended."""
    process = subprocess.Popen(
        [python, "-c", script],
        cwd=cwd,
        env={**environment_without_settings(), "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + wait_s
        while not ready.exists():
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the script never trained: {process.communicate()}")
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def trials_of(server: ServerProcess, job: JobSpec) -> list[dict[str, Any]]:
    with ServerClient(server.url) as client:
        (listed,) = client.list_jobs(prefix=job.job_id_prefix)
        return [trial.model_dump(mode="json") for trial in client.trials(listed.job_id)]


@pytest.mark.parametrize(("case", "epochs"), [("with", None), ("exit hook", 1)])
def test_a_terminated_run_releases_its_trial_and_exits_as_sigterm_would(
    server: ServerProcess, tmp_path: Path, case: str, epochs: int | None
) -> None:
    """Without the guard, SIGTERM ended the process with no cleanup: the trial stayed
    dispatched until its lease ran out and, before its first report, counted as a crash of its
    batch size (three in a pruning round drop it)."""
    done, job = run_script(server, tmp_path, case)
    assert done.returncode == TERMINATED, done.stderr
    (trial,) = trials_of(server, job)
    assert (trial["status"], trial["epochs"]) == ("released", epochs)
    assert "interrupted (SIGTERM); not counted against it" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_handler_of_the_script_s_own_is_called_and_the_run_ends_as_interrupted(
    server: ServerProcess, tmp_path: Path
) -> None:
    done, job = run_script(server, tmp_path, "own handler")
    assert done.returncode == 0, done.stderr
    assert f"handled [{int(signal.SIGTERM)}] ended_early" in done.stdout
    (trial,) = trials_of(server, job)
    assert trial["status"] == "released"  # not failed, which `end` before the stop would give


def test_a_terminated_run_with_a_run_key_leaves_its_trial_to_the_restart(
    server: ServerProcess, tmp_path: Path
) -> None:
    done, job = run_script(server, tmp_path, "run key")
    assert done.returncode == TERMINATED, done.stderr
    assert "the run's restart (run key node-7) continues its trial" in done.stderr
    (trial,) = trials_of(server, job)
    assert (trial["status"], trial["epochs"]) == ("dispatched", 1)


def test_handle_sigterm_false_leaves_sigterm_to_the_default(
    server: ServerProcess, tmp_path: Path
) -> None:
    done, job = run_script(server, tmp_path, "opted out")
    assert done.returncode == -signal.SIGTERM, done.stderr
    (trial,) = trials_of(server, job)
    assert trial["status"] == "dispatched"  # left to its lease, as before


FORKED = """
import signal
from tests.helpers import sigterm_a_forked_child
from zeus_bso import BatchSizeOptimizer, JobSpec
from zeus_bso.energy import EstimateMeter
job = JobSpec.model_validate_json({job!r})
with BatchSizeOptimizer({url!r}, job, energy_meter=EstimateMeter(100)) as bso:
    bso.get_batch_size()
    bso.on_train_begin()
    print("child", sigterm_a_forked_child() == signal.SIGTERM)  # a DataLoader worker's end
    bso.on_evaluate(0.9)
print("after", signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, bso.outcome.converged)
"""


def test_a_forked_child_ends_by_sigterm_as_before_and_the_run_goes_on(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A process forked during the run (a DataLoader worker) inherits the handler: SIGTERM
    ends it as the default would, and the run is not disturbed; after the run the default is
    back."""
    job = spec("forked")
    script = FORKED.format(job=job.model_dump_json(), url=server.url)
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        env=environment_without_settings(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["child", "True", "after", "True", "True"]
    (trial,) = trials_of(server, job)
    assert trial["status"] == "reported"


HF_RUN = """
import pathlib, time
import transformers
from tests.integrations.test_huggingface import train
from zeus_bso import JobSpec

ready = pathlib.Path({ready!r})

class SlowSecondEpoch(transformers.TrainerCallback):
    def on_step_end(self, args, state, control, **kwargs):
        if state.epoch is not None and state.epoch > 1.0:  # reported once
            ready.write_text("training")
            time.sleep(0.05)

job = JobSpec.model_validate_json({job!r})
train({url!r}, job, pathlib.Path("run"), 6, ahead=[SlowSecondEpoch()])
"""


def test_a_terminated_hugging_face_run_releases_its_trial(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The HF Trainer has no SIGTERM handler and no exception hook: SIGTERM used to end the
    process with the trial left to its lease. Now `Terminated` unwinds the Trainer, and the exit
    hook releases the trial."""
    pytest.importorskip("transformers", reason="pip install 'zeus-bso[hf]'")
    from tests.integrations.test_huggingface import job

    spec_ = job(unique_id("hfterm"), target=0.999)
    ready = tmp_path / "ready"
    script = HF_RUN.format(ready=str(ready), url=server.url, job=spec_.model_dump_json())
    done = terminated(script, ready, tmp_path, wait_s=180, python=preloaded(sys.executable))
    assert done.returncode == TERMINATED, done.stderr
    assert "interrupted (SIGTERM); not counted against it" in done.stderr
    with ServerClient(server.url) as client:
        (trial,) = client.trials(spec_.job_id or "")
    assert (trial.status, trial.epochs) == ("released", 1)


LIGHTNING_RUN = """
import pathlib, time
import lightning.pytorch as pl
from tests.integrations.lightning_models import fit
from zeus_bso import JobSpec

ready = pathlib.Path({ready!r})

class SlowSecondEpoch(pl.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.current_epoch >= 1:  # reported once
            ready.write_text("training")
            time.sleep(0.05)

job = JobSpec.model_validate_json({job!r})
fit({url!r}, job, pathlib.Path("run"), callbacks=[SlowSecondEpoch()])
"""


def test_a_terminated_lightning_fit_is_released_through_lightning_s_own_handler(
    server: ServerProcess, tmp_path: Path, lightning_python: str
) -> None:
    """Lightning handles SIGTERM itself (its ``SIGTERMException`` at the next step, after its
    teardown), so its callback installs no guard: the fit ends Lightning's way, and the
    callback's exception hook releases the trial."""
    pytest.importorskip("lightning", reason="pip install 'zeus-bso[lightning]'")
    from tests.integrations.lightning_models import job

    spec_ = job(unique_id("plterm"), target=0.999)
    ready = tmp_path / "ready"
    script = LIGHTNING_RUN.format(ready=str(ready), url=server.url, job=spec_.model_dump_json())
    done = terminated(script, ready, tmp_path, wait_s=180, python=preloaded(lightning_python))
    # Lightning's own handler took it; the status is SIGTERM's, as Lightning's fix of
    # Lightning-AI/pytorch-lightning#19916 gives it (before it, the callback sets it: a
    # preempted fit exited 0, as if it had finished).
    assert done.returncode == TERMINATED, done.stderr
    assert "Received SIGTERM" in done.stderr, done.stderr
    assert "interrupted (SIGTERMException)" in done.stderr
    with ServerClient(server.url) as client:
        (trial,) = client.trials(spec_.job_id or "")
    assert (trial.status, trial.epochs) == ("released", 1)


LOOP_ADAPTER_RUN = """
import pathlib, time
from zeus_bso import JobSpec
from zeus_bso.energy import EstimateMeter
{setup}
job = JobSpec.model_validate_json({job!r})
ready = pathlib.Path({ready!r})
with Adapter(framework, {url!r}, job, energy_meter=EstimateMeter(100)) as bso:
    bso.train_begin()
    assert not bso.report(0.1)  # epoch 1, reported
    ready.write_text("training")
    while True:  # epoch 2, which the signal interrupts
        time.sleep(0.01)
"""

ADAPTERS = {
    "accelerate": (
        "accelerate",
        "from accelerate import Accelerator\n"
        "from zeus_bso.integrations.accelerate import ZeusBSOAccelerate as Adapter\n"
        "framework = Accelerator(cpu=True)",
    ),
    "fabric": (
        "lightning",
        "from lightning.fabric import Fabric\n"
        "from zeus_bso.integrations.fabric import ZeusBSOFabric as Adapter\n"
        "framework = Fabric(accelerator='cpu', devices=1)",
    ),
}


@pytest.mark.parametrize("adapter", sorted(ADAPTERS))
def test_a_terminated_loop_adapter_run_releases_its_trial(
    server: ServerProcess, tmp_path: Path, adapter: str
) -> None:
    """Accelerate and Fabric leave SIGTERM alone, as the HF Trainer does: the adapter's session
    turns it into `Terminated`, and its ``with`` block releases the trial."""
    module, setup = ADAPTERS[adapter]
    pytest.importorskip(module, reason=f"pip install 'zeus-bso[{module}]'")
    job = spec(adapter)
    ready = tmp_path / "ready"
    script = LOOP_ADAPTER_RUN.format(
        setup=setup, job=job.model_dump_json(), ready=str(ready), url=server.url
    )
    done = terminated(script, ready, tmp_path, wait_s=180, python=preloaded(sys.executable))
    assert done.returncode == TERMINATED, done.stderr
    # The adapter shows the outcome through the framework's print (standard output).
    assert "interrupted (SIGTERM); not counted against it" in done.stdout
    (trial,) = trials_of(server, job)
    assert (trial["status"], trial["epochs"]) == ("released", 1)
