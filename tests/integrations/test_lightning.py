"""ZeusBSOCallback with a real Lightning Trainer on the CPU against a real server process."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import pytest

torch = pytest.importorskip("torch", reason="the Lightning tests need torch (pip install torch)")
pl = pytest.importorskip("lightning.pytorch", reason="pip install 'zeus-bso[lightning]'")

from lightning.pytorch.callbacks import (  # noqa: E402
    BatchSizeFinder,
    EarlyStopping,
    GradientAccumulationScheduler,
)
from lightning.pytorch.loggers import CSVLogger  # noqa: E402
from torch.multiprocessing.spawn import ProcessRaisedException  # noqa: E402

from tests.helpers import (  # noqa: E402
    ServerProcess,
    check_stopped_itself,
    process_group_of_one,
    sqlite_url,
    unique_id,
)
from tests.integrations.lightning_models import (  # noqa: E402
    TinyClassifier,
    fit,
    job,
    make_data,
    quiet_trainer_options,
)
from tests.ports import free_port  # noqa: E402
from tests.preloaded_python import preloaded, spawning  # noqa: E402
from zeus_bso import JobSpec, RunOutcome, ZeusBSOTrainFailError, until_converged  # noqa: E402
from zeus_bso.client import ServerClient  # noqa: E402
from zeus_bso.energy import EstimateMeter  # noqa: E402
from zeus_bso.errors import (  # noqa: E402
    ConfigurationError,
    OutOfMemoryNotTheBatchSizeError,
    ZeusBSOError,
)
from zeus_bso.integrations.lightning import ZeusBSOCallback  # noqa: E402
from zeus_bso.scaling.lr import stepped_rate  # noqa: E402
from zeus_bso.spec import StopReason  # noqa: E402


@pytest.fixture(scope="module")
def server(sqlite_server: ServerProcess) -> ServerProcess:
    """SQLite only: the subject here is the Lightning callback, not the database."""
    return sqlite_server


def test_recurrences_use_the_dispatched_batch_size_and_stop_when_told(
    server: ServerProcess, tmp_path: Path
) -> None:
    spec = job(unique_id("lit"), target=0.85)
    sizes = []
    for _ in range(3):
        model, callback = fit(server.url, spec, tmp_path)
        sizes.append(callback.batch_size)
        assert max(model.seen_batch_sizes) == callback.batch_size
        assert model.batch_size == callback.batch_size
        logged = model.trainer.callback_metrics  # logged through pl_module.log
        assert float(logged["bso/batch_size"]) == callback.batch_size
        assert float(logged["bso/energy_j"]) > 0
        assert float(logged["bso/cost"]) > 0
    assert sizes[0] == spec.default_batch_size
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    trials = sorted(state["trials"], key=lambda t: t["trial_number"])
    assert [t["batch_size"] for t in trials] == sizes
    assert all(t["status"] == "reported" for t in trials)
    converged = [t for t in trials if t["converged"]]
    assert converged, trials
    # The server's stop ended a run as soon as it reached the target, before max_epochs.
    assert any(t["epochs"] < spec.max_epochs for t in converged), trials
    assert all(t["energy"] > 0 and t["time"] > 0 for t in trials)


def test_a_resumed_fit_continues_its_trial(server: ServerProcess, tmp_path: Path) -> None:
    spec = job(unique_id("resume"), target=0.999, max_epochs=5)
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True)
    fit(
        server.url, spec, tmp_path, max_epochs=2, enable_checkpointing=True, callbacks=[checkpoints]
    )
    _, callback = fit(
        server.url,
        spec,
        tmp_path,
        max_epochs=5,
        enable_checkpointing=True,
        ckpt_path=str(tmp_path / "last.ckpt"),
    )
    assert callback.trial_number == 1
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    # The fit's setup asked for a trial before the checkpoint was read; it was released.
    trial, withdrawn = sorted(state["trials"], key=lambda t: t["trial_number"])
    assert trial["epochs"] == 5  # epochs 1-2, then 3-5 of the same trial
    assert trial["status"] == "reported"
    assert withdrawn["status"] == "released"
    assert not withdrawn["epochs"]


def test_a_fit_from_the_checkpoint_of_a_trial_that_ended_is_refused(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A fit that resumes (``ckpt_path``) the checkpoint of a run that had ended with its final
    report (a launcher that always passes ``ckpt_path="last"``, a directory reused by the next
    recurrence) trained on, its reports answered "already reported", and its outcome said it
    reached the target, while the server counted nothing of it and the exploration its setup
    asked for was released: at every recurrence. Refused now, saying how to train on from the
    weights; the trial its setup asked for is released, the ended one left as it was."""
    spec = job(unique_id("lended"), target=0.5, max_epochs=5)
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True)
    _, first = fit(server.url, spec, tmp_path, enable_checkpointing=True, callbacks=[checkpoints])
    assert first.outcome is not None
    assert first.outcome.converged
    with pytest.raises(ConfigurationError, match="which ended with its final report") as raised:
        fit(server.url, spec, tmp_path, enable_checkpointing=True, ckpt_path=tmp_path / "last.ckpt")
    assert "Model.load_from_checkpoint(path) and fit without ckpt_path" in str(raised.value)
    # A daily job's fixed checkpoint folder: what to change for its next recurrence.
    assert "so give each run a folder of its own, or remove the checkpoints" in str(raised.value)
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    ended, asked = sorted(state["trials"], key=lambda t: t["trial_number"])
    assert (ended["status"], ended["epochs"]) == ("reported", first.outcome.epochs)
    assert (asked["status"], asked["epochs"]) == ("released", None)


def test_a_fit_that_resumes_a_checkpoint_without_a_trial_is_refused(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A checkpoint saved without the callback (before zeus-bso was added, or by another job)
    holds no trial: resumed by a fit that asked for a new one, the trial counted the epochs
    trained before it as its own (a run that looked cheap at its batch size). Refused when
    training starts; the trial is released."""
    spec = job(unique_id("lnotrial"), target=0.999, max_epochs=4)
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True)
    options = {**quiet_trainer_options(tmp_path), "enable_checkpointing": True}
    pl.Trainer(max_epochs=2, callbacks=[checkpoints], **options).fit(TinyClassifier())
    with pytest.raises(ConfigurationError, match=r"the fit starts at step \d+ \(epoch 2\)"):
        fit(server.url, spec, tmp_path, enable_checkpointing=True, ckpt_path=tmp_path / "last.ckpt")
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["status"], trial["epochs"]) == ("released", None)


class EmptyValidation(TinyClassifier):
    """Validates on a DataLoader of no batches (an empty validation split)."""

    def val_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(0, 8)))


def test_a_fit_whose_validation_has_no_batches_is_refused_when_training_starts(
    server: ServerProcess, tmp_path: Path
) -> None:
    """An empty validation set: the fit never validated, and each run ended unjudged ("ended
    at epoch 0 ... a limit of the Trainer's, or a callback"), the next run getting the same
    size. Refused when training starts, where the first epoch's validation data is built; the
    trial is released."""
    spec = job(unique_id("lemptyval"), max_epochs=2)
    callback = callback_for(server.url, spec)
    options = quiet_trainer_options(tmp_path)
    trainer = pl.Trainer(max_epochs=spec.max_epochs, callbacks=[callback], **options)
    with pytest.raises(ConfigurationError, match="its validation DataLoader has no batches"):
        trainer.fit(EmptyValidation())
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["status"], trial["epochs"]) == ("released", None)


def test_training_survives_the_server_going_away(tmp_path: Path) -> None:
    server = ServerProcess(sqlite_url(tmp_path / "bso.db"), cwd=tmp_path)

    class KillServer(pl.Callback):
        def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
            if trainer.current_epoch == 0:
                server.proc.send_signal(signal.SIGKILL)
                server.proc.wait()

    try:
        spec = job(unique_id("gone"), target=0.999, max_epochs=4)
        model, callback = fit(server.url, spec, tmp_path, callbacks=[KillServer()])
        assert len(model.seen_batch_sizes) > 0
        assert callback.batch_size == spec.default_batch_size
    finally:
        server.stop()


@pytest.mark.parametrize("given", [False, True], ids=["module-loaders", "given-loaders"])
def test_ddp_on_two_cpu_processes(
    server: ServerProcess, tmp_path: Path, capfd: pytest.CaptureFixture[str], given: bool
) -> None:
    """Two ranks (gloo): one trial, the same batch size on both, energy of both added up. The
    ranks are processes ddp_spawn started: the outcome reaches the process that called fit.
    Logging the server's figures raises no advice to sync them (they are the same on every
    rank). ``given``: ``trainer.fit`` was given a train DataLoader at 16, built again at the
    server's 32 on each rank, where Lightning adds its DistributedSampler to it (a batch of
    another size would have stopped the fit at its first batch)."""
    spec = job(unique_id("ddp"), target=0.999, max_epochs=2)
    with spawning():
        _, callback = fit(
            server.url, spec, tmp_path, given=given, devices=2, strategy="ddp_spawn", num_nodes=1
        )
    output = capfd.readouterr()
    assert "val_acc" in output.err + output.out  # the model's own value gets Lightning's advice
    assert "self.log('bso/" not in output.err + output.out
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    (trial,) = state["trials"]
    assert trial["batch_size"] == spec.default_batch_size
    assert trial["epochs"] == 2
    # Each rank's estimate meter reads 100 W x its own time: together about 200 W x time.
    assert trial["energy"] > 1.5 * 100 * trial["time"]
    outcome = callback.outcome
    assert outcome is not None
    assert (outcome.job_id, outcome.trial_number, outcome.batch_size) == (
        spec.job_id,
        trial["trial_number"],
        trial["batch_size"],
    )
    assert (outcome.epochs, outcome.converged) == (2, False)
    assert outcome.reason is StopReason.MAX_EPOCHS
    assert callback.outcome == outcome  # read once, kept


def _run_nodes(
    server: ServerProcess, job_id: str, monitor: str, tmp_path: Path, python: str
) -> list[tuple[int, str]]:
    """Two independent processes that form one 2-node DDP fit (as on two machines), run to
    their end; each one's exit status and stderr."""
    root = Path(__file__).resolve().parents[2]
    port = free_port()
    processes = []
    for rank in (0, 1):
        env = {
            **os.environ,
            "PYTHONPATH": str(root),
            "RANK": str(rank),
            "GROUP_RANK": str(rank),
            "NODE_RANK": str(rank),
            "LOCAL_RANK": "0",
            "LOCAL_WORLD_SIZE": "1",
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
        }
        command = [
            preloaded(python),
            str(Path(__file__).with_name("lightning_node_worker.py")),
            server.url,
            job_id,
            monitor,
            str(tmp_path / f"node{rank}"),
        ]
        processes.append(
            subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        )
    try:
        errors = [node.communicate(timeout=180)[1] for node in processes]
    finally:
        for node in processes:
            node.kill()
    return [(node.returncode, err) for node, err in zip(processes, errors, strict=True)]


def test_an_error_on_rank_0_ends_every_rank(
    server: ServerProcess, tmp_path: Path, lightning_python: str
) -> None:
    """Rank 0 finds that the monitored metric was never logged: it raises, and rank 1, which
    would otherwise wait for rank 0's broadcast, raises too, naming rank 0's error."""
    job_id = unique_id("ddperr")
    started = time.monotonic()
    (code0, err0), (code1, err1) = _run_nodes(
        server, job_id, "val_missing", tmp_path, lightning_python
    )
    took = time.monotonic() - started
    assert code0 != 0, err0[-3000:]
    assert code1 != 0, err1[-3000:]
    assert "metric 'val_missing' was not logged" in err0
    assert "rank 0 failed, so this rank stops too" in err1, err1[-3000:]
    assert "val_missing" in err1
    print(f"both ranks ended {took:.1f} s after they started")
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(job_id)["trials"]
    # Rank 0 released its trial on the way out: a metric never logged is no batch size's fault.
    assert trial["status"] == "released"


def logged_rows(root: Path, name: str) -> list[dict[str, str]]:
    """The rows of a CSVLogger's metrics file that hold ``name``."""
    (path,) = root.glob("**/metrics.csv")
    with path.open() as rows:
        return [row for row in csv.DictReader(rows) if row.get(name)]


def test_validating_every_second_epoch_reports_the_fits_epochs_and_logs_once(
    server: ServerProcess, tmp_path: Path
) -> None:
    spec = job(unique_id("litevery2"), target=0.999, max_epochs=6)  # never converges
    logs = tmp_path / "logs"
    model, _ = fit(
        server.url,
        spec,
        tmp_path,
        max_epochs=8,
        check_val_every_n_epoch=2,
        logger=CSVLogger(logs),
    )
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    # Reports after epochs 2, 4 and 6: the job's max_epochs counted the fit's epochs, and the
    # server stopped the fit there (counted as validations, it would have run all 8).
    assert trial["epochs"] == 6
    assert model.trainer.current_epoch == 6
    # One row per report: epochs without a validation log nothing.
    assert len(logged_rows(logs, "bso/cost")) == 3


class LogsNowAndThen(TinyClassifier):
    """Logs its metric at the validations of epochs 1 and 4 only."""

    def validation_step(self, batch: Any, _: int) -> None:
        if self.current_epoch in (0, 3):
            super().validation_step(batch, _)


def test_a_validation_that_did_not_log_the_metric_reports_nothing(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Lightning keeps the last logged value in callback_metrics: the validations of epochs 2
    and 3 must not report epoch 1's value as theirs."""
    spec = job(unique_id("litstale"), target=0.999, max_epochs=4)
    logs = tmp_path / "logs"
    pl.seed_everything(0, verbose=False)
    model = LogsNowAndThen()
    callback = callback_for(server.url, spec)
    options = {**quiet_trainer_options(tmp_path), "logger": CSVLogger(logs)}
    trainer = pl.Trainer(callbacks=[callback], max_epochs=6, **options)
    with caplog.at_level(logging.WARNING, logger="zeus_bso"):
        trainer.fit(model)
    assert "'val_acc' was not logged at this validation (epoch 2)" in caplog.text
    assert "(epoch 3)" in caplog.text
    assert "(epoch 4)" not in caplog.text
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["epochs"] == 4  # the job's max_epochs, reached at the second report
    rows = logged_rows(logs, "bso/cost")
    assert [int(row["epoch"]) for row in rows] == [0, 3]  # one row per report


def test_validating_twice_an_epoch_counts_validations_and_says_so(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = job(unique_id("lithalf"), target=0.999, max_epochs=4)
    logs = tmp_path / "logs"
    with caplog.at_level(logging.INFO, logger="zeus_bso"):
        model, _ = fit(
            server.url, spec, tmp_path, max_epochs=8, val_check_interval=0.5, logger=CSVLogger(logs)
        )
    assert "each validation is one of the job's epochs (it stops at the job's max_epochs, 4" in (
        caplog.text
    )
    assert "validations):" not in caplog.text  # 16 in the Trainer's max_epochs: enough
    assert "first report came after" not in caplog.text  # said once, by the callback
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["epochs"] == 4  # four validations, in two epochs
    assert model.trainer.current_epoch == 2
    # Each report once: those within an epoch at their step (a fit of one endless epoch has no
    # epoch's end to log them at), the others at the epoch's end.
    assert len(logged_rows(logs, "bso/cost")) == 4


class Streamed(torch.utils.data.IterableDataset):  # type: ignore[misc]
    """Training data without a length: `TinyClassifier`'s, again and again."""

    def __iter__(self) -> Any:
        while True:
            yield from make_data(512, 0)


class StreamClassifier(TinyClassifier):
    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(Streamed(), batch_size=self.batch_size)


def test_a_fit_of_one_endless_epoch_logs_each_report_and_is_not_told_to_use_epochs(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Data without a length: one endless epoch, validated every 5 batches. Each validation is
    an epoch of the job's (3), each report is logged as it comes (there is no epoch's end to
    log it at), and the advice to validate at epochs' ends, which it cannot, is not given."""
    spec = job(unique_id("litstream"), target=0.999, max_epochs=3)
    logs = tmp_path / "logs"
    callback = callback_for(server.url, spec)
    options = {**quiet_trainer_options(tmp_path), "logger": CSVLogger(logs)}
    trainer = pl.Trainer(
        callbacks=[callback],
        max_steps=40,
        val_check_interval=5,
        check_val_every_n_epoch=None,
        **options,
    )
    with caplog.at_level(logging.INFO, logger="zeus_bso"):
        trainer.fit(StreamClassifier())
    said = [
        (r.levelno, r.getMessage())
        for r in caplog.records
        if "val_check_interval" in r.getMessage()
    ]
    assert [level for level, _ in said] == [logging.INFO]
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["epochs"], trial["status"]) == (3, "reported")
    assert trainer.global_step == 15  # stopped by the server at its third validation
    assert len(logged_rows(logs, "bso/cost")) == 3


def test_validation_outside_the_fit_reports_nothing(server: ServerProcess, tmp_path: Path) -> None:
    """A fit that stops before the server says so (the Trainer's max_epochs) releases its trial
    (the Trainer's limit is not the batch size's fault); a trainer.validate afterwards is not an
    epoch of it."""
    spec = job(unique_id("validate"), target=0.999, max_epochs=6)
    pl.seed_everything(0, verbose=False)
    model = TinyClassifier()
    callback = ZeusBSOCallback(server.url, spec, monitor="val_acc", energy_meter=EstimateMeter(100))
    trainer = pl.Trainer(callbacks=[callback], max_epochs=2, **quiet_trainer_options(tmp_path))
    trainer.fit(model)
    trainer.validate(model, verbose=False)
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["status"] == "released"
    assert trial["epochs"] == 2


SET_UP_SECONDS = 1.5


class SlowToSetUp(TinyClassifier):
    """A module whose one-time work at the start of a fit (loading data, compiling, say) takes
    a second and a half, after the callbacks' ``on_fit_start``."""

    def on_fit_start(self) -> None:
        time.sleep(SET_UP_SECONDS)


def test_one_time_set_up_is_outside_the_measured_window(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The window opens when training starts (``on_train_start``): one-time work before it (the
    module's ``on_fit_start``, the sanity check) is not the batch size's cost."""
    spec = job(unique_id("setup"), target=0.85)
    pl.seed_everything(0, verbose=False)
    model = SlowToSetUp()
    callback = ZeusBSOCallback(server.url, spec, monitor="val_acc", energy_meter=EstimateMeter(100))
    options = {**quiet_trainer_options(tmp_path), "num_sanity_val_steps": 2}
    trainer = pl.Trainer(callbacks=[callback], max_epochs=spec.max_epochs, **options)
    started = time.monotonic()
    trainer.fit(model)
    wall = time.monotonic() - started
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert wall > SET_UP_SECONDS
    assert 0 < trial["time"] < wall - SET_UP_SECONDS
    # The energy window is the time window: it leaves out the set-up's 150 J. The two are read
    # one after the other, so a busy machine may put some milliseconds between them (a window
    # of 0.15 s differed by 8 ms): the margin is a tenth of the set-up, not a share of the window.
    assert trial["energy"] == pytest.approx(100 * trial["time"], abs=10 * SET_UP_SECONDS)


def callback_for(server_url: str, spec: JobSpec, **options: Any) -> ZeusBSOCallback:
    return ZeusBSOCallback(
        server_url, spec, monitor="val_acc", energy_meter=EstimateMeter(100), **options
    )


class RaisesInTheSecondEpoch(pl.Callback):  # type: ignore[misc]
    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.current_epoch >= 1:
            raise KeyError("a bug in the second epoch")


def test_a_fit_of_a_model_an_earlier_run_of_the_job_trained_is_refused(
    server: ServerProcess, tmp_path: Path
) -> None:
    """One model fitted twice with one callback (a notebook's fit cell run again, a script's
    second phase): the second fit would start trained and reach the target sooner, and the
    server would learn its batch size's cost from it. It is refused before any step, its trial
    released. The same model with its weights set anew trains; so does a model trained by a
    run of another job (a second phase is a job of its own)."""
    spec = job(unique_id("retrained"), target=0.99, max_epochs=2)
    callback = callback_for(server.url, spec)
    options = {"max_epochs": 2, **quiet_trainer_options(tmp_path)}
    pl.seed_everything(0, verbose=False)
    model = TinyClassifier()
    pl.Trainer(callbacks=[callback], **options).fit(model)
    with pytest.raises(ConfigurationError, match=r"the one trial 1 of job .* trained in this"):
        pl.Trainer(callbacks=[callback], **options).fit(model)
    model.layer.reset_parameters()  # built anew, in place
    pl.Trainer(callbacks=[callback], **options).fit(model)
    # A fit that raised after its first report left the weights partly trained: the same.
    raised = TinyClassifier()
    with pytest.raises(KeyError):
        pl.Trainer(callbacks=[callback, RaisesInTheSecondEpoch()], **options).fit(raised)
    with pytest.raises(ConfigurationError, match="build the model again for each run"):
        pl.Trainer(callbacks=[callback], **options).fit(raised)
    phase = job(unique_id("secondphase"), target=0.99, max_epochs=2)
    pl.Trainer(callbacks=[callback_for(server.url, phase)], **options).fit(model)
    with ServerClient(server.url) as client:
        trials = client.trials(spec.job_id or "")
        (second,) = client.trials(phase.job_id or "")
    assert [t.status for t in trials] == ["reported", "released", "reported", "failed", "released"]
    assert "build the model again for each run" in (trials[1].message or "")
    assert second.status == "reported"


def test_a_fit_of_another_model_or_precision_under_the_same_job_is_told_the_job_mixes_models(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The script's module grew a hidden layer while its job's settings stayed, then trained in
    bf16, then with activation checkpointing: each fit trains the job's batch size on another
    model, whose costs are not the earlier runs'. Its first report's answer says so, with what
    to do, and the job's view keeps each model."""
    spec = job(unique_id("grown"), target=0.99, max_epochs=2)
    options = {"max_epochs": 2, **quiet_trainer_options(tmp_path)}
    pl.Trainer(callbacks=[callback_for(server.url, spec)], **options).fit(TinyClassifier())
    assert "trains a model of" not in caplog.text
    with ServerClient(server.url) as client:  # a size a fit, whatever pruning would try
        client.pin(spec.job_id or "", spec.default_batch_size)

    def grown() -> TinyClassifier:
        model = TinyClassifier()
        model.layer = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
        )
        return model

    pl.Trainer(callbacks=[callback_for(server.url, spec)], **options).fit(grown())
    assert "trains a model of 178 parameters (32-true)" in caplog.text
    assert "(18 parameters (32-true) in trial 1)" in caplog.text
    caplog.clear()
    half = {**options, "precision": "bf16-mixed"}  # the grown model, in another precision
    pl.Trainer(callbacks=[callback_for(server.url, spec)], **half).fit(grown())
    assert "trains a model of 178 parameters (bf16-mixed)" in caplog.text
    assert "178 parameters (32-true) in trial 2" in caplog.text
    caplog.clear()
    checkpointed = grown()  # as a Hugging Face model's activation_checkpointing_enable() says
    checkpointed.layer[0].gradient_checkpointing = True
    pl.Trainer(callbacks=[callback_for(server.url, spec)], **half).fit(checkpointed)
    assert "a model of 178 parameters (bf16-mixed, activation checkpointing)" in caplog.text
    with ServerClient(server.url) as client:
        view = client.job(spec.job_id or "")
    assert [(m.parameters, m.precision, m.techniques) for m in view.models] == [
        (18, "32-true", []),
        (178, "32-true", []),
        (178, "bf16-mixed", []),
        (178, "bf16-mixed", ["activation_checkpointing"]),
    ]
    assert view.mixed_models is not None
    assert "prior_from=" in view.mixed_models


@pytest.mark.parametrize("monitor", ["val_loss", "val/loss", "loss"])
def test_a_loss_monitored_as_higher_is_better_is_refused_unless_the_job_says_so(
    monitor: str,
) -> None:
    """With ``higher_is_better_metric`` at its default (True), a loss "reached" a target
    below it at the fit's first validation: every run converged at once."""
    spec = job(unique_id("lloss"))
    with pytest.raises(ConfigurationError, match="higher_is_better_metric=False"):
        ZeusBSOCallback("http://127.0.0.1:9", spec, monitor=monitor)
    for said in (False, True):  # the job's own word, either way, is kept
        kept = spec.model_copy(update={"higher_is_better_metric": said})
        assert ZeusBSOCallback("http://127.0.0.1:9", kept, monitor=monitor).job == kept
    assert ZeusBSOCallback("http://127.0.0.1:9", spec, monitor="val_neg_loss").job == spec


def test_misconfigured_fits_leave_the_default_batch_size_untouched(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Three fits with a metric that is never logged raise on their first report; each
    releases its trial, and the default is still the batch size the next run gets. The
    sanity check's validation, which logged the module's metrics but not that one, says so
    before the first epoch trains."""
    spec = job(unique_id("lmisconf"))
    for attempt in range(3):
        callback = ZeusBSOCallback(
            server.url, spec, monitor="val_accuracy", energy_meter=EstimateMeter(100)
        )
        options = quiet_trainer_options(tmp_path / str(attempt))
        trainer = pl.Trainer(max_epochs=spec.max_epochs, callbacks=[callback], **options)
        with (
            caplog.at_level(logging.WARNING, logger="zeus_bso"),
            pytest.raises(Exception, match="metric 'val_accuracy' was not logged"),
        ):
            trainer.fit(TinyClassifier())
        assert "the sanity check's validation logged ['val_acc'] but not 'val_accuracy'" in (
            caplog.text
        )
        caplog.clear()
        assert callback.outcome is not None
        assert callback.outcome.reason == "not_trained"
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    assert [t["status"] for t in state["trials"]] == ["released"] * 3
    assert {t["batch_size"] for t in state["trials"]} == {spec.default_batch_size}
    assert state["next_run"]["batch_size"] == spec.default_batch_size
    assert state["stage"] == "pruning"


def test_lightnings_batch_size_finder_beside_the_callback_is_refused_before_the_server_is_asked(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Lightning's BatchSizeFinder sets the batch size too: its trials' batches were refused as
    a DataLoader that ignores the batch size, which misled. Refused in ``setup``, saying which;
    nothing reaches the server."""
    spec = job(unique_id("lfinder"))
    finder = BatchSizeFinder(mode="power", steps_per_trial=1, max_trials=2)
    with pytest.raises(ConfigurationError, match=r"Lightning's BatchSizeFinder .* chooses the"):
        fit(server.url, spec, tmp_path, callbacks=[finder])
    with ServerClient(server.url) as client:
        assert not client.list_jobs(prefix=spec.job_id)


@pytest.mark.parametrize("elastic_first", [False, True], ids=["ours-first", "elastic-first"])
def test_the_elastic_batch_size_callback_beside_the_callback_is_refused_before_the_server_is_asked(
    server: ServerProcess, tmp_path: Path, elastic_first: bool
) -> None:
    """`ElasticBatchSizeCallback` chooses each epoch's batch size too: beside the callback, its
    first epoch's micro-batches were refused as a DataLoader that ignores the batch size (which
    misled), after the server had dispatched a trial. Refused in ``setup``, saying which, in
    either order; nothing reaches the server."""
    from zeus_bso.elastic import ElasticBatchSize, ElasticBatchSizeCallback

    spec = job(unique_id("lelastic"))
    elastic = ElasticBatchSizeCallback(
        ElasticBatchSize(initial_batch_size=32, max_batch_size=256, local_bsz_bounds=(8, 128))
    )
    ours = ZeusBSOCallback(server.url, spec, monitor="val_acc", energy_meter=EstimateMeter(100))
    trainer = pl.Trainer(
        max_epochs=spec.max_epochs,
        reload_dataloaders_every_n_epochs=1,  # as the elastic callback asks
        callbacks=[elastic, ours] if elastic_first else [ours, elastic],
        **quiet_trainer_options(tmp_path),
    )
    with pytest.raises(ConfigurationError, match=r"ElasticBatchSizeCallback chooses the batch"):
        trainer.fit(TinyClassifier())
    with ServerClient(server.url) as client:
        assert not client.list_jobs(prefix=spec.job_id)


class RateTuned(TinyClassifier):
    """TinyClassifier whose rate ``lr`` Lightning's learning-rate finder tunes."""

    def __init__(self) -> None:
        super().__init__()
        self.lr = 0.05

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


@pytest.mark.parametrize("lr_rule", ["linear", "none"])
def test_tuner_lr_find_s_own_fit_asks_nothing_of_the_server_and_the_fit_after_it_trains(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture, lr_rule: str
) -> None:
    """``Tuner(trainer).lr_find(model)`` runs a fit of its own, which ends after the finder's
    steps: it got a trial, which it released ("ended before the server's stop ... run it again
    for a model"). Now it gets none, and trains at the size the rule scales the rate from (the
    job's default; without a rule, the module's own); the fit after it is the run."""
    from lightning.pytorch.tuner import Tuner

    spec = job(unique_id("llrfind"))
    callback = callback_for(server.url, spec, lr_rule=lr_rule)
    trainer = pl.Trainer(
        max_epochs=spec.max_epochs, callbacks=[callback], **quiet_trainer_options(tmp_path)
    )
    model = RateTuned()
    with caplog.at_level(logging.INFO, logger="zeus_bso"):
        found = Tuner(trainer).lr_find(model, min_lr=1e-3, max_lr=1.0, num_training=8)
    assert found is not None
    assert "Tuner.lr_find's fit runs without the batch size optimizer" in caplog.text
    assert "ended before the server's stop" not in caplog.text
    assert callback.session is None
    assert callback.outcome is None
    tuned_at = spec.default_batch_size if lr_rule == "linear" else RateTuned().batch_size
    assert set(model.seen_batch_sizes) == {tuned_at}
    with ServerClient(server.url) as client:
        assert not client.list_jobs(prefix=spec.job_id)  # nothing asked
    model.seen_batch_sizes.clear()
    trainer.fit(model)
    outcome = callback.outcome
    assert outcome is not None
    assert outcome.trial_number == 1
    assert set(model.seen_batch_sizes) == {outcome.batch_size}


def test_a_learning_rate_finder_within_the_fit_is_refused_where_a_rule_would_scale_its_rate(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A ``LearningRateFinder`` among the callbacks tunes the rate at the run's batch size, in
    the fit: ``lr_rule`` then scaled the rate it chose again (at twice the reference, a linear
    rule trained at twice the finder's rate). Refused before the server is asked, saying what
    to do; with ``lr_rule="none"`` the finder's rate trains the run, a run like any other."""
    from lightning.pytorch.callbacks import LearningRateFinder

    spec = job(unique_id("lrfinder"))
    options = quiet_trainer_options(tmp_path)
    finder = LearningRateFinder(min_lr=1e-3, max_lr=1.0, num_training_steps=8)
    callback = callback_for(server.url, spec, lr_rule="linear")
    trainer = pl.Trainer(max_epochs=spec.max_epochs, callbacks=[finder, callback], **options)
    with pytest.raises(ConfigurationError, match=r"lr_rule='linear' would scale the rate"):
        trainer.fit(RateTuned())
    with ServerClient(server.url) as client:
        assert not client.list_jobs(prefix=spec.job_id)
    callback = callback_for(server.url, spec, lr_rule="none")
    finder = LearningRateFinder(min_lr=1e-3, max_lr=1.0, num_training_steps=8)
    trainer = pl.Trainer(max_epochs=spec.max_epochs, callbacks=[finder, callback], **options)
    trainer.fit(RateTuned())
    assert callback.outcome is not None
    assert callback.outcome.trial_number == 1


@pytest.mark.parametrize("accumulation", ["trainer", "scheduler"])
def test_a_trainer_that_accumulates_of_its_own_is_refused_before_the_server_is_asked(
    server: ServerProcess, tmp_path: Path, accumulation: str
) -> None:
    """``accumulate_grad_batches=2`` took each optimizer step over two batches of the size the
    server charged (the HF callback refuses its Trainer's own accumulation too); accumulation
    is the callback's (``max_micro_batch_size``), which sets it to train the server's size."""
    spec = job(unique_id("lacc"))
    options: dict[str, Any] = (
        {"accumulate_grad_batches": 2}
        if accumulation == "trainer"
        else {"callbacks": [GradientAccumulationScheduler({0: 1, 1: 2})]}
    )
    words = r"accumulate_grad_batches=2\)" if accumulation == "trainer" else "Scheduler"
    with pytest.raises(ConfigurationError, match=rf"{words}.*ZeusBSOCallback\(max_micro_batch"):
        fit(server.url, spec, tmp_path, **options)
    with ServerClient(server.url) as client:
        assert not client.list_jobs(prefix=spec.job_id)


def refused_fit(
    server_url: str, spec: JobSpec, tmp_path: Path, words: str, *fit: Any, **options: Any
) -> str:
    """The message of the `ConfigurationError` (matching ``words``) that a fit (of ``fit``'s
    model and data) under the callback (``options``) raised."""
    callback = ZeusBSOCallback(server_url, spec, energy_meter=EstimateMeter(100), **options)
    trainer = pl.Trainer(
        max_epochs=spec.max_epochs, callbacks=[callback], **quiet_trainer_options(tmp_path)
    )
    with pytest.raises(ConfigurationError, match=words) as raised:
        trainer.fit(*fit)
    return str(raised.value)


class FixedBatchClassifier(TinyClassifier):
    """Has a ``batch_size`` attribute, but its DataLoader takes a fixed size."""

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.train_data, batch_size=8, shuffle=True)


class WholeBatches(torch.utils.data.IterableDataset):  # type: ignore[misc]
    """Makes its batches whole (as WebDataset's ``.batched(n)`` does)."""

    def __init__(self, data: Any, batch_size: int) -> None:
        self.data, self.batch_size = data, batch_size

    def __iter__(self) -> Any:
        x, y = self.data.tensors
        for start in range(0, len(x), self.batch_size):
            yield x[start : start + self.batch_size], y[start : start + self.batch_size]


class BatchingData(pl.LightningDataModule):  # type: ignore[misc]
    """Its dataset batches itself, at ``batch_size``: made in ``setup()`` (before any
    callback's), or, ``in_loader``, in ``train_dataloader()``."""

    def __init__(self, in_loader: bool) -> None:
        super().__init__()
        self.batch_size, self.in_loader = 16, in_loader

    def setup(self, stage: str) -> None:
        self.train_set = WholeBatches(make_data(512, 0), self.batch_size)

    def train_dataloader(self) -> Any:
        if self.in_loader:
            self.train_set = WholeBatches(make_data(512, 0), self.batch_size)
        return torch.utils.data.DataLoader(self.train_set, batch_size=None)

    def val_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(make_data(256, 1), batch_size=64)


class WithoutLoaders(TinyClassifier):
    def __init__(self) -> None:
        super().__init__()
        del self.batch_size  # the datamodule holds it


@pytest.mark.parametrize("in_loader", [False, True])
def test_a_dataset_that_batches_itself_trains_the_size_where_it_is_made_after_it_is_set(
    server: ServerProcess, tmp_path: Path, in_loader: bool
) -> None:
    """A dataset that makes its batches whole (``DataLoader(batch_size=None)``): made in the
    datamodule's ``setup()``, which Lightning runs before the callback sets the size, it batches
    at its own, and the fit is refused before a step, saying where to make it (the words were
    those for a DataLoader of a fixed batch_size); made in ``train_dataloader()``, it trains
    the server's."""
    spec = job(unique_id("wholebatches"), target=0.99, max_epochs=1)
    callback = ZeusBSOCallback(server.url, spec, monitor="val_acc")
    trainer = pl.Trainer(callbacks=[callback], max_epochs=1, **quiet_trainer_options(tmp_path))
    model = WithoutLoaders()
    if in_loader:
        trainer.fit(model, datamodule=BatchingData(in_loader))
        assert set(model.seen_batch_sizes) == {32}
        return
    said = r"takes its batches whole from its dataset \(WholeBatches, batch_size=None\)"
    with pytest.raises(ConfigurationError, match=said):
        trainer.fit(model, datamodule=BatchingData(in_loader))
    assert model.seen_batch_sizes == []  # not a step, tried or trained


class SmallData(TinyClassifier):
    """24 training samples, its DataLoader dropping a short last batch (batch norm's habit)."""

    def train_dataloader(self) -> Any:
        data = make_data(24, 0)
        return torch.utils.data.DataLoader(data, batch_size=self.batch_size, drop_last=True)


@pytest.mark.parametrize("memory_check_steps", [3, 0])
def test_a_batch_size_larger_than_the_data_with_drop_last_is_refused_not_released_in_silence(
    server: ServerProcess, tmp_path: Path, memory_check_steps: int
) -> None:
    """Batch size 32 on 24 samples with ``drop_last=True``: no training batch. Lightning ended
    the fit without a step, the trial was released ("the fit ended before the server's stop"),
    and the server dispatched the same size again, recurrence after recurrence: a job that
    never trained. It is refused, before a step (by the memory check, or when training starts
    where the size is known), saying which sizes the data holds."""
    spec = job(unique_id("smalldata"), target=0.99, max_epochs=1)
    callback = ZeusBSOCallback(
        server.url, spec, monitor="val_acc", memory_check_steps=memory_check_steps
    )
    trainer = pl.Trainer(callbacks=[callback], max_epochs=1, **quiet_trainer_options(tmp_path))
    model = SmallData()
    said = "batch size 32 makes no training batch: its data holds 24 samples"
    with pytest.raises(ConfigurationError, match=said):
        trainer.fit(model)
    assert "leave the sizes above 24 out of the job's batch_sizes" in str(callback.outcome)
    assert model.seen_batch_sizes == []
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["batch_size"], trial["status"]) == (32, "released")


def test_the_attributes_that_hold_the_batchs_size_are_named_not_counts_of_batches() -> None:
    """What a refusal names as the attribute a DataLoader may read instead: one whose name says
    it holds a batch's size (on the model, the datamodule or their hparams), never a count of
    batches that happens to equal it, nor the attribute the callback set."""
    from types import SimpleNamespace

    from zeus_bso.integrations.lightning_attributes import holding

    data = SimpleNamespace(
        batch_size_per_device=16,
        num_batches=16,
        hparams={"batch_size": 32},
        loader_kwargs={"batch_size": 16, "num_workers": 16},  # DataLoader(**loader_kwargs)
    )
    model = SimpleNamespace(
        bs=16,
        log_every_n_batches=16,
        hparams={"train_batch_size": 16},
        args=argparse.Namespace(batch_size=16, epochs=16),  # the script's parsed arguments
    )
    trainer = SimpleNamespace(datamodule=data)
    assert holding(trainer, model, 16, "batch_size") == [  # type: ignore[arg-type]
        ("SimpleNamespace.bs", "bs"),
        ("SimpleNamespace.args.batch_size", "args.batch_size"),
        ("SimpleNamespace.train_batch_size", "train_batch_size"),
        ("SimpleNamespace.batch_size_per_device", "batch_size_per_device"),
        ("SimpleNamespace.loader_kwargs['batch_size']", "loader_kwargs.batch_size"),
    ]
    assert holding(trainer, model, 32, "batch_size") == []  # type: ignore[arg-type]
    assert holding(trainer, model, 16, "loader_kwargs.batch_size")[-1] == (  # type: ignore[arg-type]
        "SimpleNamespace.batch_size_per_device",
        "batch_size_per_device",
    )


def test_a_dataloader_that_ignores_the_batch_size_stops_the_fit_uncharged(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The server's 32 is set on the module, but its DataLoader trains 8: the fit stops at its
    first batch, saying what to change, and its trial is released."""
    spec = job(unique_id("fixedbatch"))
    words = "first training batch has 8 samples"
    message = refused_fit(server.url, spec, tmp_path, words, FixedBatchClassifier())
    assert "batch_size=self.batch_size" in message
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["batch_size"], trial["status"]) == (32, "released")


class OutOfMemoryAtStep2(TinyClassifier):
    """Runs out of memory (as CUDA raises it) at its third training step."""

    def training_step(self, batch: Any, index: int) -> Any:
        if self.global_step >= 2:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 MiB")
        return super().training_step(batch, index)


@pytest.mark.parametrize(
    ("model", "raised", "status"),
    [
        (FixedBatchClassifier, "first training batch has 8 samples", "released"),
        (OutOfMemoryAtStep2, "CUDA out of memory", "infeasible"),
    ],
    ids=["refused", "out-of-memory"],
)
def test_an_error_in_processes_the_launcher_started_ends_the_trial_as_it_should(
    server: ServerProcess, tmp_path: Path, model: type, raised: str, status: str
) -> None:
    """``ddp_spawn`` trains in processes it started, where Lightning calls no
    ``on_exception``: the trial was failed at the process's exit whatever the error, a
    failure counted against 32 (under ``ddp_notebook``, forked processes, it was left to its
    lease). The callback ends its own refusal before raising (released), and the process's
    end judges the error that ends it (`zeus_bso.exits.uncaught_error`): out of memory makes
    32 infeasible, as in the process that called fit."""
    spec = job(unique_id("ddperror"), target=0.999, max_epochs=2)
    callback = ZeusBSOCallback(
        server.url, spec, energy_meter=EstimateMeter(100), memory_check_steps=0
    )
    trainer = pl.Trainer(
        max_epochs=2,
        callbacks=[callback],
        devices=2,
        strategy="ddp_spawn",
        **quiet_trainer_options(tmp_path),
    )
    with spawning(), pytest.raises(Exception, match=raised):
        trainer.fit(model())
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["batch_size"], trial["status"]) == (32, status)


def given_loaders_fit(
    server_url: str, spec: JobSpec, tmp_path: Path, **options: Any
) -> tuple[TinyClassifier, Any]:
    """``trainer.fit(model, train_loader, val_loader)``, the train DataLoader built by the
    script at the job's default, 32, shuffled by a generator of its own, with a worker that
    persists across epochs, and the model's ``batch_size`` at 16; the model, and its weights
    after the fit."""
    pl.seed_everything(0, verbose=False)
    model = TinyClassifier(batch_size=16)
    train = torch.utils.data.DataLoader(
        model.train_data,
        batch_size=32,
        shuffle=True,
        generator=torch.Generator().manual_seed(7),  # the script's own shuffle
        num_workers=1,
        persistent_workers=True,
    )
    callback = ZeusBSOCallback(server_url, spec, energy_meter=EstimateMeter(100), **options)
    trainer = pl.Trainer(
        max_epochs=spec.max_epochs, callbacks=[callback], **quiet_trainer_options(tmp_path)
    )
    trainer.fit(model, train, model.val_dataloader())
    return model, [p.detach().clone() for p in model.parameters()]


def test_a_dataloader_given_to_fit_trains_the_servers_size_and_the_check_leaves_no_trace(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``trainer.fit(model, train_loader, val_loader)``, as most scripts call it: it trains at
    the server's 32, the model's own ``batch_size`` follows, and the server charges the size
    that trained (the corpus's ``lightning_fit_loaders.py`` has its loader built again at other
    sizes). The memory check's steps at 32 are undone without a trace: the fit trains the same
    weights as one without the check (had the check iterated the fit's own loader, already at
    32, its persistent worker would have kept the random seed drawn then; had it drawn from the
    script's generator and left it so, the fit would shuffle otherwise too)."""
    checked, unchecked = job(unique_id("fitloader")), job(unique_id("fitloadernocheck"))
    model, weights = given_loaders_fit(server.url, checked, tmp_path)
    steps = 3  # the memory check's, at 32 (new on this hardware), undone
    assert model.seen_batch_sizes[steps:] == [32] * (len(model.seen_batch_sizes) - steps)
    assert model.batch_size == 32
    _, without_check = given_loaders_fit(server.url, unchecked, tmp_path, memory_check_steps=0)
    assert all(torch.equal(a, b) for a, b in zip(weights, without_check, strict=True))
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(checked.job_id or "")["trials"]
    assert (trial["batch_size"], trial["status"]) == (32, "reported")


class StepWithoutIndex(TinyClassifier):
    def training_step(self, batch: Any) -> Any:  # Lightning gives batch_idx only if asked
        return super().training_step(batch, 0)


class StepDrawsItsBatches(TinyClassifier):
    def training_step(self, dataloader_iter: Any) -> Any:  # Lightning's dataloader_iter flavour
        batch, _, _ = next(dataloader_iter)
        return super().training_step(batch, 0)


@pytest.mark.parametrize("model_class", [StepWithoutIndex, StepDrawsItsBatches])
def test_a_training_step_of_another_signature_is_tried_and_trains_the_servers_size(
    server: ServerProcess, tmp_path: Path, model_class: type
) -> None:
    """``training_step(self, batch)`` and ``training_step(self, dataloader_iter)``, which the fit
    loop calls so: the memory check calls them the same way (it gave both a batch and an index,
    and the fit failed with a TypeError before its first step), and the size is logged without
    a batch to read it from."""
    spec = job(unique_id("signature"), target=0.99, max_epochs=1)
    model = model_class()
    callback = ZeusBSOCallback(server.url, spec, monitor="val_acc")
    trainer = pl.Trainer(callbacks=[callback], max_epochs=1, **quiet_trainer_options(tmp_path))
    trainer.fit(model)
    steps = 3  # the memory check's, at 32 (new on this hardware), undone
    assert model.seen_batch_sizes == [32] * (steps + 512 // 32)
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["batch_size"], trial["status"]) == (32, "reported")
    assert trainer.callback_metrics["bso/batch_size"] == 32


def halves(samples: list[Any]) -> Any:
    """A collate_fn that keeps half of each batch (a filter of the script's own)."""
    return torch.utils.data.default_collate(samples[: max(1, len(samples) // 2)])


def test_a_dataloader_given_to_fit_whose_collate_makes_its_batches_stops_the_fit_uncharged(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Built again at the server's 32, the given DataLoader's collate_fn still keeps 16 of
    each batch: the fit stops at its first batch, saying that the loader's batches are its own
    (not to build it from ``self.batch_size``, which it never read), its trial released."""
    spec = job(unique_id("fitcollate"))
    model = TinyClassifier()
    loader = torch.utils.data.DataLoader(model.train_data, batch_size=16, collate_fn=halves)
    words = "the train DataLoader the fit was given, built again with batch_size=32, yields"
    message = refused_fit(server.url, spec, tmp_path, words, model, loader, model.val_dataloader())
    assert "first training batch has 16 samples" in message
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["batch_size"], trial["status"]) == (32, "released")


def test_a_dataloader_given_to_fit_that_cannot_be_resized_is_refused_before_the_server_is_asked(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A train DataLoader given to ``trainer.fit`` whose batches its own ``batch_sampler``
    makes: no ``batch_size`` changes them. Refused at setup, naming it and where to build the
    DataLoader instead; nothing is asked of the server."""
    spec = job(unique_id("fitsampler"))
    model = TinyClassifier(batch_size=16)
    sampler = torch.utils.data.BatchSampler(range(len(model.train_data)), 16, drop_last=False)
    loader = torch.utils.data.DataLoader(model.train_data, batch_sampler=sampler)
    words = "was given a DataLoader whose batches its batch_sampler"
    message = refused_fit(server.url, spec, tmp_path, words, model, loader, model.val_dataloader())
    assert "train_dataloader() with self.batch_size" in message
    with ServerClient(server.url) as client:
        assert not client.list_jobs(prefix=spec.job_id)


class OneCycleOfTheScriptsLoader(TinyClassifier):
    """OneCycleLR sized as tutorials size it, from the script's own train DataLoader
    (``steps_per_epoch=len(train_loader)``), given to the module."""

    def __init__(self, steps_per_epoch: int, epochs: int) -> None:
        super().__init__()
        self.steps_per_epoch, self.epochs = steps_per_epoch, epochs

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, 0.05, epochs=self.epochs, steps_per_epoch=self.steps_per_epoch
        )
        return [optimizer], [{"scheduler": scheduler, "interval": "step"}]


class WarmupCosineOfTheScriptsLoader(OneCycleOfTheScriptsLoader):
    """A LinearLR warm-up chained to a cosine decay (SequentialLR), sized the same way."""

    def configure_optimizers(self) -> Any:
        from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR

        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        total = self.steps_per_epoch * self.epochs
        warmup = LinearLR(optimizer, 0.1, total_iters=10)
        decay = CosineAnnealingLR(optimizer, T_max=total - 10)
        scheduler = SequentialLR(optimizer, [warmup, decay], milestones=[10])
        return [optimizer], [{"scheduler": scheduler, "interval": "step"}]


@pytest.mark.parametrize(
    ("size", "module", "words"),
    [
        (
            16,
            OneCycleOfTheScriptsLoader,
            r"OneCycleLR's length, 96 steps, is shorter than the run may train, 192 optimizer",
        ),
        (
            64,
            OneCycleOfTheScriptsLoader,
            r"OneCycleLR's length, 96 steps, does not fit the run: it trains 64 samples a step, "
            r"48 optimizer steps .* would end before the rate anneals",
        ),
        (
            16,
            WarmupCosineOfTheScriptsLoader,
            r"SequentialLR's length, 96 steps, does not fit the run: it trains 16 samples a step, "
            r"192 optimizer steps .* would anneal, and go on",
        ),
    ],
    ids=["one-cycle-16", "one-cycle-64", "warm-up-cosine-16"],
)
def test_a_schedule_sized_from_the_scripts_own_dataloader_is_refused_before_a_step(
    server: ServerProcess, tmp_path: Path, size: int, module: type, words: str
) -> None:
    """The script built its train DataLoader at 32 and sized OneCycleLR (or a warm-up chained
    to a cosine) from it (16 batches, six epochs: 96 steps); the server dispatched ``size``. At
    16 the fit takes twice the schedule's steps (OneCycleLR raised half-way where the run
    trained that far, and the trial failed; the cosine climbed back up); at 64, half of them
    (the run ended before the rate annealed, and the server learnt 64's cost at a rate the
    script never meant). Refused when training starts, saying how to size it; the trial is
    released."""
    spec = job(unique_id("fitonecycle")).model_copy(update={"default_batch_size": size})
    model = TinyClassifier()
    train = torch.utils.data.DataLoader(model.train_data, batch_size=32, shuffle=True)
    fitted = module(len(train), spec.max_epochs)
    message = refused_fit(server.url, spec, tmp_path, words, fitted, train, model.val_dataloader())
    assert "self.trainer.estimated_stepping_batches" in message
    assert fitted.seen_batch_sizes == [size] * 3  # only the memory check's, undone
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["batch_size"], trial["status"]) == (size, "released")


class TransformersScheduleOfFixedLength(TinyClassifier):
    """transformers' linear warm-up and decay, its length fixed for the default batch size, 32
    (16 batches, six epochs), as a module that does its own arithmetic writes it."""

    def configure_optimizers(self) -> Any:
        from transformers import get_linear_schedule_with_warmup

        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        scheduler = get_linear_schedule_with_warmup(optimizer, 10, num_training_steps=96)
        return [optimizer], [{"scheduler": scheduler, "interval": "step"}]


def test_a_schedule_of_fixed_length_trains_at_its_size_and_is_refused_at_another(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The first recurrence trains at the default, 32, whose six epochs are the schedule's 96
    steps; the next explores another size, whose steps are not: refused when training starts
    (it would decay to 0 half-way at 16, or stop half-way down the decay at 64), its trial
    released."""
    pytest.importorskip("transformers", reason="pip install 'zeus-bso[hf]'")
    spec = job(unique_id("fixedlinear"), target=0.6)
    callback = ZeusBSOCallback(server.url, spec, energy_meter=EstimateMeter(100))
    trainer = pl.Trainer(
        max_epochs=spec.max_epochs, callbacks=[callback], **quiet_trainer_options(tmp_path)
    )
    trainer.fit(TransformersScheduleOfFixedLength())
    assert callback.outcome is not None
    assert callback.outcome.batch_size == 32
    words = r"get_linear_schedule_with_warmup's length, 96 steps, does not fit the run"
    message = refused_fit(server.url, spec, tmp_path, words, TransformersScheduleOfFixedLength())
    assert "sized, it seems, for batch size 32's" in message
    with ServerClient(server.url) as client:
        trials = client.job_state(spec.job_id or "")["trials"]
    first, second = sorted(trials, key=lambda trial: trial["trial_number"])
    assert (first["batch_size"], first["status"], first["converged"]) == (32, "reported", True)
    assert second["batch_size"] != 32
    assert second["status"] == "released"


class OneCycleOfFixedLength(TinyClassifier):
    """Builds its DataLoader at the batch size set on it; OneCycleLR of a fixed length."""

    def __init__(self, total_steps: int) -> None:
        super().__init__()
        self.total_steps = total_steps

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.05, self.total_steps)
        return [optimizer], [{"scheduler": scheduler, "interval": "step"}]


def test_a_one_cycle_shorter_than_the_run_may_train_is_refused_before_a_step(
    server: ServerProcess, tmp_path: Path
) -> None:
    """OneCycleLR fixed at 96 steps, six epochs at 32: the server dispatched 16, whose six
    epochs take 192, and the schedule would raise half-way. Refused when training starts; the
    trial is released; so is it where the Trainer's ``max_steps`` alone bounds the fit, past 96.
    The same schedule passes where the job's ``max_epochs`` (3) bounds the run within its 96
    steps, though the Trainer's (6) would not."""
    spec = job(unique_id("fixedcycle")).model_copy(update={"default_batch_size": 16})
    words = r"OneCycleLR's length, 96 steps, is shorter than the run may train, 192 optimizer"
    refused_fit(server.url, spec, tmp_path, words, OneCycleOfFixedLength(96))
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["batch_size"], trial["status"]) == (16, "released")
    # A Trainer bounded by steps alone (max_epochs unset): its 150 steps are the bound.
    spec = job(unique_id("fixedcyclesteps")).model_copy(update={"default_batch_size": 16})
    callback = ZeusBSOCallback(server.url, spec, energy_meter=EstimateMeter(100))
    trainer = pl.Trainer(max_steps=150, callbacks=[callback], **quiet_trainer_options(tmp_path))
    steps_words = r"OneCycleLR's length, 96 steps, is shorter than the run may train, 150"
    with pytest.raises(ConfigurationError, match=steps_words):
        trainer.fit(OneCycleOfFixedLength(96))
    short = job(unique_id("fixedcycleshort"), max_epochs=3)
    short = short.model_copy(update={"default_batch_size": 16})
    callback = ZeusBSOCallback(server.url, short, energy_meter=EstimateMeter(100))
    trainer = pl.Trainer(max_epochs=6, callbacks=[callback], **quiet_trainer_options(tmp_path))
    trainer.fit(OneCycleOfFixedLength(96))
    assert callback.outcome is not None
    assert callback.outcome.batch_size == 16


class ReadOnlyBatchSize(TinyClassifier):
    """Its batch size (``per_step``) is a property without a setter."""

    @property
    def per_step(self) -> int:
        return self.batch_size


def test_a_batch_size_the_callback_cannot_set_is_refused_before_the_server_is_asked(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A read-only property: setting it raised an AttributeError inside the fit, after a trial
    was taken (and released). Refused at setup, saying what to change."""
    spec = job(unique_id("readonly"))
    words = "the callback cannot set 'per_step'"
    message = refused_fit(
        server.url, spec, tmp_path, words, ReadOnlyBatchSize(), batch_arg_name="per_step"
    )
    assert "a property of ReadOnlyBatchSize without a setter that reads no attribute" in message
    with ServerClient(server.url) as client:
        assert not client.list_jobs(prefix=spec.job_id)


class SizeFromHparams(pl.LightningDataModule):  # type: ignore[misc]
    """Its ``batch_size`` is a property that returns ``self.hparams.batch_size``
    (``fixed``: returns that number instead, whatever the hparams hold)."""

    def __init__(self, batch_size: int = 8, fixed: int = 0) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.data = TinyClassifier()

    @property
    def batch_size(self) -> int:
        return self.hparams.fixed or self.hparams.batch_size

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(
            self.data.train_data, batch_size=self.batch_size, shuffle=True
        )

    def val_dataloader(self) -> Any:
        return self.data.val_dataloader()


def test_a_property_that_reads_the_hparams_takes_the_size_set_there(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A datamodule's read-only ``batch_size`` property that returns
    ``self.hparams.batch_size`` (Lightning's own setattr raised on it): the size is set on the
    hparams, which the property reads; every step trains the server's size. One that returns a
    number of its own is refused before the server is asked, as before."""
    spec = job(unique_id("hparamsprop"), max_epochs=2)
    model, data = NoBatchSizeClassifier(), SizeFromHparams()
    callback = ZeusBSOCallback(server.url, spec, monitor="val_acc", energy_meter=EstimateMeter(100))
    trainer = pl.Trainer(max_epochs=2, callbacks=[callback], **quiet_trainer_options(tmp_path))
    trainer.fit(model, datamodule=data)
    assert set(model.seen_batch_sizes) == {32} == {data.batch_size}

    fixed = job(unique_id("fixedprop"), max_epochs=2)
    words = "the callback cannot set 'batch_size', a property of SizeFromHparams"
    own = SizeFromHparams(fixed=8)
    refused_fit(server.url, fixed, tmp_path, words, NoBatchSizeClassifier(), own)
    assert own.hparams.batch_size == 8  # the value tried on it is set back
    with ServerClient(server.url) as client:
        assert not client.list_jobs(prefix=fixed.job_id)


class LoadersBuiltInSetup(pl.LightningDataModule):  # type: ignore[misc]
    """Builds its DataLoaders in ``setup()``, which Lightning runs before any callback's."""

    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.batch_size = batch_size

    def setup(self, stage: str) -> None:
        model = TinyClassifier(self.batch_size)
        self.train_loader = model.train_dataloader()
        self.val_loader = model.val_dataloader()

    def train_dataloader(self) -> Any:
        return self.train_loader

    def val_dataloader(self) -> Any:
        return self.val_loader


def test_a_dataloader_built_in_the_datamodules_setup_is_named_as_built_too_early(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The datamodule reads ``self.batch_size``, but in ``setup()``, before the callback sets
    the server's 32 on it: the fit stops at its first batch, saying so and where to build the
    DataLoader instead (not "a fixed size", which it is not)."""
    spec = job(unique_id("setupbuilt"))
    words = "first training batch has 8 samples"
    message = refused_fit(
        server.url, spec, tmp_path, words, TinyClassifier(), LoadersBuiltInSetup()
    )
    assert "the train DataLoader was built before the callback set 'batch_size'" in message
    assert "LoadersBuiltInSetup.train_loader" in message
    assert "build it in train_dataloader()" in message
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["batch_size"], trial["status"]) == (32, "released")


class LoaderKeywords(pl.LightningDataModule):  # type: ignore[misc]
    """Keeps the keyword arguments its train DataLoader is built with, the batch size among
    them, in a dict made in ``__init__``."""

    def __init__(self, batch_size: int = 8) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.loader_kwargs = {"batch_size": batch_size, "num_workers": 0}
        self.data = TinyClassifier()

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.data.train_data, shuffle=True, **self.loader_kwargs)

    def val_dataloader(self) -> Any:
        return self.data.val_dataloader()


def test_a_size_in_the_dataloaders_keyword_arguments_is_named_and_then_trains(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The DataLoader takes its size from a dict of keyword arguments made in ``__init__``: the
    refusal names the entry and the dotted ``batch_arg_name`` that reaches it, with which the
    next fit trains the server's size."""
    spec = job(unique_id("loaderkwargs"), max_epochs=2)
    words = "first training batch has 8 samples"
    message = refused_fit(
        server.url, spec, tmp_path, words, NoBatchSizeClassifier(), LoaderKeywords()
    )
    assert "LoaderKeywords.loader_kwargs['batch_size'] holds the batch's size" in message
    assert "batch_arg_name='loader_kwargs.batch_size'" in message
    model, data = NoBatchSizeClassifier(), LoaderKeywords()
    callback = ZeusBSOCallback(
        server.url,
        spec,
        monitor="val_acc",
        batch_arg_name="loader_kwargs.batch_size",
        energy_meter=EstimateMeter(100),
    )
    trainer = pl.Trainer(max_epochs=2, callbacks=[callback], **quiet_trainer_options(tmp_path))
    trainer.fit(model, datamodule=data)
    assert set(model.seen_batch_sizes) == {32} == {callback.batch_size}


class NoBatchSizeClassifier(TinyClassifier):
    """Takes its data from the datamodule and has no batch size of its own."""

    def __init__(self) -> None:
        super().__init__()
        del self.batch_size


def test_a_datamodule_from_datasets_trains_the_servers_size(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``LightningDataModule.from_datasets(..., batch_size=8)`` builds its DataLoaders at 8
    whatever the callback sets: its train DataLoader is built again at the server's 32, for a
    module without a batch size of its own and for one with (set too). One whose datasets are
    several (a DataLoader each) is refused before the server is asked, naming the datamodule
    (the advice was to read ``self.batch_size``, which it cannot)."""
    data = TinyClassifier()
    datamodule = pl.LightningDataModule.from_datasets(data.train_data, data.val_data, batch_size=8)
    for model in (NoBatchSizeClassifier(), TinyClassifier()):
        spec = job(unique_id("fromds"))
        callback = ZeusBSOCallback(server.url, spec, energy_meter=EstimateMeter(100))
        trainer = pl.Trainer(
            max_epochs=spec.max_epochs, callbacks=[callback], **quiet_trainer_options(tmp_path)
        )
        trainer.fit(model, datamodule=datamodule)
        assert set(model.seen_batch_sizes) == {32}
        assert getattr(model, "batch_size", 32) == 32
        with ServerClient(server.url) as client:
            (trial,) = client.job_state(spec.job_id or "")["trials"]
        assert (trial["batch_size"], trial["status"]) == (32, "reported")
    several = pl.LightningDataModule.from_datasets(
        [data.train_data, data.train_data], data.val_data, batch_size=8
    )
    spec = job(unique_id("fromds"))
    words = "LightningDataModule.from_datasets"
    message = refused_fit(server.url, spec, tmp_path, words, NoBatchSizeClassifier(), several)
    assert "subclass LightningDataModule with a 'batch_size' attribute" in message
    assert "built a list, not one torch DataLoader" in message
    with ServerClient(server.url) as client:
        assert not client.list_jobs(prefix=spec.job_id)


def test_the_trainers_max_epochs_is_counted_in_validations_where_it_validates_within_epochs(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Validating twice an epoch, the Trainer's ``max_epochs=1`` allows two validations, fewer
    than the job's four: said in validations, with the Trainer's max_epochs that makes them
    (two, not the job's four), and the run ends unjudged (released) saying so. Where the
    Trainer's epochs allow as many, nothing is said."""
    spec = job(unique_id("lithalfshort"), target=0.999, max_epochs=4)
    with caplog.at_level(logging.WARNING, logger="zeus_bso"):
        _, callback = fit(server.url, spec, tmp_path, max_epochs=1, val_check_interval=0.5)
    assert (
        "Trainer(max_epochs=1) ends the fit after 2 validations (every 8 batches), before the "
        "job's max_epochs (4 validations)"
    ) in caplog.text
    assert "give the Trainer max_epochs=2 (the server stops the fit)" in caplog.text
    assert "is below the job's max_epochs" not in caplog.text
    outcome = callback.outcome
    assert outcome is not None
    assert (outcome.reason, outcome.converged, outcome.epochs) == ("ended_early", False, 2)
    assert "the Trainer's max_epochs (1) ended it after 2 validations" in outcome.summary()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="zeus_bso"):
        fit(server.url, job(unique_id("lithalfenough"), 0.999, 4), tmp_path, max_epochs=2,
            val_check_interval=0.5)  # fmt: skip
    assert "validations (every" not in caplog.text


def test_validations_every_n_batches_come_the_same_samples_apart_at_every_batch_size(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``val_check_interval=4`` batches, tuned at the reference batch size 32, validates every
    128 samples; a fit at 64 validates every 2 of its batches: four validations an epoch of 512
    samples, not two, so the job's six are reached in the second epoch, each the same data as
    at the reference."""
    spec = job(unique_id("litcadence"), target=0.999, max_epochs=6).model_copy(
        update={"batch_sizes": [64], "default_batch_size": 64}
    )
    pl.seed_everything(0, verbose=False)
    model = TinyClassifier()
    callback = ZeusBSOCallback(
        server.url,
        spec,
        monitor="val_acc",
        energy_meter=EstimateMeter(100),
        reference_batch_size=32,
    )
    trainer = pl.Trainer(
        callbacks=[callback], max_epochs=6, val_check_interval=4, **quiet_trainer_options(tmp_path)
    )
    with caplog.at_level(logging.INFO, logger="zeus_bso"):
        trainer.fit(model)
    assert "at batches of 64 the fit validates every 2 batches" in caplog.text
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["epochs"] == 6
    assert trainer.global_step == 12  # six validations, one every two batches (not 24 steps)


class SizedSchedule(TinyClassifier):
    """Sizes a schedule from ``estimated_stepping_batches``, as Lightning's docs write one."""

    def configure_optimizers(self) -> Any:
        self.sized_for = self.trainer.estimated_stepping_batches
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        schedule = torch.optim.lr_scheduler.LinearLR(optimizer, 1.0, 0.1, int(self.sized_for))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


@pytest.mark.parametrize(("max_steps", "warned"), [(16, False), (15, True)])
def test_max_steps_is_judged_against_the_fits_own_validations_every_n_batches(
    server: ServerProcess,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    max_steps: int,
    warned: bool,
) -> None:
    """Validating every 4 batches of the reference size 16 across epochs, a fit at 32
    validates every 2 of its batches, and its ``max_steps``, of the reference's steps too,
    trains half as many of its own: the job's four validations take 16 steps of the
    reference's (8 of the fit's), so ``max_steps=16`` is enough, and 15 is not (said in the
    script's steps)."""
    spec = job(unique_id("litsteps"), target=0.999, max_epochs=4)
    callback = callback_for(server.url, spec, reference_batch_size=16)
    options = quiet_trainer_options(tmp_path)
    trainer = pl.Trainer(
        callbacks=[callback],
        max_steps=max_steps,
        val_check_interval=4,
        check_val_every_n_epoch=None,
        **options,
    )
    with caplog.at_level(logging.WARNING, logger="zeus_bso"):
        trainer.fit(SizedSchedule())
    said = f"Trainer(max_steps={max_steps}) ends the fit before the job's max_epochs (4)"
    assert (said in caplog.text) is warned
    assert trainer.max_steps == -(-max_steps // 2)  # the same samples, up
    assert trainer.lightning_module.sized_for == trainer.max_steps  # the schedule's length
    if warned:
        assert "validations of every 4 batches" in caplog.text
        assert "set max_steps to at least 16" in caplog.text


def test_an_epoch_of_limit_train_batches_is_the_same_samples_at_every_batch_size(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``limit_train_batches=8``, tuned at the reference batch size 16 (128 samples an epoch):
    a fit at 32 trains 4 batches an epoch, the same samples, and a schedule sized from
    ``estimated_stepping_batches`` spans them; the warning of a part of each epoch speaks of
    the script's 8."""
    spec = job(unique_id("litpart"), target=0.999, max_epochs=2)
    callback = callback_for(server.url, spec, reference_batch_size=16, memory_check_steps=0)
    trainer = pl.Trainer(
        callbacks=[callback],
        max_epochs=2,
        limit_train_batches=8,
        **quiet_trainer_options(tmp_path),
    )
    model = SizedSchedule()
    with caplog.at_level(logging.INFO, logger="zeus_bso"):
        trainer.fit(model)
    assert callback.batch_size == 32
    assert model.seen_batch_sizes == [32] * 8  # two epochs of 4 batches
    assert model.sized_for == 8
    assert "limit_train_batches=8 (an epoch's batches at the reference batch size 16)" in (
        caplog.text
    )
    assert "Trainer(limit_train_batches=8): each epoch trains part" in caplog.text


def test_checkpoints_every_few_steps_come_the_same_samples_apart_at_every_size(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``ModelCheckpoint(every_n_train_steps=4)``, tuned at the reference batch size 16, saves
    every 64 samples: a fit at 32 saves every 2 of its steps (it saved every 4: half as many
    checkpoints, where a fit at 8 saved twice as many, their time and energy charged to the
    size). A ModelCheckpoint fit again keeps the steps it was written with."""
    spec = job(unique_id("litsaves"), target=0.0, max_epochs=1).model_copy(
        update={"batch_sizes": [32]}
    )
    callback = callback_for(server.url, spec, reference_batch_size=16, memory_check_steps=0)
    checkpoints = pl.callbacks.ModelCheckpoint(
        dirpath=tmp_path / "saved", every_n_train_steps=4, save_top_k=-1
    )
    options = quiet_trainer_options(tmp_path) | {"enable_checkpointing": True}
    for again in range(2):  # the same callbacks fit again (a notebook cell run again)
        trainer = pl.Trainer(callbacks=[callback, checkpoints], max_epochs=1, **options)
        with caplog.at_level(logging.INFO, logger="zeus_bso"):
            trainer.fit(TinyClassifier())
        assert callback.batch_size == 32
        saved = (tmp_path / "saved").glob(f"*{'-v1' if again else ''}.ckpt")
        steps = sorted(int(p.stem.split("step=")[1].split("-")[0]) for p in saved)
        assert steps[-8:] == list(range(2, 17, 2)), steps  # 512 samples: 16 steps of 32
        assert checkpoints._every_n_train_steps == 2  # of the script's 4, not of the 2 set
    said = (
        "ModelCheckpoint(every_n_train_steps=4) (the steps between checkpoints at the reference "
        "batch size 16): at batch size 32 it saves every 2 steps"
    )
    assert caplog.text.count(said) == 1  # the second fit's is already set


class Validates(TinyClassifier):
    """Validates on DataLoaders of ``sizes``: ``None`` takes the training batch size (as
    Lightning's DataModule example writes it), a number is a size of its own; it counts the
    samples of each validation."""

    def __init__(self, *sizes: int | None) -> None:
        super().__init__()
        self.sizes = sizes
        self.validated: list[int] = []

    def val_dataloader(self) -> Any:
        loaders = [
            torch.utils.data.DataLoader(self.val_data, batch_size=size or self.batch_size)
            for size in self.sizes
        ]
        return loaders[0] if len(loaders) == 1 else loaders

    def on_validation_epoch_start(self) -> None:
        self.validated.append(0)

    def validation_step(self, batch: Any, index: int, dataloader_idx: int = 0) -> None:
        self.validated[-1] += len(batch[0])
        if dataloader_idx == 0:  # the metric: the first DataLoader's
            x, y = batch
            accuracy = (self.layer(x).argmax(1) == y).float().mean()
            self.log("val_acc", accuracy, add_dataloader_idx=False)


class ValidatesOnDataOfItsFitStart(Validates):
    """Makes its validation data in its own ``on_fit_start``, after the callbacks'."""

    def __init__(self, *sizes: int | None) -> None:
        super().__init__(*sizes)
        self.made = self.val_data
        del self.val_data

    def on_fit_start(self) -> None:
        self.val_data = self.made


class ValidationData(pl.LightningDataModule):  # type: ignore[misc]
    """Lightning's DataModule example: both DataLoaders at its ``batch_size``."""

    def __init__(self) -> None:
        super().__init__()
        self.batch_size = 4
        self.train_data, self.val_data = make_data(512, 0), make_data(256, 1)

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.train_data, batch_size=self.batch_size)

    def val_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.val_data, batch_size=self.batch_size)


@pytest.mark.parametrize(
    ("model", "samples", "said"),
    [
        (lambda: Validates(None), 32, False),  # as at the reference: 2 batches of 16
        (lambda: (Validates(64), ValidationData()), 32, False),  # the DataModule's DataLoaders
        (lambda: Validates(64), 128, False),  # 2 batches of its own size
        (lambda: Validates(32), 64, False),  # of its own size, which is the run's by chance
        (lambda: Validates(None, 64), 64 + 128, True),  # one limit for both: left, and said
        (lambda: ValidatesOnDataOfItsFitStart(None), 64, True),  # not built early: said
    ],
    ids=["follows", "datamodule", "own", "own-as-the-runs", "both", "built-late"],
)
def test_a_number_of_validation_batches_holds_the_references_samples_at_every_size(
    server: ServerProcess,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    model: Callable[[], Validates | tuple[Validates, ValidationData]],
    samples: int,
    said: bool,
) -> None:
    """``limit_val_batches=2``, tuned at the reference batch size 16, of a validation
    DataLoader that takes the training batch size validates 32 samples there: a fit at 32
    validates 1 batch, the same samples (it validated 64 before), where a DataLoader of a size
    of its own, the run's size or another, keeps its 2 batches. Where one limit serves both
    kinds, or the DataLoaders cannot be built before the fit's own validation, it is left as it
    is and the first validation says so, once."""
    spec = job(unique_id("litvalpart"), target=0.999, max_epochs=2)
    callback = callback_for(server.url, spec, reference_batch_size=16, memory_check_steps=0)
    trainer = pl.Trainer(
        callbacks=[callback], max_epochs=2, limit_val_batches=2, **quiet_trainer_options(tmp_path)
    )
    made = model()
    fitted, data = made if isinstance(made, tuple) else (made, None)
    with caplog.at_level(logging.INFO, logger="zeus_bso"):
        trainer.fit(fitted, datamodule=data)
    assert callback.batch_size == 32
    assert fitted.validated[-2:] == [samples, samples]  # after the sanity check's
    warning = (
        "Trainer(limit_val_batches=2) validates 2 batches of a validation DataLoader whose batch "
        "size is the run's (32): where it takes the training batch size (batch_size=self."
        "batch_size), each batch size is judged on other validation samples (64 here, 32 at the "
        "reference batch size 16)"
    )
    assert caplog.text.count(warning) == said  # once a fit
    kept = "limit_val_batches=2 (the validation's batches at the reference batch size 16)"
    follows = fitted.sizes == (None,) or data is not None
    assert (kept in caplog.text) is (follows and not said)


class ValidatesBesideAGivenLoader(Validates):
    """Holds no batch size (its train DataLoader is given to the fit) and counts the
    validation DataLoaders it builds."""

    def __init__(self) -> None:
        super().__init__(64)
        del self.batch_size
        self.built = 0

    def val_dataloader(self) -> Any:
        self.built += 1
        return super().val_dataloader()


def test_a_fit_given_its_train_dataloader_builds_its_validation_once(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Where only the train DataLoader given to the fit takes the batch size, nothing the
    validation's could take it from changes with it: they keep ``limit_val_batches`` and are
    built once, by the fit (a script's ``val_dataloader()`` may read its data from disk)."""
    spec = job(unique_id("litvalgiven"), target=0.999, max_epochs=1)
    callback = callback_for(server.url, spec, reference_batch_size=16, memory_check_steps=0)
    trainer = pl.Trainer(
        callbacks=[callback], max_epochs=1, limit_val_batches=2, **quiet_trainer_options(tmp_path)
    )
    model = ValidatesBesideAGivenLoader()
    train = torch.utils.data.DataLoader(model.train_data, batch_size=16)
    trainer.fit(model, train_dataloaders=train)
    assert callback.batch_size == 32
    assert model.built == 1
    assert model.validated[-1] == 128  # 2 batches of its own 64


def test_a_trainer_limit_below_the_jobs_is_said_and_not_charged(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = job(unique_id("lshort"), target=0.999, max_epochs=3)
    callback = callback_for(server.url, spec)
    patient = EarlyStopping(monitor="val_acc", mode="max", patience=10)  # never stops this fit
    trainer = pl.Trainer(
        max_epochs=2, callbacks=[callback, patient], **quiet_trainer_options(tmp_path)
    )
    with caplog.at_level(logging.WARNING, logger="zeus_bso"):
        trainer.fit(TinyClassifier())
    assert "Trainer(max_epochs=2) is below the job's max_epochs (3)" in caplog.text
    outcome = callback.outcome
    assert outcome is not None
    assert (outcome.reason, outcome.converged, outcome.epochs) == ("ended_early", False, 2)
    assert "the Trainer's max_epochs (2) is below the job's (3)" in outcome.summary()
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["status"], trial["epochs"]) == ("released", 2)


def test_a_fit_bounded_by_steps_is_said_when_it_starts_and_when_it_ends(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``Trainer(max_steps=N)`` below the job's max_epochs (20 steps of 32: 1.25 of 3 epochs)
    ends the fit before the server can judge it: a fit short of the target then is released,
    and the job learns nothing of its size. Said when training starts (its epochs counted),
    with what to set instead, and in the run's end. A max_steps that covers them (48) is not
    said, and the server stops that fit."""
    spec = job(unique_id("lsteps"), target=0.999, max_epochs=3)
    callback = callback_for(server.url, spec)
    trainer = pl.Trainer(max_steps=20, callbacks=[callback], **quiet_trainer_options(tmp_path))
    with caplog.at_level(logging.WARNING, logger="zeus_bso"):
        trainer.fit(TinyClassifier())
    assert "Trainer(max_steps=20) ends the fit after 1.25 epochs" in caplog.text
    assert "(max_epochs=3, max_steps=-1: the server stops the fit)" in caplog.text
    outcome = callback.outcome
    assert outcome is not None
    assert (outcome.reason, outcome.converged) == ("ended_early", False)
    assert "the Trainer's max_steps (20) ended it before the server's stop" in outcome.summary()
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["status"] == "released"
    caplog.clear()
    spec = job(unique_id("lstepsenough"), target=0.999, max_epochs=3)
    callback = callback_for(server.url, spec)
    trainer = pl.Trainer(max_steps=48, callbacks=[callback], **quiet_trainer_options(tmp_path))
    with caplog.at_level(logging.WARNING, logger="zeus_bso"):
        trainer.fit(TinyClassifier())
    assert "Trainer(max_steps=48)" not in caplog.text
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["status"], trial["epochs"]) == ("reported", 3)


def test_max_steps_with_validations_every_n_batches_is_said_only_where_it_ends_the_fit_first(
    tmp_path: Path,
) -> None:
    """Validating every N batches across epochs (``check_val_every_n_epoch=None``: a dataset
    without a length needs it, and ``max_steps``), each validation is an epoch of the job's:
    ``max_steps`` ends the fit first only below the job's max_epochs validations (in optimizer
    steps: accumulated batches count once), and only then is it said, with the steps to set."""
    from zeus_bso.integrations.lightning_limits import limit_warnings

    def trainer(max_steps: int, accumulate: int = 1) -> Any:
        return pl.Trainer(
            max_steps=max_steps,
            max_epochs=-1,
            val_check_interval=50,
            check_val_every_n_epoch=None,
            accumulate_grad_batches=accumulate,
            **quiet_trainer_options(tmp_path),
        )

    assert limit_warnings(trainer(300), job_max_epochs=6) == []  # 6 validations of 50 batches
    (short,) = limit_warnings(trainer(299), job_max_epochs=6)
    assert short.startswith("Trainer(max_steps=299) ends the fit before the job's max_epochs (6)")
    assert "set max_steps to at least 300" in short
    assert limit_warnings(trainer(150, accumulate=2), job_max_epochs=6) == []
    assert "at least 150" in limit_warnings(trainer(149, accumulate=2), job_max_epochs=6)[0]


def test_validations_every_few_epochs_are_said_where_they_miss_the_jobs_max_epochs(
    tmp_path: Path,
) -> None:
    """A fit that validates every N epochs is judged at those epochs only: the server stops a
    run short of the target at the first validation at or past the job's max_epochs. A Trainer
    whose max_epochs ends the fit before it ends a run the server never judged (released, the
    next run gets its size again); one that goes on trains past the job's max_epochs. Each is
    said when the fit starts, with the Trainer's max_epochs to set."""
    from zeus_bso.integrations.lightning_limits import limit_warnings

    def said(every: int, max_epochs: int, job_max_epochs: int) -> list[str]:
        trainer = pl.Trainer(
            max_epochs=max_epochs,
            check_val_every_n_epoch=every,
            **quiet_trainer_options(tmp_path),
        )
        return limit_warnings(trainer, job_max_epochs=job_max_epochs)

    (cut,) = said(4, 6, 6)
    assert cut.startswith("Trainer(check_val_every_n_epoch=4) validates at epochs 4, 8, ...")
    assert "has not reached the target by epoch 4 ends before the server can judge it" in cut
    assert "give the Trainer max_epochs=8" in cut
    (below,) = said(4, 5, 6)  # below the job's own max_epochs: said as such, with 8 to set
    assert below.startswith("Trainer(max_epochs=5) is below the job's max_epochs (6)")
    assert "give the Trainer max_epochs=8" in below
    (past,) = said(4, 100, 6)
    assert "by epoch 6 trains to epoch 8, the validation after it" in past
    assert said(4, 8, 8) == said(2, 6, 6) == said(1, 6, 6) == []


def test_a_minimum_of_epochs_or_steps_that_outlasts_the_servers_stop_is_said(
    tmp_path: Path,
) -> None:
    """Lightning defers a stop until ``min_epochs`` or ``min_steps`` is met: the fit trains on
    past the server's stop, uncounted. Said when the fit starts; ``min_epochs=1`` is not."""
    from zeus_bso.integrations.lightning_limits import limit_warnings

    def said(**limits: int) -> list[str]:
        trainer = pl.Trainer(max_epochs=6, **limits, **quiet_trainer_options(tmp_path))
        return limit_warnings(trainer, job_max_epochs=6)

    (kept,) = said(min_epochs=4)
    assert kept.startswith("Trainer(min_epochs=4) keeps the fit training after the server stops")
    (both,) = said(min_epochs=3, min_steps=100)
    assert both.startswith("Trainer(min_epochs=3, min_steps=100) keeps the fit training")
    assert said(min_epochs=1) == said() == []


def test_a_fit_ended_between_validations_says_which_validation_the_server_needed(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Validating every other epoch, a Trainer with the job's max_epochs (3) ends the fit after
    epoch 3, before the validation of epoch 4, where the server would have stopped it: the run
    is released, and its end says so, where it said "a limit of the Trainer's, or a
    callback"."""
    spec = job(unique_id("levery"), target=0.999, max_epochs=3)
    callback = callback_for(server.url, spec)
    trainer = pl.Trainer(
        max_epochs=3,
        check_val_every_n_epoch=2,
        callbacks=[callback],
        **quiet_trainer_options(tmp_path),
    )
    trainer.fit(TinyClassifier())
    outcome = callback.outcome
    assert outcome is not None
    assert (outcome.reason, outcome.converged, outcome.epochs) == ("ended_early", False, 2)
    assert (
        "the Trainer's max_epochs (3) ended it before its validation of epoch 4 "
        "(check_val_every_n_epoch=2), where the server stops it"
    ) in outcome.summary()
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["status"] == "released"


def test_overfit_batches_runs_without_the_optimizer_and_a_part_of_each_epoch_is_said(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``overfit_batches`` is a debugging mode, as ``fast_dev_run`` is: its fit was a trial
    whose epochs of a few batches the server charged, so the size looked far cheaper than it
    is. ``limit_train_batches`` below the whole data is said when the fit starts: every run of
    the job must train the same part."""
    from zeus_bso.integrations.lightning_limits import limit_warnings

    spec = job(unique_id("loverfit"), target=0.999, max_epochs=2)
    with caplog.at_level(logging.WARNING, logger="zeus_bso"):
        fit(server.url, spec, tmp_path, overfit_batches=2)
    assert "overfit_batches=2: this fit runs without the batch size optimizer" in caplog.text
    with ServerClient(server.url) as client:
        assert not client.list_jobs(prefix=spec.job_id)
    for part in (0.25, 10):
        trainer = pl.Trainer(limit_train_batches=part, **quiet_trainer_options(tmp_path))
        (said,) = limit_warnings(trainer, job_max_epochs=2)
        assert f"Trainer(limit_train_batches={part}): each epoch trains part" in said
    assert limit_warnings(pl.Trainer(**quiet_trainer_options(tmp_path)), job_max_epochs=2) == []


class SlowSteps(TinyClassifier):
    """A tenth of a second a training step."""

    def training_step(self, batch: Any, index: int) -> Any:
        time.sleep(0.1)
        return super().training_step(batch, index)


def test_a_fit_ended_by_max_time_says_so_and_how_to_go_on(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``Trainer(max_time=...)`` (a cluster's time limit) ends the fit first: the run's end
    names it, and that a fit from its checkpoint continues the trial (a released trial goes on
    when resumed), instead of "a limit of the Trainer's, or a callback"."""
    spec = job(unique_id("ltime"), target=0.999, max_epochs=3)
    callback = callback_for(server.url, spec)
    trainer = pl.Trainer(
        max_epochs=3,
        max_time={"seconds": 1},
        callbacks=[callback],
        **quiet_trainer_options(tmp_path),
    )
    trainer.fit(SlowSteps(batch_size=64))
    outcome = callback.outcome
    assert outcome is not None
    assert (outcome.reason, outcome.converged) == ("ended_early", False)
    assert "the Trainer's max_time (0:00:01) ended it before the server's stop" in (
        outcome.summary()
    )
    assert "ckpt_path=..., to continue the trial" in outcome.summary()


def test_a_fit_early_stopping_ends_counts_as_not_converging_at_its_batch_size(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Lightning's EarlyStopping ended the fit below the job's target: the run did not converge
    at its batch size, which counts at once (its last report goes again as final), charged as
    if it had trained the job's max_epochs: the next run explores another size. Released, every
    recurrence would run the same size again; failed, three such runs would be needed. The
    Trainer's own limits are not the batch size's (above)."""
    spec = job(unique_id("lstopping"), target=0.999, max_epochs=6)
    stopping = EarlyStopping(monitor="val_acc", mode="max", patience=0, min_delta=1.0)
    _, callback = fit(server.url, spec, tmp_path, callbacks=[stopping])
    stopper = "EarlyStopping(monitor='val_acc') ended the fit"
    check_stopped_itself(server.url, spec, callback.outcome, stopper)
    _, second = fit(server.url, spec, tmp_path, max_epochs=1)
    assert second.batch_size != callback.batch_size


class InterruptedClassifier(TinyClassifier):
    """Interrupted in its second epoch, as Ctrl-C or a SIGTERM would (Lightning raises its
    ``SIGTERMException`` from the loop when the signal came)."""

    def __init__(self, interruption: type[BaseException]) -> None:
        super().__init__()
        self.interruption = interruption

    def training_step(self, batch: Any, index: int) -> Any:
        if self.current_epoch == 1 and index == 2:
            raise self.interruption()
        return super().training_step(batch, index)


@pytest.mark.parametrize("interruption", ["KeyboardInterrupt", "SIGTERMException"])
def test_an_interrupted_fit_is_not_charged_to_its_batch_size(
    server: ServerProcess, tmp_path: Path, interruption: str
) -> None:
    """Ctrl-C or a preemption's SIGTERM says nothing about the batch size: the trial is
    released (it counted as a failed run, three of which drop a size while pruning)."""
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    error = KeyboardInterrupt if interruption == "KeyboardInterrupt" else SIGTERMException
    spec = job(unique_id("lint"), target=0.999)
    callback = callback_for(server.url, spec)
    trainer = pl.Trainer(
        max_epochs=spec.max_epochs, callbacks=[callback], **quiet_trainer_options(tmp_path)
    )
    sigint = signal.getsignal(signal.SIGINT)
    try:  # on Ctrl-C Lightning ignores SIGINT from then on, and exits with status 1
        with pytest.raises(SystemExit):
            trainer.fit(InterruptedClassifier(error))
    finally:
        signal.signal(signal.SIGINT, sigint)
    outcome = callback.outcome
    assert outcome is not None
    assert (outcome.reason, outcome.epochs) == ("ended_early", 1)
    assert f"interrupted ({interruption}); not counted against it" in outcome.summary()
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["status"], trial["epochs"]) == ("released", 1)


def test_an_unconverged_fit_says_so_and_raises_when_asked(
    server: ServerProcess, tmp_path: Path
) -> None:
    """raise_if_unconverged keeps upstream's failure signal; its message is the run's line (on
    the console through Lightning's rank_zero_info: the examples' test reads it there)."""
    spec = job(unique_id("lfail"), target=0.999, max_epochs=2)
    callback = callback_for(server.url, spec, raise_if_unconverged=True)
    trainer = pl.Trainer(max_epochs=2, callbacks=[callback], **quiet_trainer_options(tmp_path))
    with pytest.raises(ZeusBSOTrainFailError, match="did not reach the target") as raised:
        trainer.fit(TinyClassifier())
    assert raised.value.outcome is callback.outcome
    assert callback.outcome is not None
    assert callback.outcome.reason == "max_epochs"
    shown = str(raised.value)
    assert (
        "zeus-bso: batch size 32 stopped at epoch 2 of 2: it trained the job's max_epochs (2)"
        in (shown)
    )
    assert "no run of the job has reached target_metric 0.999 yet" in shown
    assert "the model did not reach the target" in shown
    assert shown.endswith("Next run: 64 (pruning round 1 explores it). Run it again for a model.")


def test_a_recurrence_retries_until_a_run_converges(server: ServerProcess, tmp_path: Path) -> None:
    """until_converged runs the recurrence again, in this process, at the next batch size the
    server gives, until a run delivers a model."""
    spec = job(unique_id("lretry"), target=0.8, max_epochs=3)
    sizes: list[int] = []

    def recurrence() -> RunOutcome | None:
        callback = callback_for(server.url, spec)
        trainer = pl.Trainer(
            max_epochs=3, callbacks=[callback], **quiet_trainer_options(tmp_path / str(len(sizes)))
        )
        pl.seed_everything(len(sizes), verbose=False)  # not what earlier tests left
        model = TinyClassifier()
        # The default batch size gets too few epochs here to reach the target: a wrong LR.
        if len(sizes) == 0:
            model.configure_optimizers = lambda: torch.optim.SGD(model.parameters(), lr=0.0)
        trainer.fit(model)
        assert callback.batch_size is not None
        sizes.append(callback.batch_size)
        return callback.outcome

    outcome = until_converged(recurrence, attempts=3)
    assert outcome is not None
    assert outcome.converged
    assert len(sizes) == 2
    assert sizes[0] == spec.default_batch_size != sizes[1]


def test_without_a_server_the_fit_trains_at_the_default(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    spec = job(unique_id("lnoserver"), target=0.8, max_epochs=4)
    url = f"http://127.0.0.1:{free_port()}"
    callback = ZeusBSOCallback(url, spec, monitor="val_acc", energy_meter=EstimateMeter(100))
    pl.seed_everything(0, verbose=False)  # it must converge: not what earlier tests left
    model = TinyClassifier()
    pl.Trainer(max_epochs=4, callbacks=[callback], **quiet_trainer_options(tmp_path)).fit(model)
    assert model.batch_size == spec.default_batch_size
    assert callback.trial_number is None
    assert callback.outcome is not None
    assert (callback.outcome.offline, callback.outcome.converged) == (True, True)
    strict = callback_for(url, spec, on_server_unavailable="raise")
    trainer = pl.Trainer(max_epochs=1, callbacks=[strict], **quiet_trainer_options(tmp_path))
    with pytest.raises(Exception, match="cannot reach"):
        trainer.fit(TinyClassifier())


class NeverValidates(pl.LightningModule):
    """TinyClassifier without a validation_step."""

    def __init__(self) -> None:
        super().__init__()
        self.batch_size = 4
        self.layer = torch.nn.Linear(8, 2)

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(make_data(64, 0), batch_size=self.batch_size)

    def training_step(self, batch: Any, _: int) -> Any:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def test_fast_dev_run_leaves_the_server_alone_and_a_fit_that_never_validates_is_refused(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = job(unique_id("lnoval"))
    for attempt in range(3):  # fast_dev_run debugging fits: no server contact at all
        callback = callback_for(server.url, spec)
        options = quiet_trainer_options(tmp_path / str(attempt))
        trainer = pl.Trainer(callbacks=[callback], fast_dev_run=True, **options)
        with caplog.at_level(logging.WARNING, logger="zeus_bso"):
            trainer.fit(TinyClassifier())
        assert callback.batch_size is None
    assert "fast_dev_run: this fit runs without the batch size optimizer" in caplog.text
    with ServerClient(server.url) as client:
        assert client.list_jobs(prefix=spec.job_id_prefix) == []
    # Known before a trial is dispatched: refused, and nothing is asked of the server.
    never = "this fit never validates"
    for module, options, said in (
        (TinyClassifier(), {"limit_val_batches": 0}, never),
        (NeverValidates(), {}, never),
        (TinyClassifier(), {"check_val_every_n_epoch": spec.max_epochs + 1}, never),
        (TinyClassifier(), {"barebones": True}, r"Trainer\(barebones=True\) turns self.log off"),
    ):
        trainer = pl.Trainer(
            callbacks=[callback_for(server.url, spec)],
            max_epochs=spec.max_epochs,
            **quiet_trainer_options(tmp_path / "refused"),
            **options,
        )
        with pytest.raises(ConfigurationError, match=said):
            trainer.fit(module)
    with ServerClient(server.url) as client:
        assert client.list_jobs(prefix=spec.job_id_prefix) == []


class ScheduledClassifier(TinyClassifier):
    """SGD at 0.1, tuned at batch size 16, with a step schedule; records, at each epoch's first
    step, the rate the step takes and the schedule's."""

    def __init__(self) -> None:
        super().__init__()
        self.rates: list[tuple[float, float]] = []

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        schedule = torch.optim.lr_scheduler.StepLR(optimizer, step_size=100, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": schedule}

    def on_before_optimizer_step(self, optimizer: Any) -> None:
        # Called inside the optimizer's step, after its step hooks: the rate the step takes.
        if self.trainer.fit_loop.epoch_loop.batch_progress.current.ready == 1:
            (config,) = self.trainer.lr_scheduler_configs
            self.rates.append((optimizer.param_groups[0]["lr"], config.scheduler.get_last_lr()[0]))


def test_the_learning_rate_follows_the_batch_size_once_also_when_resumed(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Batch size 32 against the reference 16, linear: the steps take 0.2 of the schedule's
    0.1; a fit resumed from the checkpoint keeps 0.2, not 0.4. A LearningRateMonitor, which
    logs the schedule's 0.1, is told of the factor."""
    spec = job(unique_id("llr"), target=0.999, max_epochs=4)
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True)
    first = ScheduledClassifier()
    callback = callback_for(server.url, spec, lr_rule="linear", reference_batch_size=16)
    options = {**quiet_trainer_options(tmp_path), "enable_checkpointing": True}
    logs = tmp_path / "logs"
    monitor = pl.callbacks.LearningRateMonitor()
    trainer = pl.Trainer(
        max_epochs=2,
        callbacks=[callback, checkpoints, monitor],
        **{**options, "logger": CSVLogger(logs)},
    )
    with caplog.at_level(logging.INFO, logger="zeus_bso"):
        trainer.fit(first)
    told = [r.getMessage() for r in caplog.records if "LearningRateMonitor" in r.getMessage()]
    assert told == [
        "zeus-bso: LearningRateMonitor logs the schedule's rates; the steps take 2 times them "
        "at batch size 32 (lr_rule), logged as bso/lr at each validation"
    ]
    assert first.rates == [(0.2, 0.1), (0.2, 0.1)]
    assert [float(row["bso/lr"]) for row in logged_rows(logs, "bso/lr")] == pytest.approx(
        [0.2, 0.2]
    )
    resumed = ScheduledClassifier()
    again = callback_for(server.url, spec, lr_rule="linear", reference_batch_size=16)
    trainer = pl.Trainer(max_epochs=4, callbacks=[again], **quiet_trainer_options(tmp_path))
    trainer.fit(resumed, ckpt_path=str(tmp_path / "last.ckpt"))
    assert resumed.rates == [(0.2, 0.1), (0.2, 0.1)]
    assert again.trial_number == callback.trial_number  # the same trial, continued


class RunsOutOfMemoryAbove(TinyClassifier):
    """A model whose training step runs out of (CUDA) memory above ``limit`` samples, on
    every rank, or on ``rank`` alone."""

    def __init__(
        self, limit: int, rank: int | None = None, batch_size: int = 4, after: int = 0
    ) -> None:
        super().__init__(batch_size)
        self.limit, self.oom_rank, self.after, self.steps = limit, rank, after, 0

    def training_step(self, batch: Any, index: int) -> Any:
        x, _ = batch
        self.steps += 1  # the memory check's tried steps count: ``after`` runs out mid-run
        ranks = (None, self.global_rank)
        if len(x) > self.limit and self.oom_rank in ranks and self.steps > self.after:
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {len(x)} MiB (a test's limit)"
            )
        self.log("train_loss_seen", 1.0)  # dropped while sizes are tried; kept in the fit
        return super().training_step(batch, index)


def warm_up(optimizer: Any, num_warmup_steps: int) -> Any:
    """A warm-up over ``num_warmup_steps`` steps (transformers' schedules' keyword)."""
    schedule = torch.optim.lr_scheduler.LinearLR(optimizer, 0.1, 1.0, num_warmup_steps)
    schedule.num_warmup_steps = num_warmup_steps
    return schedule


class WarmsUpInSteps(RunsOutOfMemoryAbove):
    """Warms up over fixed steps: its hparams' ``warmup_steps``, as Lightning's tutorials write
    it (``hparam``); a scheduler hparam, as the Lightning-Hydra template's ``_partial_: true``
    makes it (``partial``); or a mapping of the schedule's keywords (``mapping``). Notes the
    steps each ``configure_optimizers`` saw."""

    def __init__(self, limit: int, warmup_steps: int, place: str = "hparam") -> None:
        super().__init__(limit)
        held: dict[str, Any] = {
            "hparam": {"warmup_steps": warmup_steps},
            "partial": {"scheduler": functools.partial(warm_up, num_warmup_steps=warmup_steps)},
            "mapping": {"scheduler": {"num_warmup_steps": warmup_steps}},
        }
        self.save_hyperparameters(held[place])
        self.place = place
        self.warmups: list[int] = []

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
        if self.place == "hparam":
            warmup = warm_up(optimizer, self.hparams.warmup_steps)
        elif self.place == "partial":
            warmup = self.hparams.scheduler(optimizer=optimizer)
        else:
            warmup = warm_up(optimizer, **self.hparams.scheduler)
        self.warmups.append(warmup.num_warmup_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": warmup, "interval": "step"}}


@pytest.mark.parametrize(
    ("place", "rule", "seen"),
    [
        ("hparam", "linear", [4, 8]),
        ("hparam", "none", [8, 8]),
        ("partial", "linear", [4, 8]),
        ("mapping", "linear", [4, 8]),
    ],
)
def test_a_warm_up_of_fixed_steps_keeps_its_samples_where_the_memory_check_moves_the_fit(
    server: ServerProcess,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    place: str,
    rule: str,
    seen: list[int],
) -> None:
    """``warmup_steps=8`` tuned at 16 warms up over 4 steps at 32, the same samples, and over
    8 again where the memory check moves the fit to 16 (from what the script wrote, not what
    the callback set); with ``lr_rule="none"`` the warm-up is the script's. So too a scheduler
    hparam's ``num_warmup_steps`` (a partial, or a mapping of its keywords)."""
    spec = oom_job(unique_id("litwarm"))
    callback = callback_for(server.url, spec, reference_batch_size=16, lr_rule=rule)
    model = WarmsUpInSteps(limit=16, warmup_steps=8, place=place)
    trainer = pl.Trainer(callbacks=[callback], max_epochs=1, **quiet_trainer_options(tmp_path))
    with caplog.at_level(logging.INFO, logger="zeus_bso"):
        trainer.fit(model)
    assert callback.batch_size == 16
    assert model.warmups == seen
    name = "warmup_steps" if place == "hparam" else "hparams.scheduler's num_warmup_steps"
    said = f"{name}=8 (the warm-up's steps at the reference batch size 16): at batch size 32"
    assert (said in caplog.text) is (rule == "linear")


def oom_job(job_id: str) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        job_id_prefix=job_id.split("-")[0],
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=0.85,
        max_epochs=4,
        mab_seed=1,
        learning_curve_stop=False,
    )


def test_out_of_memory_is_infeasible_and_the_fit_goes_on_at_a_size_that_fits(
    server: ServerProcess, tmp_path: Path
) -> None:
    spec = oom_job(unique_id("litoom"))
    sizes = []
    for recurrence in range(3):
        pl.seed_everything(0, verbose=False)
        model = RunsOutOfMemoryAbove(limit=16)
        before = [p.detach().clone() for p in model.parameters()]
        callback = ZeusBSOCallback(
            server.url, spec, monitor="val_acc", energy_meter=EstimateMeter(100)
        )
        trainer = pl.Trainer(
            callbacks=[callback], max_epochs=spec.max_epochs, **quiet_trainer_options(tmp_path)
        )
        if recurrence == 0:
            # What the steps tried change is undone before the fit trains.
            callback_start = callback.on_fit_start

            def checked(
                trainer: Any, module: Any, start: Any = callback_start, was_: Any = before
            ) -> None:
                start(trainer, module)
                for was, now in zip(was_, module.parameters(), strict=True):
                    assert torch.equal(was, now.detach())

            callback.on_fit_start = checked  # type: ignore[method-assign]
        trainer.fit(model)  # the same fit() call finishes, at a size that fits
        sizes.append(callback.batch_size)
        assert max(model.seen_batch_sizes) <= 16
        assert callback.outcome is not None
        assert callback.outcome.reason is not None
        assert "train_loss_seen" in trainer.callback_metrics
    assert sizes == [16, 16, 16]
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    trials = sorted(state["trials"], key=lambda t: t["trial_number"])
    assert [(t["batch_size"], t["status"]) for t in trials[:2]] == [
        (32, "infeasible"),
        (16, "reported"),
    ]
    # Never dispatched again on this profile: 32, or 64 above it.
    assert all(t["batch_size"] == 16 for t in trials[1:])
    assert list(state["memory_caps"].values()) == [32]


def padded(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Texts of token ids padded (with 0) to the batch's longest, as ``DataCollatorWithPadding``
    pads them; raw texts (``text``: digits) tokenized first, as a collator that calls the
    tokenizer on the batch does."""
    if "text" in rows[0]:
        rows = [
            {"input_ids": torch.tensor([int(d) for d in row["text"]]), "label": row["label"]}
            for row in rows
        ]
    ids = torch.zeros(len(rows), max(len(row["input_ids"]) for row in rows), dtype=torch.long)
    for number, row in enumerate(rows):
        ids[number, : len(row["input_ids"])] = row["input_ids"]
    return {"input_ids": ids, "label": torch.stack([torch.as_tensor(r["label"]) for r in rows])}


class PadsTexts(pl.LightningModule):
    """Texts of token ids from a ``datasets.Dataset`` (torch format; ``data="torch"``: a list of
    samples, each a dict of tensors, as a torch dataset gives them; ``"texts"``: a
    ``datasets.Dataset`` of raw texts, which the collator tokenizes), padded per batch: 127 of
    4 tokens and one of 12. A training batch of more than ``tokens`` token ids, padding
    included, runs out of (CUDA) memory: at 32 a batch that holds the long text does, wherever
    in the epoch it comes, and at 16 none."""

    def __init__(self, tokens: int, *, data: str = "datasets") -> None:
        super().__init__()
        self.tokens, self.batch_size = tokens, 32
        self.trained: list[int] = []  # the texts of each training step taken, tried or not
        draw = torch.Generator().manual_seed(0)
        ids = [torch.randint(1, 10, (n,), generator=draw).tolist() for n in [4] * 127 + [12]]
        rows = {"input_ids": ids, "label": [int(row[0] > 5) for row in ids]}
        self.texts: Any = [
            {"input_ids": torch.tensor(row), "label": torch.tensor(label)}
            for row, label in zip(ids, rows["label"], strict=True)
        ]
        if data != "torch":
            datasets = pytest.importorskip("datasets", reason="pip install datasets")
            if data == "texts":
                rows = {"text": ["".join(map(str, row)) for row in ids], "label": rows["label"]}
            self.texts = datasets.Dataset.from_dict(rows).with_format("torch")
        self.embed = torch.nn.EmbeddingBag(10, 8, padding_idx=0)
        self.head = torch.nn.Linear(8, 2)

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(
            self.texts, batch_size=self.batch_size, shuffle=True, collate_fn=padded
        )

    def val_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.texts, batch_size=64, collate_fn=padded)

    def forward(self, ids: Any) -> Any:
        return self.head(self.embed(ids))

    def training_step(self, batch: Any, index: int) -> Any:
        ids = batch["input_ids"]
        if ids.numel() > self.tokens:
            raise torch.cuda.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {ids.numel()} MiB"
            )
        self.trained.append(len(ids))
        return torch.nn.functional.cross_entropy(self(ids), batch["label"])

    def validation_step(self, batch: Any, index: int) -> None:
        right = self(batch["input_ids"]).argmax(-1) == batch["label"]
        self.log("val_acc", right.float().mean())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class PadsTextsOfTwoLoaders(PadsTexts):
    """`PadsTexts` whose ``train_dataloader()`` returns two DataLoaders, as a multi-task module
    does: its texts, and texts all of 4 tokens (whose lengths say nothing); each step takes a
    batch of both, and the texts' batch runs out of memory as `PadsTexts`' does. With
    ``combined``, in a ``CombinedLoader`` of its own (``max_size_cycle``)."""

    def __init__(self, tokens: int, *, combined: bool = False) -> None:
        super().__init__(tokens, data="torch")
        self.combined = combined

    def train_dataloader(self) -> Any:
        short = [{**row, "input_ids": row["input_ids"][:4]} for row in list(self.texts)]
        loaders = {
            "texts": super().train_dataloader(),
            "short": torch.utils.data.DataLoader(
                short, batch_size=self.batch_size, shuffle=True, collate_fn=padded
            ),
        }
        if self.combined:
            from lightning.pytorch.utilities import CombinedLoader

            return CombinedLoader(loaders, "max_size_cycle")
        return loaders

    def training_step(self, batch: Any, index: int) -> Any:
        assert len(batch["short"]["input_ids"]) == len(batch["texts"]["input_ids"])
        return super().training_step(batch["texts"], index)


@pytest.mark.parametrize("data", ["datasets", "torch", "texts", "two loaders", "combined"])
def test_the_memory_check_tries_the_longest_texts_before_the_fit_trains(
    data: str, server: ServerProcess, tmp_path: Path
) -> None:
    """Texts of many lengths: batches of 32 fit while their texts are short, and run out of
    memory where the long one pads them, at whichever step of an epoch it comes. The memory
    check tries the 32 longest texts, so 32 runs out there and the same fit trains at 16, which
    fits every batch. Before, the check tried the first batches drawn, all short here: it
    passed, and the fit ran out of memory mid-epoch at 32, its training lost. So for a
    ``datasets.Dataset``, for a torch dataset, whose samples are read for their lengths, and
    for raw texts that the collator tokenizes, whose lengths stand in for their tokens', and
    where ``train_dataloader()`` returns them beside another DataLoader (a dict of them, or a
    ``CombinedLoader`` of its own)."""
    spec = oom_job(unique_id("littexts"))
    pl.seed_everything(0, verbose=False)
    if data in ("two loaders", "combined"):
        model: PadsTexts = PadsTextsOfTwoLoaders(tokens=200, combined=data == "combined")
    else:
        model = PadsTexts(tokens=200, data=data)  # 32 x 4, 16 x 12 fit; 32 x 12 not
    callback = ZeusBSOCallback(server.url, spec, monitor="val_acc", energy_meter=EstimateMeter(100))
    trainer = pl.Trainer(
        callbacks=[callback], max_epochs=spec.max_epochs, **quiet_trainer_options(tmp_path)
    )
    trainer.fit(model)
    assert callback.batch_size == 16
    assert set(model.trained) == {16}  # no step of 32, tried or trained
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    trials = sorted(state["trials"], key=lambda t: t["trial_number"])
    assert [(t["batch_size"], t["status"]) for t in trials] == [
        (32, "infeasible"),
        (16, "reported"),
    ]
    assert list(state["memory_caps"].values()) == [32]


class KeepsItsLoader(RunsOutOfMemoryAbove):
    """Builds its train DataLoader from ``self.batch_size`` at the first call of
    ``train_dataloader()`` and returns that one at every later call (a cache)."""

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self.kept: Any = None

    def train_dataloader(self) -> Any:
        if self.kept is None:
            self.kept = super().train_dataloader()
        return self.kept


def test_a_train_dataloader_kept_from_an_earlier_size_is_named_so(
    server: ServerProcess, tmp_path: Path
) -> None:
    """32 runs out of memory in the memory check, which asks ``train_dataloader()`` again for
    the sizes it tries next: the DataLoader kept from 32 is named as such, not as one that
    ignores the attribute (which it reads), and the run is released, its size not charged."""
    spec = oom_job(unique_id("litkept"))
    words = "first training batch has 32 samples, but this run's batch size is 16"
    message = refused_fit(server.url, spec, tmp_path, words, KeepsItsLoader(limit=16))
    assert "train_dataloader() returned the DataLoader it built at 32" in message
    assert "build a new DataLoader at each call of train_dataloader()" in message
    assert "not a fixed size" not in message
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    assert [(t["batch_size"], t["status"]) for t in state["trials"]] == [(32, "released")]


def test_a_module_sharded_by_fsdp_is_not_tried_in_memory_first(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The memory check's steps run the module by hand, outside the strategy: with FSDP each
    process holds only its shard of the parameters between steps (a step by hand finds a
    shard), or gathers them in collectives that one process cannot take alone. A module that
    FSDP shards (``fully_shard`` in ``configure_model``, in a process group of one here; under
    Lightning's FSDP, DeepSpeed and ModelParallel strategies alike, by class) is not tried,
    and the fit says so; every training step is the fit's."""
    from torch.distributed.fsdp import fully_shard

    class Sharded(TinyClassifier):
        def configure_model(self) -> None:
            fully_shard(self.layer)

    spec = job(unique_id("litsharded"), max_epochs=1)
    model = Sharded()
    callback = ZeusBSOCallback(server.url, spec, monitor="val_acc", energy_meter=EstimateMeter(100))
    trainer = pl.Trainer(callbacks=[callback], max_epochs=1, **quiet_trainer_options(tmp_path))
    with caplog.at_level(logging.INFO), process_group_of_one():
        trainer.fit(model)
    assert len(model.seen_batch_sizes) == trainer.global_step > 0  # no step tried before
    assert set(model.seen_batch_sizes) == {callback.batch_size}
    said = f"batch size {callback.batch_size} is new to these GPUs, but its steps are not tried"
    assert said in caplog.text
    assert "FSDP shards the model" in caplog.text


def test_out_of_memory_while_training_ends_the_fit_as_infeasible(
    server: ServerProcess, tmp_path: Path
) -> None:
    """With no steps tried first, the error comes in the fit: it ends, and the trial is
    ``infeasible`` (not failed); the next fit gets a smaller size."""
    spec = oom_job(unique_id("litoomlate"))
    model = RunsOutOfMemoryAbove(limit=16)
    callback = ZeusBSOCallback(
        server.url, spec, monitor="val_acc", energy_meter=EstimateMeter(100), memory_check_steps=0
    )
    trainer = pl.Trainer(callbacks=[callback], max_epochs=4, **quiet_trainer_options(tmp_path))
    with pytest.raises(torch.cuda.OutOfMemoryError):
        trainer.fit(model)
    assert callback.outcome is not None
    assert callback.outcome.reason == "out_of_memory"
    assert "ran out of memory" in callback.outcome.summary()
    _, callback = fit(server.url, spec, tmp_path)
    assert callback.batch_size == 16
    with ServerClient(server.url) as client:
        statuses = [t["status"] for t in client.job_state(spec.job_id or "")["trials"]]
    assert sorted(statuses) == ["infeasible", "reported"]


def test_out_of_memory_whatever_the_batch_size_is_the_scripts_not_a_batch_sizes(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A training step that runs out of memory at any size (a bug that allocates regardless of
    the batch): the memory check tries the smallest size too, which runs out as well, so the
    fit ends with an error that says so, its trial released and no memory cap set; after the
    bug is fixed, the next fit trains the default. And a size that trained on these GPUs
    before, running out while it trains, is not made infeasible either; but its fit is in
    doubt, and the next fit's memory check tries it first, and caps it when it runs out."""
    spec = oom_job(unique_id("litoombug"))

    def fit_raises(limit: int, error: type[BaseException], match: str | None) -> ZeusBSOCallback:
        callback = ZeusBSOCallback(
            server.url, spec, monitor="val_acc", energy_meter=EstimateMeter(100)
        )
        trainer = pl.Trainer(callbacks=[callback], max_epochs=4, **quiet_trainer_options(tmp_path))
        with pytest.raises(error, match=match):
            trainer.fit(RunsOutOfMemoryAbove(limit=limit))
        return callback

    fit_raises(0, OutOfMemoryNotTheBatchSizeError, "out of memory even at 16 samples")
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    assert [(t["batch_size"], t["status"]) for t in state["trials"]] == [(32, "released")]
    assert state["memory_caps"] == {}
    _, fixed = fit(server.url, spec, tmp_path)
    assert fixed.batch_size == 32  # the default again: nothing was charged
    # 32 trained here: running out at it now is not its doing either.
    with ServerClient(server.url) as client:
        client.pin(spec.job_id or "", 32)
    callback = fit_raises(16, torch.cuda.OutOfMemoryError, None)
    assert callback.outcome is not None
    assert "although it trained on" in callback.outcome.why
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    newest = max(state["trials"], key=lambda t: t["trial_number"])
    assert newest["status"] == "released"
    assert state["memory_caps"] == {}
    # But its fit is in doubt (the model may need more memory now): the next fit tries 32 in the
    # memory check, before it trains; it runs out there too while 16 fits, so 32 is capped.
    assert list(state["memory_doubts"].values()) == [32]
    fit_raises(16, ZeusBSOError, "pinned to batch size 32, which does not fit")
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    newest = max(state["trials"], key=lambda t: t["trial_number"])
    assert (newest["batch_size"], newest["status"], newest["epochs"]) == (32, "infeasible", None)
    assert list(state["memory_caps"].values()) == [32]
    assert state["memory_doubts"] == {}


def two_forked_ranks(server: ServerProcess, spec: JobSpec, tmp_path: Path) -> Any:
    """A Trainer of two ranks forked from this process (sparing each the imports a spawned one
    makes; `test_ddp_on_two_cpu_processes` spawns them), for two epochs, with the callback."""
    callback = ZeusBSOCallback(server.url, spec, monitor="val_acc", energy_meter=EstimateMeter(100))
    return pl.Trainer(
        callbacks=[callback],
        max_epochs=2,
        devices=2,
        strategy="ddp_fork",
        **quiet_trainer_options(tmp_path),
    )


def test_out_of_memory_on_one_rank_of_two_moves_both(server: ServerProcess, tmp_path: Path) -> None:
    """Rank 1 alone runs out of memory while sizes are tried: neither rank hangs, both go on at
    the next size together, and the trial is marked once."""
    spec = oom_job(unique_id("ddpoom"))
    pl.seed_everything(0, verbose=False)
    model = RunsOutOfMemoryAbove(limit=16, rank=1)
    trainer = two_forked_ranks(server, spec, tmp_path)
    trainer.fit(model)
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    trials = sorted(state["trials"], key=lambda t: t["trial_number"])
    assert [(t["batch_size"], t["status"]) for t in trials] == [
        (32, "infeasible"),
        (16, "released"),  # the Trainer's max_epochs (2) ended it before the server's stop
    ]


@pytest.mark.parametrize("rank", [1, None])
def test_out_of_memory_on_one_rank_while_it_trains_marks_the_size_infeasible(
    server: ServerProcess, tmp_path: Path, rank: int | None, capfd: pytest.CaptureFixture[str]
) -> None:
    """Past the memory check, rank 1 alone runs out of memory: rank 0, which talks to the
    server, knows nothing of it (it waits for rank 1 in the gradients' collective: gloo fails
    it at once, NCCL waits until the process group's timeout, then aborts the process). Rank 1
    marks the trial infeasible itself, so the next run gets a size that fits. Where every rank
    runs out, rank 0's mark and rank 1's agree, and neither warns that it could not mark."""
    spec = oom_job(unique_id("ddpoomrun"))
    pl.seed_everything(0, verbose=False)
    model = RunsOutOfMemoryAbove(limit=16, rank=rank, after=4)
    trainer = two_forked_ranks(server, spec, tmp_path)
    with pytest.raises(ProcessRaisedException, match="CUDA out of memory"):
        trainer.fit(model)  # rank 1's error, rank 0's (gloo's: its peer is gone) beside it
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    assert [(t["batch_size"], t["status"]) for t in state["trials"]] == [(32, "infeasible")]
    assert list(state["memory_caps"].values()) == [32]  # the next run gets 16
    assert "could not mark" not in capfd.readouterr().err


def accumulation_job(job_id: str, batch_sizes: list[int]) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        job_id_prefix=job_id.split("-")[0],
        batch_sizes=batch_sizes,
        default_batch_size=32,
        target_metric=0.999,  # never reached: the job's max_epochs ends each fit
        max_epochs=2,
        mab_seed=1,
        learning_curve_stop=False,
    )


def test_accumulated_micro_batches_give_the_large_batchs_updates(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Batch size 32 trained as two micro-batches of 16 (``max_micro_batch_size=16``) takes the
    same optimizer steps as 32 at once: the weights after the fit agree within float error."""
    weights, fits = [], []
    for name, options in (("native", {}), ("accumulated", {"max_micro_batch_size": 16})):
        spec = accumulation_job(unique_id(f"litacc{name}"), [32])
        pl.seed_everything(0, verbose=False)
        model = TinyClassifier()
        callback = ZeusBSOCallback(
            server.url, spec, monitor="val_acc", energy_meter=EstimateMeter(100), **options
        )
        options_ = quiet_trainer_options(tmp_path / name)
        trainer = pl.Trainer(callbacks=[callback], max_epochs=spec.max_epochs, **options_)
        trainer.fit(model)
        weights.append([p.detach().clone() for p in model.parameters()])
        fits.append((set(model.seen_batch_sizes), trainer.accumulate_grad_batches))
        with ServerClient(server.url) as client:
            (trial,) = client.job_state(spec.job_id or "")["trials"]
        assert (trial["batch_size"], trial["epochs"]) == (32, 2)
        fits[-1] += (trial["accumulation_steps"],)
    assert fits == [({32}, 1, None), ({16}, 2, 2)]
    for native, accumulated in zip(*weights, strict=True):
        assert torch.allclose(native, accumulated, rtol=1e-5, atol=1e-6)


def test_out_of_memory_with_accumulation_lowers_the_micro_batch_not_the_batch_size(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Above 16 samples a step runs out of memory: with ``max_micro_batch_size`` the dispatched
    32 is tried, runs out, and trains as two micro-batches of 16 in the same fit; the trial is
    reported (not infeasible), and 64 stays a candidate, reached as four of 16."""
    spec = oom_job(unique_id("litaccoom"))
    seen = []
    for _ in range(6):
        pl.seed_everything(0, verbose=False)
        model = RunsOutOfMemoryAbove(limit=16)
        callback = ZeusBSOCallback(
            server.url,
            spec,
            monitor="val_acc",
            energy_meter=EstimateMeter(100),
            max_micro_batch_size=64,
        )
        trainer = pl.Trainer(
            callbacks=[callback], max_epochs=spec.max_epochs, **quiet_trainer_options(tmp_path)
        )
        trainer.fit(model)
        assert max(model.seen_batch_sizes) <= 16
        seen.append((callback.batch_size, trainer.accumulate_grad_batches))
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    assert seen[0] == (32, 2)
    assert {"infeasible", "failed"}.isdisjoint(t["status"] for t in state["trials"])
    assert list(state["memory_caps"].values()) == [32]
    assert (64, 4) in seen  # pruning walks up past the cap, by accumulation
    steps = {t["batch_size"]: t["accumulation_steps"] for t in state["trials"]}
    assert steps == {16: None, 32: 2, 64: 4}


def test_the_environment_turns_the_callback_on_without_changing_the_script(
    server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning's ``callbacks_factory`` entry point: a Trainer built without the callback gets
    one where ``ZEUS_BSO_LIGHTNING_JOB`` names the job (here a JSON file), with the server and
    the other settings from the environment, and none where it is unset."""
    spec = job(unique_id("litenv"), target=0.8)
    plain = pl.Trainer(max_epochs=1, **quiet_trainer_options(tmp_path / "plain"))
    assert not [c for c in plain.callbacks if isinstance(c, ZeusBSOCallback)]
    job_file = tmp_path / "job.json"
    job_file.write_text(spec.model_dump_json())
    monkeypatch.setenv("ZEUS_BSO_LIGHTNING_JOB", str(job_file))
    monkeypatch.setenv("ZEUS_BSO_SERVER_URL", server.url)
    monkeypatch.setenv("ZEUS_BSO_MONITOR", "val_acc")
    monkeypatch.setenv("ZEUS_BSO_LR_RULE", "linear")
    pl.seed_everything(0, verbose=False)
    model = TinyClassifier()
    trainer = pl.Trainer(max_epochs=spec.max_epochs, **quiet_trainer_options(tmp_path / "env"))
    (callback,) = [c for c in trainer.callbacks if isinstance(c, ZeusBSOCallback)]
    assert (callback.monitor, callback.options["lr_rule"]) == ("val_acc", "linear")
    trainer.fit(model)
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["status"] == "reported"
    assert set(model.seen_batch_sizes) == {trial["batch_size"]}
    # A job that cannot be read says so when the Trainer is built.
    monkeypatch.setenv("ZEUS_BSO_LIGHTNING_JOB", str(tmp_path / "missing.json"))
    with pytest.raises(ConfigurationError, match="neither a job as JSON nor a readable"):
        pl.Trainer(max_epochs=1, **quiet_trainer_options(tmp_path / "bad"))
    # An invalid one names what is wrong, on one line.
    monkeypatch.setenv(
        "ZEUS_BSO_LIGHTNING_JOB", spec.model_dump_json().replace('"max_epochs":6', '"max_epochs":0')
    )
    with pytest.raises(ConfigurationError) as invalid:
        pl.Trainer(max_epochs=1, **quiet_trainer_options(tmp_path / "bad"))
    assert str(invalid.value) == (
        "ZEUS_BSO_LIGHTNING_JOB does not hold a valid job: max_epochs: Input should be greater "
        "than 0"
    )


def test_the_environment_turns_the_callback_on_for_a_classic_pytorch_lightning_trainer_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``import pytorch_lightning as pl`` scripts: the classic package's Trainer reads its own
    ``callbacks_factory`` entry point group, which got nothing, so an image that set
    ``ZEUS_BSO_LIGHTNING_JOB`` turned zeus-bso on for ``lightning.pytorch`` scripts only."""
    classic = pytest.importorskip("pytorch_lightning")
    spec = job(unique_id("litclassic"), target=0.8)
    monkeypatch.setenv("ZEUS_BSO_LIGHTNING_JOB", spec.model_dump_json())
    monkeypatch.setenv("ZEUS_BSO_MONITOR", "val_loss_inverse")
    monkeypatch.setenv("ZEUS_BSO_SERVER_URL", "http://127.0.0.1:9")  # not asked: no fit here
    trainer = classic.Trainer(max_epochs=1, **quiet_trainer_options(tmp_path))
    (callback,) = [c for c in trainer.callbacks if isinstance(c, ZeusBSOCallback)]
    assert isinstance(callback, classic.Callback)
    assert (callback.job.job_id, callback.monitor) == (spec.job_id, "val_loss_inverse")
    # Where an install's metadata is older than the entry point's module, it names this one.
    from zeus_bso.integrations import lightning

    (named_before,) = lightning.callbacks_from_environment()
    assert named_before.job == callback.job


def test_a_lightning_cli_config_file_configures_the_callback(
    server: ServerProcess, tmp_path: Path
) -> None:
    """LightningCLI builds ZeusBSOCallback, its job included, from a YAML config: the job's
    signature must hold its own defaults (an empty ``batch_sizes`` default once broke its
    ``min_length``, and the CLI refused every config that named a job)."""
    pytest.importorskip("jsonargparse", reason="LightningCLI needs jsonargparse[signatures]")
    from lightning.pytorch.cli import LightningCLI

    prefix = unique_id("cli").replace("-", "")
    config = tmp_path / "config.yaml"
    config.write_text(
        f"""\
seed_everything: 0
trainer:
  max_epochs: 6
  accelerator: cpu
  logger: false
  enable_checkpointing: false
  enable_progress_bar: false
  enable_model_summary: false
  default_root_dir: {tmp_path}
  callbacks:
    - class_path: zeus_bso.integrations.lightning.ZeusBSOCallback
      init_args:
        server_url: {server.url}
        monitor: val_acc
        lr_rule: linear
        job:
          job_id_prefix: {prefix}
          batch_sizes: [16, 32, 64]
          default_batch_size: 32
          target_metric: 0.9
          max_epochs: 6
          learning_curve_stop: false
"""
    )
    sizes, rates = [], []
    for _ in range(2):
        cli = LightningCLI(
            TinyClassifier, args=["fit", "--config", str(config)], save_config_callback=None
        )
        (callback,) = [c for c in cli.trainer.callbacks if isinstance(c, ZeusBSOCallback)]
        assert callback.outcome is not None
        sizes.append(callback.outcome.batch_size)
        rates.append(stepped_rate(cli.trainer.optimizers[0]))
        assert set(cli.model.seen_batch_sizes) == {sizes[-1]}
    assert sizes[0] == 32  # the job's default: the server's first run
    assert sizes[1] != 32
    # lr_rule from the file: SGD's 0.05 tuned at 32, linear in the batch size.
    assert rates == pytest.approx([0.05 * size / 32 for size in sizes])
    with ServerClient(server.url) as client:
        (listed,) = client.list_jobs(prefix=f"{prefix}-")
        registered = client.job(listed.job_id, limit=0).job
    assert (registered.batch_sizes, registered.target_metric) == ([16, 32, 64], 0.9)


class FromNestedConfig(TinyClassifier):
    """Built from a nested config, as Hydra projects build modules: its DataLoader reads
    ``self.hparams.data["batch_size"]``."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        del self.batch_size
        self.save_hyperparameters(config)

    def train_dataloader(self) -> Any:
        size = self.hparams.data["batch_size"]
        return torch.utils.data.DataLoader(self.train_data, batch_size=size, shuffle=True)


@pytest.mark.parametrize("container", ["omegaconf", "dict"])
def test_a_nested_configs_batch_size_is_set_by_its_dotted_path(
    server: ServerProcess, tmp_path: Path, container: str
) -> None:
    """``batch_arg_name="data.batch_size"`` sets ``self.hparams.data.batch_size`` (an OmegaConf
    config's, or a plain dict's): the fit trains the server's size. The top-level name, which
    nothing holds, is refused before the server is asked, naming the path."""
    config: Any = {"data": {"batch_size": 16}}
    if container == "omegaconf":
        omegaconf = pytest.importorskip("omegaconf", reason="pip install omegaconf")
        config = omegaconf.OmegaConf.create(config)
    spec = job(unique_id("nested"), target=0.99, max_epochs=1)
    options = {"max_epochs": 1, **quiet_trainer_options(tmp_path)}
    refused = ZeusBSOCallback(server.url, spec, monitor="val_acc")
    with pytest.raises(ConfigurationError, match=r"batch_arg_name='data\.batch_size'"):
        pl.Trainer(callbacks=[refused], **options).fit(FromNestedConfig(config))
    model = FromNestedConfig(config)
    callback = ZeusBSOCallback(
        server.url, spec, monitor="val_acc", batch_arg_name="data.batch_size"
    )
    pl.Trainer(callbacks=[callback], **options).fit(model)
    assert model.hparams.data["batch_size"] == 32
    assert set(model.seen_batch_sizes) == {32}
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["batch_size"], trial["status"]) == (32, "reported")


@dataclasses.dataclass
class TrainArgs:
    batch_size: int = 16
    workers: int = 0


class FromArgs(TinyClassifier):
    """Keeps the script's parsed arguments as ``self.args`` (no hparams), as research code
    does: its DataLoader reads ``self.args.batch_size``."""

    def __init__(self, args: Any) -> None:
        super().__init__()
        del self.batch_size
        self.args = args

    def train_dataloader(self) -> Any:
        size = self.args.batch_size
        return torch.utils.data.DataLoader(self.train_data, batch_size=size, shuffle=True)


class PydanticArgs(pydantic.BaseModel):
    batch_size: int = 16
    workers: int = 0


@pytest.mark.parametrize("kind", ["namespace", "dataclass", "pydantic"])
def test_the_batch_size_of_arguments_kept_in_an_attribute_is_set_by_its_dotted_path(
    server: ServerProcess, tmp_path: Path, kind: str
) -> None:
    """``self.args.batch_size`` (an ``argparse.Namespace``, or a dataclass or pydantic model of
    the script's settings): the top-level name is refused before the server is asked, naming
    the path ``args.batch_size``, with which the fit trains the server's size."""

    def made() -> Any:
        if kind == "pydantic":
            return PydanticArgs()
        return argparse.Namespace(batch_size=16, workers=0) if kind == "namespace" else TrainArgs()

    spec = job(unique_id("argsattr"), target=0.99, max_epochs=1)
    options = {"max_epochs": 1, **quiet_trainer_options(tmp_path)}
    refused = ZeusBSOCallback(server.url, spec, monitor="val_acc")
    with pytest.raises(ConfigurationError, match=r"batch_arg_name='args\.batch_size'"):
        pl.Trainer(callbacks=[refused], **options).fit(FromArgs(made()))
    model = FromArgs(made())
    callback = ZeusBSOCallback(
        server.url, spec, monitor="val_acc", batch_arg_name="args.batch_size"
    )
    pl.Trainer(callbacks=[callback], **options).fit(model)
    assert model.args.batch_size == 32
    assert set(model.seen_batch_sizes) == {32}


def test_a_hydra_config_instantiates_the_callback_with_its_job(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Hydra's ``instantiate`` passes a job without ``_target_`` as a ``DictConfig`` (its lists
    as ``ListConfig``): the callback takes it as the job's fields."""
    pytest.importorskip("hydra", reason="pip install hydra-core")
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    prefix = unique_id("hydra").replace("-", "")
    config = OmegaConf.create(
        {
            "_target_": "zeus_bso.integrations.lightning.ZeusBSOCallback",
            "server_url": server.url,
            "monitor": "val_acc",
            "job": {
                "job_id_prefix": prefix,
                "batch_sizes": [16, 32, 64],
                "default_batch_size": 32,
                "target_metric": 0.8,
                "max_epochs": 6,
            },
        }
    )
    callback = instantiate(config)
    assert isinstance(callback.job, JobSpec)
    pl.seed_everything(0, verbose=False)
    model = TinyClassifier()
    pl.Trainer(max_epochs=6, callbacks=[callback], **quiet_trainer_options(tmp_path)).fit(model)
    assert callback.outcome is not None
    assert callback.outcome.batch_size == 32
    assert set(model.seen_batch_sizes) == {32}
    with ServerClient(server.url) as client:
        (trial,) = client.trials(callback.outcome.job_id)
    assert trial.status == "reported"
