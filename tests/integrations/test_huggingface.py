"""ZeusBSOTrainerCallback with a real Hugging Face Trainer on the CPU against a real server."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the HF tests need torch (pip install torch)")
transformers = pytest.importorskip("transformers", reason="pip install 'zeus-bso[hf]'")
pytest.importorskip("accelerate", reason="pip install 'zeus-bso[hf]'")

from tests.framework_versions import (  # noqa: E402
    auto_find_sizes,
    loop_sets_accumulation_steps,
    trainer_rereads_its_batch_size,
    transformers_major,
)
from tests.helpers import (  # noqa: E402
    ServerProcess,
    check_stopped_itself,
    process_group_of_one,
    unique_id,
)
from tests.ports import free_port  # noqa: E402
from zeus_bso import JobSpec, until_converged  # noqa: E402
from zeus_bso.client import ServerClient  # noqa: E402
from zeus_bso.energy import EstimateMeter  # noqa: E402
from zeus_bso.errors import (  # noqa: E402
    ConfigurationError,
    OperationOrderError,
    ZeusBSOError,
    ZeusBSOTrainFailError,
)
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback  # noqa: E402
from zeus_bso.scaling.lr import step_factor  # noqa: E402
from zeus_bso.spec import Technique  # noqa: E402
from zeus_bso.training.techniques import techniques_of  # noqa: E402


@pytest.fixture(scope="module")
def server(sqlite_server: ServerProcess) -> ServerProcess:
    """SQLite only: the subject here is the Hugging Face callback, not the database."""
    return sqlite_server


class TokenDataset(torch.utils.data.Dataset):  # type: ignore[misc]
    """Sequences whose label says whether token 7 occurs in them."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(1, 20, (n, 8), generator=g)
        self.labels = (self.ids == 7).any(dim=1).long()

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {
            "input_ids": self.ids[i],
            "attention_mask": torch.ones(8, dtype=torch.long),
            "labels": self.labels[i],
        }


class BatchSizeSpy(transformers.TrainerCallback):  # type: ignore[misc]
    def __init__(self) -> None:
        self.sizes: list[int] = []

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        loader = kwargs.get("train_dataloader")
        if loader is not None and not self.sizes:
            self.sizes.append(
                loader.total_batch_size
                if hasattr(loader, "total_batch_size")
                else loader.batch_size
            )


def accuracy(prediction: Any) -> dict[str, float]:
    logits, labels = prediction
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


def tiny_bert() -> Any:
    """A one-layer BERT classifier small enough to train in seconds on the CPU."""
    config = transformers.BertConfig(
        vocab_size=24,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=16,
        num_labels=2,
    )
    return transformers.BertForSequenceClassification(config)


def test_a_hugging_face_models_activation_checkpointing_is_said() -> None:
    """What `TrainingArguments(gradient_checkpointing=True)` turns on, read off the model
    (`zeus_bso.training.techniques`; its other ways: tests/integrations/test_techniques.py)."""
    bert = tiny_bert()
    assert techniques_of(bert) == []
    enable = getattr(bert, "activation_checkpointing_enable", None)
    (enable or bert.gradient_checkpointing_enable)()  # the name before transformers 5
    assert techniques_of(bert) == [Technique.ACTIVATION_CHECKPOINTING]


def training_arguments(output_dir: Path, batch_size: int, epochs: float, **options: Any) -> Any:
    """The tests' TrainingArguments: CPU, evaluation every epoch, no logging or progress bars."""
    settings: dict[str, Any] = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": batch_size,
        "per_device_eval_batch_size": 64,
        "num_train_epochs": epochs,
        "learning_rate": 5e-3,
        "eval_strategy": "epoch",
        "logging_strategy": "no",
        "report_to": [],
        "use_cpu": True,
        "disable_tqdm": True,
    }
    return transformers.TrainingArguments(**(settings | options))


def train(
    server_url: str,
    spec: JobSpec,
    tmp_path: Path,
    epochs: float,
    batch_size: int | None = None,
    save: bool = False,
    resume: Path | bool | None = None,
    ahead: list[Any] | None = None,
    callback_options: dict[str, Any] | None = None,
    added_later: bool = False,
    attached: bool = False,
    compute_metrics: Any = accuracy,
    trainer_class: Any = None,
    set_after_built: int | None = None,
    block: bool = False,
    model: Any = None,
    **options: Any,
) -> ZeusBSOTrainerCallback:
    """One run of a tiny BERT under the callback (``block``: within ``with callback:``;
    ``model``: that one, not a new one)."""
    torch.manual_seed(0)
    model = model if model is not None else tiny_bert()
    callback = ZeusBSOTrainerCallback(
        server_url,
        spec,
        energy_meter=EstimateMeter(100),
        resume_from_checkpoint=resume,
        output_dir=tmp_path / "out",
        **{"metric": "eval_accuracy", **(callback_options or {})},
    )
    spy = BatchSizeSpy()
    args = training_arguments(
        tmp_path / "out",
        set_after_built or batch_size or callback.start(),
        epochs,
        **({"save_strategy": "epoch" if save or resume else "no"} | options),
    )
    trainer = (trainer_class or transformers.Trainer)(
        model=model,
        args=args,
        train_dataset=TokenDataset(256, 0),
        eval_dataset=TokenDataset(128, 1),
        compute_metrics=compute_metrics,
        callbacks=[*(ahead or []), *([] if added_later or attached else [callback]), spy],
    )
    if attached:  # built without it: attach adds it and sets the size
        callback.attach(trainer)
    if added_later:  # after the Trainer was built: no on_init_end reaches it
        trainer.add_callback(callback)
    if set_after_built is not None:  # the Trainer was built at that size, then told the run's
        trainer.args.per_device_train_batch_size = callback.start()
    with callback if block else contextlib.nullcontext():
        trainer.train(resume_from_checkpoint=str(resume) if isinstance(resume, Path) else resume)
    callback.spy_sizes = spy.sizes  # type: ignore[attr-defined]
    callback.log_history = trainer.state.log_history  # type: ignore[attr-defined]
    # An evaluation after training is not part of the trial.
    callback.later_metrics = trainer.evaluate()  # type: ignore[attr-defined]
    return callback


def runs_out_of_memory_above(model: Any, limit: int, after: int = 0) -> Any:
    """``model``, whose forward runs out of memory on a training batch of more than ``limit``
    samples (as CUDA would raise it), from its training forward after the ``after``-th (the
    memory check's count: after them, out of memory mid-run)."""
    forward = model.forward
    calls = [0]

    @functools.wraps(forward)  # the Trainer keeps the dataset columns its signature names
    def limited(*args: Any, **kwargs: Any) -> Any:
        batch = kwargs["input_ids"].shape[0]
        calls[0] += model.training
        if model.training and batch > limit and calls[0] > after:
            raise RuntimeError(f"CUDA out of memory. Tried to allocate {batch} MiB")
        return forward(*args, **kwargs)

    model.forward = limited
    return model


def oom_trainer(args: Any, callback: ZeusBSOTrainerCallback) -> Any:
    """A Trainer of the tiny model that runs out of memory above 8 samples a training batch."""
    return transformers.Trainer(
        model=runs_out_of_memory_above(tiny_bert(), 8),
        args=args,
        train_dataset=TokenDataset(256, 0),
        eval_dataset=TokenDataset(128, 1),
        compute_metrics=accuracy,
        callbacks=[callback],
    )


def job_at_32(job_id: str) -> JobSpec:
    """A job of one batch size, 32, that no run reaches the target of (the tests of settings
    tuned at a reference size of 16 give ``reference_batch_size=16``)."""
    return job(job_id, target=0.999).model_copy(
        update={"batch_sizes": [32], "default_batch_size": 32}
    )


def job(job_id: str, target: float) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        job_id_prefix=job_id.split("-")[0],
        batch_sizes=[8, 16, 32],
        default_batch_size=16,
        target_metric=target,
        max_epochs=6,
        mab_seed=2,
        # CPU epochs of a tiny model: their costs are timing noise, which the learning-curve
        # stop would extrapolate (it is tested in tests/policy and tests/api).
        learning_curve_stop=False,
    )


def test_recurrences_with_the_hf_trainer(server: ServerProcess, tmp_path: Path) -> None:
    spec = job(unique_id("hf"), target=0.75)
    chosen = []
    logged = []
    for _ in range(3):
        callback = train(server.url, spec, tmp_path, epochs=6)
        chosen.append(callback.batch_size)
        assert callback.spy_sizes == [callback.batch_size]  # type: ignore[attr-defined]
        history = callback.log_history  # type: ignore[attr-defined]
        logged.append([entry["bso/cost"] for entry in history if "bso/cost" in entry])
        assert "eval_accuracy" in callback.later_metrics  # type: ignore[attr-defined]
        assert "bso_cost" not in callback.later_metrics  # type: ignore[attr-defined]
    assert chosen[0] == spec.default_batch_size
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    trials = sorted(state["trials"], key=lambda t: t["trial_number"])
    assert [t["batch_size"] for t in trials] == chosen
    assert all(t["status"] == "reported" for t in trials)
    # Each run's reports said the parameters the Trainer's optimizer trains: the whole model.
    parameters = sum(p.numel() for p in tiny_bert().parameters())
    said = [(t["model_parameters"], t["precision"], t["techniques"]) for t in trials]
    assert said == [(parameters, "32", [])] * 3  # no activation checkpointing, not compiled
    stopped_early = [t for t in trials if t["converged"] and t["epochs"] < 6]
    assert stopped_early, trials  # the server's stop ended training before num_train_epochs
    # One logged cost per report, the last the server's stored cost of the trial.
    assert [len(costs) for costs in logged] == [t["epochs"] for t in trials]
    assert [costs[-1] for costs in logged] == [t["cost"] for t in trials]


def test_early_stopping_that_ends_training_counts_as_not_converging(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The Trainer's EarlyStoppingCallback ended training below the job's target: the run did
    not converge at its batch size, which counts at once (its last report goes again as final),
    charged as if it had trained the job's max_epochs (released, every recurrence would run the
    same size again). The Trainer's own limits are not the batch size's: released."""
    spec = job(unique_id("hfstopping"), target=0.999)
    stopping = transformers.EarlyStoppingCallback(
        early_stopping_patience=1, early_stopping_threshold=1.0
    )
    callback = train_with_best_model(server.url, spec, tmp_path, [stopping])
    stopper = "EarlyStoppingCallback ended training (accuracy did not improve for 1 evaluation)"
    check_stopped_itself(server.url, spec, callback.outcome, stopper)
    short = job(unique_id("hfshort"), target=0.999)
    # num_train_epochs below max_epochs, and not whole: its third report came after half an
    # epoch, and the Trainer's own epoch is said ("epoch 3" read as three whole epochs).
    limited = train(server.url, short, tmp_path, epochs=2.5)
    check_released(server.url, short, limited, "2.5 (num_train_epochs=2.5", reports=3)


def train_with_best_model(
    server_url: str, spec: JobSpec, tmp_path: Path, ahead: list[Any]
) -> ZeusBSOTrainerCallback:
    """A run of 6 epochs that keeps the best model by accuracy (as EarlyStoppingCallback needs),
    with ``ahead`` before the callback."""
    return train(server_url, spec, tmp_path, epochs=6, save=True, ahead=ahead,
                 load_best_model_at_end=True, metric_for_best_model="accuracy")  # fmt: skip


def check_released(
    server_url: str,
    spec: JobSpec,
    callback: ZeusBSOTrainerCallback,
    epoch: str = "2",
    reports: int = 2,
) -> None:
    """The run's outcome says the Trainer stopped at ``epoch`` (what follows it too), and its
    trial was released after ``reports`` reports."""
    assert callback.outcome is not None
    assert f"the Trainer stopped at epoch {epoch}" in callback.outcome.summary()
    with ServerClient(server_url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["status"], trial["epochs"]) == ("released", reports)


class StopsAtEpoch2(transformers.TrainerCallback):  # type: ignore[misc]
    """A callback of the user's own that ends training after the second epoch's evaluation."""

    def on_evaluate(self, args: Any, state: Any, control: Any, **_: Any) -> None:
        if state.epoch >= 2:
            control.should_training_stop = True


def test_another_callback_that_ends_training_beside_early_stopping_releases_the_run(
    server: ServerProcess, tmp_path: Path
) -> None:
    """An EarlyStoppingCallback whose patience has not run out did not end training: the run is
    released, as for the Trainer's own limits, not counted against its batch size."""
    spec = job(unique_id("hfother"), target=0.999)
    patient = transformers.EarlyStoppingCallback(early_stopping_patience=100)
    callback = train_with_best_model(server.url, spec, tmp_path, [patient, StopsAtEpoch2()])
    check_released(server.url, spec, callback)


class LogRecorder(transformers.TrainerCallback):  # type: ignore[misc]
    """Logs what the Trainer hands its callbacks' ``on_log``, as the ``report_to`` integrations
    (W&B, MLflow, TensorBoard) do; like them, it comes before the callbacks given after it."""

    def __init__(self) -> None:
        self.logs: list[dict[str, float]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
        self.logs.append(dict(logs or {}))


@pytest.mark.parametrize("added_later", [False, True], ids=["given", "add_callback"])
def test_the_cost_reaches_the_logging_integrations_ahead_of_the_callback(
    server: ServerProcess, tmp_path: Path, added_later: bool
) -> None:
    spec = job(unique_id("hflog"), target=0.999)
    recorder = LogRecorder()
    callback = train(
        server.url, spec, tmp_path, epochs=3, ahead=[recorder], added_later=added_later
    )
    evaluations = [logs for logs in recorder.logs if "eval_accuracy" in logs]
    during = evaluations[:-1]  # the last one is the evaluation after training
    assert len(during) == 3
    costs = [e["bso/cost"] for e in callback.log_history if "bso/cost" in e]  # type: ignore[attr-defined]
    assert [logs["bso_cost"] for logs in during] == costs
    assert all(logs["bso_energy_j"] > 0 for logs in during)
    assert "bso_cost" not in evaluations[-1]
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert costs[-1] == trial["cost"]


class ShrinksAfterEvaluation(transformers.Trainer):
    """A Trainer whose evaluation's out-of-memory error reaches ``auto_find_batch_size``, as
    Transformers' before 5 let it (it shrank the training batch again and again)."""

    def _evaluate(self, trial: Any, ignore_keys_for_eval: Any, skip_scheduler: bool = False) -> Any:
        return self.evaluate(ignore_keys=ignore_keys_for_eval)


@pytest.mark.parametrize("trainer_class", [None, ShrinksAfterEvaluation], ids=["5", "older"])
def test_auto_find_batch_size_after_out_of_memory_in_evaluation_is_released(
    server: ServerProcess, tmp_path: Path, trainer_class: Any
) -> None:
    """The Trainer's second evaluation runs out of memory under ``auto_find_batch_size``: the
    Trainer raises its own error over it (Transformers 5), or would train again at smaller and
    smaller training batches, which cannot help (before 5: the run is refused at the first).
    Either way the run is released and the job's memory cap is left alone. Before, the run
    failed, counted against 16 (5), or each smaller size was taken to have run out, the cap
    came down at each, and the Trainer went on shrinking to zero (before 5)."""
    spec = job(unique_id("hfautoeval"), target=0.99)
    model = tiny_bert()
    forward = model.forward

    evaluated = [0]

    @functools.wraps(forward)
    def evaluation_runs_out(*args: Any, **kwargs: Any) -> Any:
        evaluated[0] += not model.training
        if evaluated[0] > 128 // 64:  # the second evaluation's first batch: the first reported
            raise RuntimeError("CUDA out of memory. Tried to allocate 8 MiB")
        return forward(*args, **kwargs)

    model.forward = evaluation_runs_out
    raised = (RuntimeError, ConfigurationError)
    with pytest.raises(raised, match=r"(?i)evaluation (hit an out-of-memory|ran out of memory)"):
        train(  # in ``with callback:``, which hears the Trainer's error
            server.url,
            spec,
            tmp_path,
            epochs=2,
            model=model,
            trainer_class=trainer_class,
            block=True,
            auto_find_batch_size=True,
        )
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    assert [(t["batch_size"], t["status"]) for t in state["trials"]] == [(16, "released")]
    assert state["memory_caps"] == {}


@pytest.mark.parametrize(("memory_check_steps", "target", "epochs"), [(3, 0.99, 2), (0, 0.05, 1)])
def test_auto_find_batch_size_marks_each_size_that_ran_out_of_memory(
    server: ServerProcess,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    memory_check_steps: int,
    target: float,
    epochs: int,
) -> None:
    """Batches above 8 run out of memory. The dispatched 16 runs out (in the memory check, or
    in training without it) and is marked infeasible; the Trainer shrinks it by a tenth at each
    error (16, 14, 12, 10, 9, 8; Accelerate before 1.7 halves it), and each of its own sizes
    that ran out brings these GPUs' memory cap down, so the next run gets 8. The run trains on
    at 8, outside the optimizer, at the learning rate of 8 by the linear rule, until the job's
    target (0.05: the first evaluation reaches it) or its max_epochs (6), or num_train_epochs
    (2) first."""
    spec = job(unique_id("hfauto"), target=target)
    callback = ZeusBSOTrainerCallback(
        server.url,
        spec,
        metric="eval_accuracy",
        energy_meter=EstimateMeter(100),
        lr_rule="linear",
        reference_batch_size=4,
        memory_check_steps=memory_check_steps,
    )
    torch.manual_seed(0)
    args = training_arguments(tmp_path / "out", callback.start(), 2, auto_find_batch_size=True)
    trainer = oom_trainer(args, callback)
    with caplog.at_level("WARNING", logger="zeus_bso.integrations.huggingface"):
        trainer.train()
    assert trainer.state.train_batch_size == 8
    assert trainer.state.epoch == epochs  # trained on, to the target or num_train_epochs
    shrank = [
        r.getMessage()
        for r in caplog.records
        if r.name == "zeus_bso.integrations.huggingface" and "auto_find" in r.getMessage()
    ]
    ran_out = auto_find_sizes(16, 8)[:-1]  # 16, 14, 12, 10, 9 (Accelerate 1.7 on; 16 before)
    assert len(shrank) == len(ran_out)  # the long story once, a line after
    assert ["did not choose" in m for m in shrank] == [True] + [False] * (len(ran_out) - 1)
    if len(ran_out) > 1:
        assert shrank[-1] == (
            "zeus-bso: the Trainer's auto_find_batch_size caught an out-of-memory error at "
            f"batch size {ran_out[-1]} and trains at 8 (outside the optimizer; no size from "
            f"{ran_out[-1]} up is dispatched on these GPUs)"
        )
    stopped = [r.getMessage() for r in caplog.records if "training stops" in r.getMessage()]
    if epochs == 1:
        (message,) = stopped
        assert "batch size 8, outside the optimizer, reached the job's target 0.05" in message
    else:
        assert stopped == []
    outcome = callback.outcome
    assert outcome is not None
    assert outcome.went_on
    assert outcome.converged is (epochs == 1)  # a model delivered: no run again
    summary = outcome.summary()
    assert summary.startswith("zeus-bso: batch size 16 stopped at epoch 0 of 6: batch size 16 ")
    assert "Run it again" not in summary
    if epochs == 1:
        assert (
            "; the Trainer went on at 8, outside the optimizer, and reached the target at its "
            "evaluation 1. Next run: 8"
        ) in summary
    else:
        assert "; the run goes on outside the optimizer (" in summary
    # 5e-3 tuned at 4: the schedule's, which the steps take twice of at 8.
    assert step_factor(trainer.optimizer) == pytest.approx(2.0)
    assert trainer.lr_scheduler.base_lrs == pytest.approx(
        [5e-3] * len(trainer.lr_scheduler.base_lrs)
    )
    assert callback.outcome is not None
    assert (callback.outcome.batch_size, callback.outcome.reason) == (16, "out_of_memory")
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    (trial,) = state["trials"]
    assert (trial["batch_size"], trial["status"], trial["epochs"]) == (16, "infeasible", None)
    assert list(state["memory_caps"].values()) == [ran_out[-1]]  # 14, 12, 10 and 9 ran out too
    assert state["next_run"]["batch_size"] == 8


def test_auto_find_batch_size_with_accumulation_is_refused(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Accumulation keeps the batch size that auto_find_batch_size would shrink."""
    spec = job(unique_id("hfautoacc"), target=0.99)
    with pytest.raises(ZeusBSOError, match="auto_find_batch_size"):
        train(
            server.url,
            spec,
            tmp_path,
            epochs=1,
            auto_find_batch_size=True,
            callback_options={"max_micro_batch_size": 16},
        )
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["epochs"] is None  # nothing trained, nothing reported
    assert trial["status"] == "released"  # not the batch size's fault


def test_evaluating_every_n_steps_says_what_max_epochs_then_counts(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """By steps, each evaluation is one of the job's epochs (said when training starts), and a
    run whose data (``num_train_epochs``) ends after fewer evaluations than the job's
    max_epochs is warned of in evaluations, with the epochs that make them."""
    spec = job(unique_id("hfsteps"), target=0.999)
    with caplog.at_level("INFO", logger="zeus_bso"):
        train(server.url, spec, tmp_path, epochs=1, eval_strategy="steps", eval_steps=4)
    said = [r.getMessage() for r in caplog.records if "eval_strategy" in r.getMessage()]
    assert any("each evaluation is one of the job's epochs" in line for line in said)
    (below,) = [r for r in caplog.records if "evaluations (every" in r.getMessage()]
    assert below.levelname == "WARNING"
    assert below.getMessage().startswith(
        "TrainingArguments(num_train_epochs=1) ends the run after 4 evaluations (every 4 steps), "
        "before the job's max_epochs (6 evaluations)"
    )
    assert "set num_train_epochs=2" in below.getMessage()
    assert "first report came after" not in caplog.text  # said once, by the callback
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["epochs"] == 4  # 16 steps of 16 samples, an evaluation every 4: four reports
    assert trial["status"] == "released"  # its data ended before the server's stop
    assert "the job's max_epochs is 6 evaluations" in trial["message"]


def test_evaluations_by_steps_come_the_same_samples_apart_at_every_batch_size(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``eval_steps=8`` tuned at the reference batch size 16 evaluates every 128 samples; a run
    at 32 evaluates every 4 of its steps, as many times over its data (an epoch of 256 samples:
    two evaluations, not one), and saves with its evaluations where ``save_steps`` was a
    multiple of ``eval_steps`` (``load_best_model_at_end``'s checkpoints: every 8 steps, not
    16). Each of the job's epochs is the same data at every batch size."""
    spec = job_at_32(unique_id("hfcadence"))
    with caplog.at_level("INFO", logger="zeus_bso"):
        train(
            server.url,
            spec,
            tmp_path,
            epochs=3,
            callback_options={"reference_batch_size": 16},
            eval_strategy="steps",
            eval_steps=8,
            save_strategy="steps",
            save_steps=16,
            load_best_model_at_end=True,
            metric_for_best_model="accuracy",
        )
    assert "at batch size 32 the run evaluates every 4 steps" in caplog.text
    assert (
        "save_steps=16 (the steps between checkpoints at the reference batch size 16): the run "
        "saves every 8 steps" in caplog.text
    )
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["epochs"] == 6  # 24 steps, an evaluation every 4: the job's max_epochs
    saved = sorted(int(p.name.split("-")[1]) for p in (tmp_path / "out").glob("checkpoint-*"))
    assert saved == [8, 16, 24], saved  # with the evaluations at 8, 16 and 24 (of 4, 8, ...)
    assert "num_train_epochs" not in caplog.text  # six evaluations: as many as the job's


def test_checkpoints_by_steps_come_the_same_samples_apart_at_every_batch_size(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``save_steps=8`` tuned at the reference batch size 16 saves every 128 samples; a run at
    32 that evaluates at each epoch's end saves every 4 of its steps (it saved every 8: half
    as many checkpoints, where a run at 8 saved twice as many, their time and energy charged to
    the size)."""
    spec = job_at_32(unique_id("hfsaves"))
    with caplog.at_level("INFO", logger="zeus_bso"):
        train(
            server.url,
            spec,
            tmp_path,
            epochs=2,
            callback_options={"reference_batch_size": 16},
            save_strategy="steps",
            save_steps=8,
        )
    assert (
        "save_steps=8 (the steps between checkpoints at the reference batch size 16): the run "
        "saves every 4 steps" in caplog.text
    )
    saved = sorted(int(p.name.split("-")[1]) for p in (tmp_path / "out").glob("checkpoint-*"))
    assert saved == [4, 8, 12, 16], saved  # two epochs of 8 steps of 32


def test_a_warmup_stable_decay_schedule_decays_over_the_reference_sizes_samples(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``lr_scheduler_type="warmup_stable_decay"`` with ``num_decay_steps=8`` tuned at the
    reference batch size 16 decays over the last 128 samples: a run at 32 decays over its last
    4 steps of 16 (it decayed over 8, half the run)."""
    spec = job_at_32(unique_id("hfwsd"))
    with caplog.at_level("INFO", logger="zeus_bso"):
        callback = train(
            server.url,
            spec,
            tmp_path,
            epochs=2,
            callback_options={"reference_batch_size": 16},
            lr_scheduler_type="warmup_stable_decay",
            lr_scheduler_kwargs={"num_decay_steps": 8},
            logging_strategy="steps",
            logging_steps=1,
        )
    history = callback.log_history  # type: ignore[attr-defined]
    rates = [row["learning_rate"] for row in history if "learning_rate" in row]
    assert len(rates) == 16  # two epochs of 256 samples at 32
    assert rates[:12] == [max(rates)] * 12, rates  # stable until the last 4 steps
    assert rates[-1] < rates[0] / 4, rates
    assert "lr_scheduler_kwargs' num_decay_steps=8" in caplog.text


def test_the_evaluation_before_training_is_not_a_report(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``eval_on_start=True`` evaluates the untrained model when training begins: it was
    reported as epoch 1, so every epoch after counted one more than trained, and a target the
    untrained model met ended the run as converged before it trained a step. Not reported now:
    the first report is the first epoch's."""
    spec = job(unique_id("hfevalfirst"), target=0.0)  # met by any evaluation, the first too
    callback = train(server.url, spec, tmp_path, epochs=spec.max_epochs, eval_on_start=True)
    trained = [entry["epoch"] for entry in callback.log_history if "eval_accuracy" in entry]
    assert trained[:2] == [0, 1]  # the Trainer evaluated at the start, then after epoch 1
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["epochs"], trial["converged"]) == (1, True)  # epoch 1, its first report
    assert callback.outcome is not None
    assert callback.outcome.epochs == 1


def test_evaluations_that_start_late_are_judged_at_their_epochs(
    server: ServerProcess, tmp_path: Path
) -> None:
    """With ``eval_delay=2`` the Trainer first evaluates after epoch 2: that report counted as
    epoch 1, so a run of the job's max_epochs (3) ended after two reports, unjudged (released,
    and the next run got its size again). Each evaluation by epochs is reported at its epoch."""
    spec = job(unique_id("hfdelay"), target=1.5).model_copy(update={"max_epochs": 3})
    callback = train(server.url, spec, tmp_path, epochs=3, eval_delay=2)
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert [epoch for epoch, _ in trial["curve"]] == [2, 3]
    assert (trial["status"], trial["epochs"], trial["converged"]) == ("reported", 3, False)
    assert callback.outcome is not None
    assert callback.outcome.reason == "max_epochs"


def test_the_metric_may_be_named_without_its_eval_prefix(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``metric="accuracy"``, as ``metric_for_best_model`` takes it: the Trainer's evaluations
    name it ``eval_accuracy``. It was refused at the first evaluation, after an epoch trained
    (the trial released)."""
    spec = job(unique_id("hfbare"), target=0.5)  # reached at the first evaluation
    callback = train(server.url, spec, tmp_path, epochs=2, callback_options={"metric": "accuracy"})
    assert callback.metric == "eval_accuracy"
    # The run auto_find_batch_size takes on at a smaller size is judged by the same name.
    assert callback._shrunk.metric == "eval_accuracy"
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["status"], trial["epochs"], trial["converged"]) == ("reported", 1, True)


@pytest.mark.parametrize("options", [{}, {"max_micro_batch_size": 8}], ids=["plain", "accumulates"])
def test_arguments_written_at_a_size_of_their_own_train_at_the_servers(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture, options: Any
) -> None:
    """A script as the Transformers examples write it: ``TrainingArguments`` at a batch size of
    its own (5), the callback among the Trainer's callbacks, no ``start()``. The callback asks
    for the run's size as the Trainer is built and sets it (and, where it accumulates, the
    micro-batches an optimizer step): every step trains the dispatched 16, as 16 or 2 x 8,
    and the log says what it replaced. Before, the run was refused at ``train()``."""
    spec = job(unique_id("hfown"), target=0.99)
    with caplog.at_level(logging.INFO, logger="zeus_bso"):
        callback = train(
            server.url, spec, tmp_path, epochs=1, batch_size=5, callback_options=options
        )
    micro, steps = (8, 2) if options else (16, 1)
    assert (callback.batch_size, callback.accumulation_steps) == (16, steps)
    assert callback.spy_sizes == [micro]  # type: ignore[attr-defined]
    said = f"per_device_train_batch_size={micro}"
    said += (
        ", gradient_accumulation_steps=2 (TrainingArguments said 5 and 1)"
        if options
        else (" (TrainingArguments said 5)")
    )
    assert f"the Trainer trains at the server's batch size: {said}" in caplog.text
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["batch_size"], trial["epochs"]) == (16, 1)


def test_training_again_after_the_run_ended_is_refused_saying_what_to_do(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A second ``trainer.train()`` with the same callback (a notebook's cell run again) trained
    an epoch outside the optimizer and stopped, without a word: the run had ended. Refused now,
    saying how to start the next run; the server's trials are the first run's alone."""
    spec = job(unique_id("hfagain"), target=0.0)  # reached at the first evaluation
    callback = ZeusBSOTrainerCallback(
        server.url, spec, metric="eval_accuracy", energy_meter=EstimateMeter(100)
    )
    trainer = transformers.Trainer(
        model=tiny_bert(),
        args=training_arguments(tmp_path, callback.start(), spec.max_epochs, save_strategy="no"),
        train_dataset=TokenDataset(64, 0),
        eval_dataset=TokenDataset(32, 1),
        compute_metrics=accuracy,
        callbacks=[callback],
    )
    trainer.train()
    assert callback.outcome is not None
    with pytest.raises(OperationOrderError, match="this callback's run ended") as raised:
        trainer.train()
    assert "give a new ZeusBSOTrainerCallback to a new Trainer" in str(raised.value)
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["status"], trial["epochs"], trial["converged"]) == ("reported", 1, True)


def test_a_hyperparameter_search_is_refused_at_its_first_trial(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``trainer.hyperparameter_search`` trains trials of other hyperparameters, not
    recurrences of the job: its first trial trained and was charged to the job as one of its
    runs, and the second was refused as the run having ended. Refused at the first trial now,
    before it trains, saying to search without the callback; the trial it was given is
    released."""
    pytest.importorskip("optuna", reason="pip install optuna")
    spec = job(unique_id("hfsearch"), target=0.99)
    callback = ZeusBSOTrainerCallback(
        server.url, spec, metric="eval_accuracy", energy_meter=EstimateMeter(100)
    )
    trainer = transformers.Trainer(
        model_init=tiny_bert,
        args=training_arguments(tmp_path, callback.start(), spec.max_epochs, save_strategy="no"),
        train_dataset=TokenDataset(64, 0),
        eval_dataset=TokenDataset(32, 1),
        compute_metrics=accuracy,
        callbacks=[callback],
    )

    def space(trial: Any) -> dict[str, Any]:
        return {"learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-2, log=True)}

    with pytest.raises(ConfigurationError, match=r"Trainer\.hyperparameter_search") as raised:
        trainer.hyperparameter_search(
            hp_space=space, backend="optuna", n_trials=2, direction="maximize"
        )
    assert "search without ZeusBSOTrainerCallback" in str(raised.value)
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["status"] == "released"
    assert not trial["epochs"]


def test_the_server_is_asked_as_the_trainer_is_built_and_not_in_an_attribute(
    server: ServerProcess, tmp_path: Path
) -> None:
    spec = job(unique_id("hfstart"), target=0.999)
    callback = ZeusBSOTrainerCallback(server.url, spec, energy_meter=EstimateMeter(100))
    with pytest.raises(ZeusBSOError, match=r"or build the Trainer with the callback\) before"):
        _ = callback.batch_size
    with ServerClient(server.url) as client:
        assert client.list_jobs(prefix=spec.job_id_prefix) == []  # nothing was asked
    trainer = transformers.Trainer(
        model=tiny_bert(),
        args=training_arguments(tmp_path / "out", 4, 1, save_strategy="no"),
        train_dataset=TokenDataset(64, 0),
        eval_dataset=TokenDataset(32, 1),
        callbacks=[callback],
    )
    assert callback.batch_size == trainer.args.per_device_train_batch_size == 16
    assert trainer._train_batch_size == 16
    assert callback.start() == callback.start() == 16  # the same trial
    assert callback.job_id == spec.job_id
    with ServerClient(server.url) as client:
        assert len(client.job_state(spec.job_id or "")["trials"]) == 1
    assert callback.session is not None
    callback.session.end(end_trial=False)


def test_a_trainer_built_again_with_the_callback_takes_the_same_trial(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A notebook's cell that builds the Trainer run again before ``train()``: the second
    Trainer, its arguments at a size of their own, is given the run's trial and size too, and
    trains at it; the server has one trial."""
    spec = job(unique_id("hfagain"), target=0.0)

    def built(size: int) -> Any:
        return transformers.Trainer(
            model=tiny_bert(),
            args=training_arguments(tmp_path / "out", size, 1, save_strategy="no"),
            train_dataset=TokenDataset(64, 0),
            eval_dataset=TokenDataset(32, 1),
            compute_metrics=accuracy,
            callbacks=[callback, spy],
        )

    callback = ZeusBSOTrainerCallback(server.url, spec, energy_meter=EstimateMeter(100))
    spy = BatchSizeSpy()
    built(4)
    trainer = built(8)
    assert trainer.args.per_device_train_batch_size == 16
    trainer.train()
    assert spy.sizes == [16]
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["batch_size"], trial["status"]) == (16, "reported")


def test_a_callback_added_after_the_trainer_was_built_says_to_attach_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``trainer.add_callback`` after the Trainer was built: no event reached the callback as
    the Trainer took its batch size, so it cannot set it; ``train()`` is refused before the
    server is asked, saying to call ``start()`` first or ``attach``. ``callback.attach(trainer)``
    adds it and sets the size: a Trainer built at 8 trains at the dispatched 16."""
    spec = job(unique_id("hfadded"), target=0.999)
    with pytest.raises(ConfigurationError) as refused:
        train(server.url, spec, tmp_path, epochs=1, batch_size=16, added_later=True)
    words = str(refused.value)
    assert "this Trainer was built without it (add_callback adds it after; " in words
    assert "callback.attach(trainer) adds it and sets the size" in words
    assert "per_device_train_batch_size=callback.start()" in words
    with ServerClient(server.url) as client:
        assert client.list_jobs(prefix=spec.job_id_prefix) == []  # nothing was asked
    callback = train(server.url, spec, tmp_path, epochs=1, batch_size=8, attached=True)
    assert callback.spy_sizes == [16]  # type: ignore[attr-defined]
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["batch_size"], trial["epochs"]) == (16, 1)


def test_a_launchers_rank_other_than_0_is_refused_before_a_process_group(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before a process group exists only the launcher's ``RANK`` says which process asks; a
    ``RANK`` that is not a number is not a launcher's (it was a ValueError from ``int()``)."""
    spec = job(unique_id("hfrank"), target=0.999)
    monkeypatch.setenv("RANK", "1")
    callback = ZeusBSOTrainerCallback(server.url, spec, energy_meter=EstimateMeter(100))
    with pytest.raises(ConfigurationError, match=r"initialise torch\.distributed"):
        callback.start()
    with ServerClient(server.url) as client:
        assert client.list_jobs(prefix=spec.job_id_prefix) == []  # rank 1 asked nothing
    monkeypatch.setenv("RANK", "worker-a")
    assert callback.start() == 16
    assert callback.session is not None
    callback.session.end(end_trial=False)


def test_a_resumed_run_continues_its_trial(server: ServerProcess, tmp_path: Path) -> None:
    spec = job(unique_id("hfresume"), target=0.999)
    first = train(server.url, spec, tmp_path, epochs=2, save=True)
    checkpoints = sorted(
        (tmp_path / "out").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1])
    )
    last = checkpoints[-1]
    assert (last / "zeus_bso_trial.json").exists()
    second = train(server.url, spec, tmp_path, epochs=4, resume=last)
    assert second.trial_number == first.trial_number
    assert second.batch_size == first.batch_size
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["epochs"] == 4  # 1-2 in the first run, 3-4 after resuming


def test_an_evaluation_delay_of_the_reference_sizes_steps_keeps_its_samples(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``eval_delay`` by steps, read by the Trainer from its arguments, is taken as tuned at
    the reference size, as ``eval_steps`` is: at 32, a delay of 8 steps tuned at 16 waits 4 of
    the run's steps (it waited 8, twice the samples, and the evaluation at step 4 was lost),
    and the log says so."""
    spec = job_at_32(unique_id("hfdelay"))
    options = {"eval_strategy": "steps", "eval_steps": 8, "eval_delay": 8}
    with caplog.at_level("INFO", logger="zeus_bso"):
        callback = train(
            server.url,
            spec,
            tmp_path,
            epochs=1,
            callback_options={"reference_batch_size": 16},
            **options,
        )
    said = "eval_delay=8 (steps of the reference batch size 16): at batch size 32 the first"
    assert f"{said} evaluation waits 4 steps" in caplog.text
    history = callback.log_history  # type: ignore[attr-defined]
    assert [row["step"] for row in history if "eval_accuracy" in row][:-1] == [4, 8]
    caplog.clear()
    with caplog.at_level("INFO", logger="zeus_bso"):
        train(server.url, job(unique_id("hfdelayref"), target=0.999), tmp_path, 1, **options)
    assert "eval_delay" not in caplog.text  # at the reference's size: its own steps


def test_a_run_bounded_by_max_steps_trains_the_reference_sizes_samples(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``max_steps=24`` and ``eval_steps=4`` tuned at the reference size 16 (the job's
    max_epochs, 6 evaluations): a run at 32 trains 12 steps, evaluating every 2, and the
    Trainer's schedule spans those 12 (it ends near 0). It had been stopped by the job's
    max_epochs halfway through a schedule of 24; a run at 8 had ended after three
    evaluations, unjudged."""
    spec = job_at_32(unique_id("hfmaxsteps"))
    callback = train(
        server.url,
        spec,
        tmp_path,
        epochs=1,
        callback_options={"reference_batch_size": 16},
        max_steps=24,
        eval_strategy="steps",
        eval_steps=4,
        logging_strategy="steps",
        logging_steps=1,
        lr_scheduler_type="linear",
    )
    history = callback.log_history  # type: ignore[attr-defined]
    assert [row["step"] for row in history if "eval_accuracy" in row][:-1] == [2, 4, 6, 8, 10, 12]
    rates = [row["learning_rate"] for row in history if "learning_rate" in row]
    assert len(rates) == 12
    assert rates[-1] < rates[0] / 4  # the schedule's end, not its middle
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["epochs"], trial["status"]) == (6, "reported")


def test_a_resumed_run_evaluates_by_steps_at_its_trials_cadence(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A run at 32 evaluating every 8 steps of the reference size 16 (every 4 of its own),
    stopped after an epoch and resumed from its checkpoint, evaluates every 4 steps again:
    its trial's reports are the same data apart before and after the restart."""
    spec = job_at_32(unique_id("hfresumesteps"))
    by_steps = {
        "callback_options": {"reference_batch_size": 16},
        "eval_strategy": "steps",
        "eval_steps": 8,
        "save_strategy": "steps",
        "save_steps": 8,
    }
    first = train(server.url, spec, tmp_path, epochs=1, **by_steps)
    saved = sorted(int(p.name.split("-")[1]) for p in (tmp_path / "out").glob("checkpoint-*"))
    assert saved == [4, 8]  # 8 steps of 32 samples, saved with each evaluation
    second = train(
        server.url, spec, tmp_path, epochs=2, resume=tmp_path / "out" / "checkpoint-8", **by_steps
    )
    assert second.trial_number == first.trial_number
    steps = [row["step"] for row in second.log_history if "eval_accuracy" in row]  # type: ignore[attr-defined]
    # The first run's two, then two more four steps apart (and `train`'s evaluation after).
    assert steps[:-1] == [4, 8, 12, 16]
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["epochs"] == 4


@pytest.mark.parametrize("alone", ["trainer", "callback"])
def test_a_checkpoint_resumed_by_the_trainer_or_the_callback_alone_is_refused(
    server: ServerProcess, tmp_path: Path, alone: str
) -> None:
    """``trainer.train(resume_from_checkpoint=...)`` without the callback's: a new trial counted
    a model trained before it as its own (a run of two epochs' training looked like one of
    none). The callback's without the Trainer's: the trial went on with a model trained anew.
    Either is refused before training, saying what to pass where; nothing is counted."""
    spec = job(unique_id("hfhalf"), target=0.999)
    first = train(server.url, spec, tmp_path, epochs=2, save=True)
    last = max((tmp_path / "out").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    callback = ZeusBSOTrainerCallback(
        server.url,
        spec,
        metric="eval_accuracy",
        energy_meter=EstimateMeter(100),
        resume_from_checkpoint=last if alone == "callback" else None,
    )
    trainer = transformers.Trainer(
        model=tiny_bert(),
        args=training_arguments(tmp_path / "out", callback.start(), 4, save_strategy="no"),
        train_dataset=TokenDataset(256, 0),
        eval_dataset=TokenDataset(128, 1),
        compute_metrics=accuracy,
        callbacks=[callback],
    )
    said = "that the callback was not given" if alone == "trainer" else "starts from scratch"
    with pytest.raises(ConfigurationError, match=said):
        trainer.train(resume_from_checkpoint=str(last) if alone == "trainer" else None)
    with ServerClient(server.url) as client:
        trials = client.job_state(spec.job_id or "")["trials"]
    statuses = {t["trial_number"]: (t["status"], t["epochs"]) for t in trials}
    assert statuses.pop(first.trial_number) == ("released", 2)  # as the first run left it
    assert list(statuses.values()) == ([("released", None)] if alone == "trainer" else [])


def test_a_checkpoint_other_than_the_callbacks_resumed_by_the_trainer_is_refused(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The Trainer resumes the first epoch's checkpoint, the callback the trial of the second's:
    the run trained the second epoch again and was refused at its report ("epoch 2 is not
    after the 2 epochs already reported"), its time spent. Refused before training now, naming
    both checkpoints' steps; the trial stays as the first run left it."""
    spec = job(unique_id("hfother"), target=0.999)
    first = train(server.url, spec, tmp_path, epochs=2, save=True)
    first_epoch, last = sorted(
        (tmp_path / "out").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1])
    )
    callback = ZeusBSOTrainerCallback(
        server.url,
        spec,
        metric="eval_accuracy",
        energy_meter=EstimateMeter(100),
        resume_from_checkpoint=last,
    )
    trainer = transformers.Trainer(
        model=tiny_bert(),
        args=training_arguments(tmp_path / "out", first.batch_size, 4, save_strategy="no"),
        train_dataset=TokenDataset(256, 0),
        eval_dataset=TokenDataset(128, 1),
        compute_metrics=accuracy,
        callbacks=[callback],
    )
    steps = first_epoch.name.split("-")[1], last.name.split("-")[1]
    said = f"the Trainer resumed a checkpoint at step {steps[0]}, but the callback continues"
    with pytest.raises(ConfigurationError, match=said) as refused:
        trainer.train(resume_from_checkpoint=str(first_epoch))
    assert f"saved at step {steps[1]}" in str(refused.value)
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["trial_number"], trial["epochs"]) == (first.trial_number, 2)


def test_resume_from_checkpoint_true_takes_the_last_checkpoint_in_output_dir(
    server: ServerProcess, tmp_path: Path
) -> None:
    spec = job(unique_id("hfresumelast"), target=0.999)
    with pytest.raises(ZeusBSOError, match="holds no checkpoint"):
        train(server.url, spec, tmp_path, epochs=2, resume=True)
    first = train(server.url, spec, tmp_path, epochs=2, save=True)
    # An earlier checkpoint without the callback's file: the last one is taken by step (the
    # default batch size's run saved checkpoint-16 and checkpoint-32), not by name.
    assert first.batch_size == 16
    (tmp_path / "out" / "checkpoint-9").mkdir()
    second = train(server.url, spec, tmp_path, epochs=3, resume=True)
    assert second.trial_number == first.trial_number
    with ServerClient(server.url) as client:
        trials = client.job_state(spec.job_id or "")["trials"]
    assert [t["epochs"] for t in trials] == [3]
    with pytest.raises(ZeusBSOError, match="pass output_dir"):
        ZeusBSOTrainerCallback(server.url, spec, resume_from_checkpoint=True)


def test_another_jobs_checkpoint_in_output_dir_is_passed_over(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A callback given no checkpoint looks at the last one in ``output_dir``: one of another
    job's trials is not this run's to continue; it gets a trial of its own, and the other's is
    left as it was (not even its lease renewed)."""
    other = job(unique_id("hfotherjob"), target=0.999)
    train(server.url, other, tmp_path, epochs=2, save=True)
    with ServerClient(server.url) as client:
        (theirs,) = client.job_state(other.job_id or "")["trials"]
    spec = job(unique_id("hfthisjob"), target=0.999)
    with caplog.at_level("INFO", logger="zeus_bso"):
        ours = train(server.url, spec, tmp_path, epochs=1, batch_size=16)  # no start()
    assert ours.trial_number == 1
    assert f"holds trial {theirs['trial_number']} of job {other.job_id}, not this job's" in (
        caplog.text
    )
    with ServerClient(server.url) as client:
        assert client.job_state(other.job_id or "")["trials"] == [theirs]


def test_eval_loss_as_higher_is_better_is_refused_unless_the_job_says_so() -> None:
    """The Trainer's own ``greater_is_better`` is False for a metric that ends in "loss"; a job
    left at ``higher_is_better_metric=True`` converged every run at its first evaluation."""
    spec = job(unique_id("hfloss"), target=0.9)
    with pytest.raises(ZeusBSOError, match="'eval_loss' is a loss"):
        ZeusBSOTrainerCallback("http://127.0.0.1:9", spec, metric="eval_loss")
    lower = spec.model_copy(update={"higher_is_better_metric": False, "target_metric": 0.2})
    assert ZeusBSOTrainerCallback("http://127.0.0.1:9", lower, metric="eval_loss").job == lower


def test_misconfigured_runs_leave_the_default_batch_size_untouched(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Three runs whose metric is not among the evaluation's raise at their first report and
    release their trials: the default is still what the next run gets."""
    spec = job(unique_id("hfmisconf"), target=0.999)
    for attempt in range(3):
        with pytest.raises(ZeusBSOError, match="metric 'eval_acc' is not among"):
            train(
                server.url,
                spec,
                tmp_path / str(attempt),
                epochs=1,
                callback_options={"metric": "eval_acc"},
            )
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    assert [t["status"] for t in state["trials"]] == ["released"] * 3
    assert state["next_run"]["batch_size"] == spec.default_batch_size


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ({"eval_strategy": "no"}, "eval_strategy='no': this run never evaluates"),
        (
            {"prediction_loss_only": True},  # the loss alone: an epoch trained, then refused
            r"prediction_loss_only=True\) evaluates the loss alone: 'eval_accuracy' is never",
        ),
    ],
    ids=["never-evaluates", "loss-alone"],
)
def test_a_run_that_never_evaluates_its_metric_is_refused_before_it_trains(
    server: ServerProcess, tmp_path: Path, option: dict[str, Any], said: str
) -> None:
    spec = job(unique_id("hfnoeval"), target=0.999)
    with pytest.raises(ZeusBSOError, match=said):
        train(server.url, spec, tmp_path, epochs=1, **option)
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    (trial,) = state["trials"]
    assert trial["status"] == "released"
    assert trial["epochs"] is None  # refused before it trained
    assert state["next_run"]["batch_size"] == spec.default_batch_size


class OwnLoaderTrainer(transformers.Trainer):  # type: ignore[misc]
    """A Trainer whose subclass builds its train DataLoader (a sampler of its own, say), as
    scripts do: at a size of its own (`FIXED`), or at the Trainer's (``_train_batch_size``)."""

    FIXED: int | None = 4

    def get_train_dataloader(self) -> Any:
        size = self._train_batch_size if self.FIXED is None else self.FIXED
        loader = torch.utils.data.DataLoader(
            self.train_dataset, batch_size=size, shuffle=True, collate_fn=self.data_collator
        )
        return self.accelerator.prepare(loader)


class TrainersSizeTrainer(OwnLoaderTrainer):
    FIXED = None


@pytest.mark.parametrize(
    ("options", "found", "said"),
    [
        # A subclass's get_train_dataloader() builds the loader at a size of its own.
        ({"trainer_class": OwnLoaderTrainer}, 4, "batch_size=self._train_batch_size"),
        # trainer.args.per_device_train_batch_size = callback.start() after it was built (the
        # callback added then: the Trainer's own size was never set).
        ({"set_after_built": 8, "added_later": True}, 8, "the Trainer took 8 from its"),
    ],
)
def test_a_train_dataloader_of_another_size_is_refused_before_it_trains(
    server: ServerProcess, tmp_path: Path, options: dict[str, Any], found: int, said: str
) -> None:
    """The Trainer's train DataLoader would train at another size than the server charges (4
    or 8, against the dispatched 16, silently): refused before a step, the trial released,
    saying what to change. A subclass that builds it at the Trainer's size trains as
    dispatched. Transformers 4's ``train()`` takes the size from its arguments again, so
    that a size set on them after the Trainer was built trains as dispatched there."""
    spec = job(unique_id("hfloader"), target=0.999)
    if "set_after_built" in options and trainer_rereads_its_batch_size():
        callback = train(server.url, spec, tmp_path, epochs=1, **options)
        assert callback.spy_sizes == [callback.batch_size]  # type: ignore[attr-defined]
        return
    with pytest.raises(ZeusBSOError) as refused:
        train(server.url, spec, tmp_path, epochs=1, **options)
    words = str(refused.value)
    size = spec.default_batch_size
    assert f"takes batches of {found} samples, but this run's batch size is {size}" in words
    assert said in words
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert (trial["status"], trial["epochs"]) == ("released", None)
    callback = train(server.url, spec, tmp_path, epochs=1, trainer_class=TrainersSizeTrainer)
    assert callback.spy_sizes == [callback.batch_size]  # type: ignore[attr-defined]


class HandSizedSchedule(transformers.Trainer):  # type: ignore[misc]
    """As older scripts build it: ``optimizers=(optimizer, scheduler)``, the schedule sized by
    the script's own arithmetic for the job's default, 16 (256 samples, two epochs)."""

    def __init__(self, *, model: Any, **options: Any) -> None:
        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
        scheduler = transformers.get_linear_schedule_with_warmup(optimizer, 2, 256 // 16 * 2)
        super().__init__(model=model, optimizers=(optimizer, scheduler), **options)


def test_a_schedule_sized_for_another_batch_size_is_refused_before_it_trains(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A schedule the script sized for 16 trains the first recurrence, at 16; the next, at the
    size the server explores, would decay to 0 half-way (8) or stop half-way down (32), while
    the server learnt the size's cost: refused before a step, the trial released, saying to
    let the Trainer build the schedule."""
    spec = job(unique_id("hfschedule"), target=0.6)
    first = train(server.url, spec, tmp_path, epochs=2, trainer_class=HandSizedSchedule)
    assert (first.batch_size, first.outcome.converged if first.outcome else None) == (16, True)
    with pytest.raises(ConfigurationError) as refused:
        train(server.url, spec, tmp_path, epochs=2, trainer_class=HandSizedSchedule)
    words = str(refused.value)
    assert "get_linear_schedule_with_warmup's length, 32 steps, does not fit the run" in words
    assert "create_scheduler(num_training_steps, optimizer)" in words
    with ServerClient(server.url) as client:
        trials = client.job_state(spec.job_id or "")["trials"]
    second = max(trials, key=lambda trial: trial["trial_number"])
    assert second["batch_size"] != 16
    assert (second["status"], second["epochs"]) == ("released", None)


def test_a_trainer_without_compute_metrics_is_told_to_give_it_one(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A Trainer without ``compute_metrics`` evaluates the loss alone: the first evaluation
    says so, and what to give it, beside the metrics it has."""
    spec = job(unique_id("hfnometrics"), target=0.999)
    with pytest.raises(ZeusBSOError) as refused:
        train(server.url, spec, tmp_path, epochs=1, compute_metrics=None)
    assert "metric 'eval_accuracy' is not among the evaluation metrics" in str(refused.value)
    assert "give it compute_metrics=... returning 'accuracy'" in str(refused.value)
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["status"] == "released"


def oom_recurrences(
    server_url: str, spec: JobSpec, tmp_path: Path, **options: Any
) -> list[ZeusBSOTrainerCallback]:
    """Recurrences of a model that runs out of memory above 8 samples a training batch, under
    `until_converged` (two attempts at most); each attempt's callback."""
    callbacks: list[ZeusBSOTrainerCallback] = []

    def recurrence() -> Any:
        callback = ZeusBSOTrainerCallback(
            server_url, spec, metric="eval_accuracy", energy_meter=EstimateMeter(100), **options
        )
        callbacks.append(callback)
        torch.manual_seed(0)
        micro = callback.start()
        args = training_arguments(
            tmp_path / f"out{len(callbacks)}",
            micro,
            6,
            gradient_accumulation_steps=callback.accumulation_steps,
        )
        trainer = oom_trainer(args, callback)
        trainer.train()
        return callback.outcome

    outcome = until_converged(recurrence, attempts=2)
    assert outcome is not None
    assert outcome is callbacks[-1].outcome
    return callbacks


def test_out_of_memory_is_infeasible_and_the_next_run_fits(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Batches above 8 run out of memory: the dispatched 16 is tried before training, marked
    infeasible, and `until_converged` starts the next run, at 8, which trains; 16 is never
    dispatched on these GPUs again."""
    spec = job(unique_id("hfoom"), target=0.5)
    callbacks = oom_recurrences(server.url, spec, tmp_path)
    outcome = callbacks[-1].outcome
    assert outcome is not None
    assert outcome.batch_size == 8
    first = callbacks[0].outcome
    assert first is not None
    assert (first.batch_size, first.reason) == (16, "out_of_memory")
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    assert sorted((t["batch_size"], t["status"]) for t in state["trials"]) == [
        (8, "reported"),
        (16, "infeasible"),
    ]
    assert list(state["memory_caps"].values()) == [16]
    next_run = state["next_run"]
    assert 16 not in (next_run["arms"] or [next_run["batch_size"]]), next_run


class Calls:
    training = 0


class CountingTrainer(transformers.Trainer):
    """A Trainer whose loss counts what it saw, as TRL's ``SFTTrainer`` counts tokens
    (``_total_train_tokens``) and keeps metrics (``_metrics``) in ``compute_loss``."""

    built: list[CountingTrainer] = []  # noqa: RUF012 - the test reads the one built last

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._total_train_samples = 0
        self._metrics: dict[str, dict[str, list[float]]] = {"train": {"samples": []}}
        self.calls = Calls()  # not plain data: what the check did stays here
        CountingTrainer.built[:] = [self]

    def compute_loss(
        self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        if model.training:
            self.calls.training += 1
            self._total_train_samples += len(inputs["input_ids"])
            self._metrics["train"]["samples"].append(float(len(inputs["input_ids"])))
        return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)


def test_the_memory_check_takes_the_trainers_loss_and_puts_back_what_it_counted(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The memory check's steps go through the Trainer's ``compute_loss`` (three calls before
    the epoch's), and what the loss counted in them is put back: the Trainer's count after one
    epoch is the epoch's samples, and its metrics hold the run's steps alone."""
    spec = job(unique_id("hfcounted"), target=0.999)
    train(server.url, spec, tmp_path, epochs=1, trainer_class=CountingTrainer)
    (trainer,) = CountingTrainer.built
    assert trainer.calls.training == 256 // 16 + 3  # the epoch's steps, and the check's three
    assert trainer._total_train_samples == 256  # the epoch's; the check's three steps not
    assert sum(trainer._metrics["train"]["samples"]) == 256
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["status"] in ("reported", "released")


class LoopStateLoss(transformers.Trainer):
    """A Trainer whose loss reads what its loop sets only once it trains."""

    def compute_loss(
        self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        if return_outputs:  # evaluation's
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        return loss / self.current_gradient_accumulation_steps


@pytest.mark.skipif(
    not loop_sets_accumulation_steps(),
    reason="this Transformers' loop sets no current_gradient_accumulation_steps (later 4.x on)",
)
def test_a_loss_that_reads_the_loops_state_is_tried_as_the_models(
    server: ServerProcess, tmp_path: Path
) -> None:
    """The memory check runs before the Trainer's loop: a ``compute_loss`` that reads what the
    loop sets (``current_gradient_accumulation_steps``) cannot run there. The check tries the
    model's forward instead, and the run trains: it is not failed by the check."""
    spec = job(unique_id("hflooploss"), target=0.999)
    train(server.url, spec, tmp_path, epochs=1, trainer_class=LoopStateLoss)
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["epochs"] == 1


def test_a_loss_that_divides_by_the_batchs_count_of_items_is_tried_as_the_trainers(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A ``compute_loss_func`` (Transformers' own way to write a loss) sums over the batch and
    divides by ``num_items_in_batch``, which the Trainer's loop counts from the labels. The
    memory check gives it the loop's count: its steps go through that loss (three calls with a
    count before the epoch's, none without), not through the model's forward alone."""
    counts: list[Any] = []

    def summed_loss(outputs: Any, labels: Any, num_items_in_batch: Any = None) -> Any:
        counts.append(num_items_in_batch)
        summed = torch.nn.functional.cross_entropy(outputs.logits, labels, reduction="sum")
        # Transformers 4's evaluation gives no count
        return summed / (len(labels) if num_items_in_batch is None else num_items_in_batch)

    spec = job(unique_id("hfitems"), target=0.999)
    trainer_class = functools.partial(transformers.Trainer, compute_loss_func=summed_loss)
    train(server.url, spec, tmp_path, epochs=1, trainer_class=trainer_class)
    trained = 3 + 256 // 16  # the check's steps and the epoch's; then its evaluation's
    assert [int(count) for count in counts[:trained]] == [16] * trained
    with ServerClient(server.url) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["epochs"] == 1


@pytest.mark.skipif(
    transformers_major() < 5,
    reason="Transformers 4's Trainer cannot step a model that FSDP shards in part, with or "
    "without the callback (its optimizer gets DTensor and Tensor parameters together)",
)
def test_a_model_sharded_by_fsdp_is_not_tried_in_memory_first(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The memory check's steps run the Trainer's model on each process alone; a model that
    FSDP shards (an Accelerate configuration's FSDP, ``fsdp=`` or ``deepspeed=`` in the
    arguments) holds only each process's shard of its parameters, gathered in collectives
    that one process cannot take alone. It is not tried, and the run says so; every training
    forward pass is the Trainer's (here ``fully_shard`` in a process group of one)."""
    from torch.distributed.fsdp import fully_shard

    spec = job(unique_id("hfsharded"), target=0.99)
    torch.manual_seed(0)
    model = tiny_bert()
    trained: list[bool] = []  # a training-mode forward pass: a step's
    model.register_forward_pre_hook(lambda module, _: trained.append(module.training))
    callback = ZeusBSOTrainerCallback(
        server.url, spec, energy_meter=EstimateMeter(100), metric="eval_accuracy"
    )
    args = training_arguments(tmp_path / "out", callback.start(), 1, save_strategy="no")
    with caplog.at_level(logging.INFO), process_group_of_one():
        fully_shard(model.bert.encoder.layer[0])
        trainer = transformers.Trainer(
            model=model,
            args=args,
            train_dataset=TokenDataset(64, 0),
            eval_dataset=TokenDataset(32, 1),
            compute_metrics=accuracy,
            callbacks=[callback],
        )
        trainer.train()
    assert sum(trained) == trainer.state.global_step > 0  # no step tried before
    said = f"batch size {callback.batch_size} is new to these GPUs, but its steps are not tried"
    assert said in caplog.text
    assert "FSDP shards the model" in caplog.text


def test_with_accumulation_out_of_memory_lowers_the_micro_batch_for_the_next_run(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Batches above 8 run out of memory; with ``max_micro_batch_size`` the dispatched 16 is not
    infeasible: the first run, tried before training, lowers these GPUs' cap and is released,
    and the next, started by `until_converged`, trains 16 as two micro-batches of 8
    (``gradient_accumulation_steps=2``)."""
    spec = job(unique_id("hfaccum"), target=0.5)
    callbacks = oom_recurrences(server.url, spec, tmp_path, max_micro_batch_size=16)
    outcome = callbacks[-1].outcome
    assert outcome is not None
    assert (outcome.batch_size, callbacks[-1].accumulation_steps) == (16, 2)
    with ServerClient(server.url) as client:
        state = client.job_state(spec.job_id or "")
    trials = sorted(state["trials"], key=lambda t: t["trial_number"])
    assert [(t["batch_size"], t["status"], t["accumulation_steps"]) for t in trials] == [
        (16, "released", None),
        (16, "reported", 2),
    ]
    assert list(state["memory_caps"].values()) == [16]


def test_without_a_server_the_run_trains_at_the_default_and_fails_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    spec = job(unique_id("hfnoserver"), target=0.999)
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ZeusBSOTrainFailError, match="did not reach the target") as raised:
        train(url, spec, tmp_path, epochs=2, callback_options={"raise_if_unconverged": True})
    outcome = raised.value.outcome
    assert outcome is not None
    # Its 2 epochs end before the job's max_epochs (6): it ended early, and without a server.
    assert (outcome.reason, outcome.offline, outcome.batch_size, outcome.trial_number) == (
        "ended_early",
        True,
        spec.default_batch_size,
        None,
    )
    assert "zeus-bso: batch size 16 ended at epoch 2 of 6" in capfd.readouterr().err


def test_a_checkpoint_found_while_the_server_is_away_is_continued_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last checkpoint in ``output_dir`` holds an open trial of the job at 32, and the
    server cannot be reached: whether the trial is still open cannot be asked, so the run
    continues it without the server, at its batch size, as a run given the checkpoint does
    (it trained at the job's default, 16, as a new trial)."""
    monkeypatch.setenv("ZEUS_BSO_CACHE_DIR", str(tmp_path / "cache"))
    spec = job(unique_id("hfaway"), target=0.999)
    saved = tmp_path / "out" / "checkpoint-5"
    saved.mkdir(parents=True)
    trial = {"job_id": spec.job_id, "batch_size": 32, "trial_number": 3}
    progress = {"current_epoch": 1, "time": 1.0, "energy": 10.0}
    (saved / "zeus_bso_trial.json").write_text(json.dumps({"trial": trial, **progress}))
    url = f"http://127.0.0.1:{free_port()}"
    callback = train(url, spec, tmp_path, epochs=1, batch_size=8)  # no start(): it looks
    assert callback.spy_sizes == [32]  # type: ignore[attr-defined]
    outcome = callback.outcome
    assert outcome is not None
    assert (outcome.offline, outcome.batch_size) == (True, 32)


class RateRecorder(transformers.TrainerCallback):  # type: ignore[misc]
    """The rate each optimizer step took (a step hook registered after zeus-bso's) over the
    schedule's rate then (what the param group holds): the factor each step trained at."""

    def __init__(self) -> None:
        self.taken: list[float] = []
        self.schedule: list[float] = []

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        inner = getattr(kwargs["optimizer"], "optimizer", kwargs["optimizer"])
        if not self.schedule:
            inner.register_step_pre_hook(
                lambda stepped, *_: self.taken.append(stepped.param_groups[0]["lr"])
            )
        self.schedule.append(inner.param_groups[0]["lr"])

    @property
    def factors(self) -> list[float]:
        pairs = zip(self.taken, self.schedule, strict=False)  # a step the Trainer skipped
        return [taken / rate for taken, rate in pairs if rate]


class ReportedLogs(transformers.TrainerCallback):  # type: ignore[misc]
    """What a reporting integration receives: the logs of each ``on_log`` (a copy)."""

    def __init__(self) -> None:
        self.logs: list[dict[str, float]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
        self.logs.append(dict(logs or {}))


def test_the_trainers_learning_rate_and_warm_up_follow_the_batch_size(
    server: ServerProcess, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Batch size 16 against the reference 4, square root (AdamW): every step takes twice the
    rate of the schedule (a warm-up, then linear decay) of TrainingArguments.learning_rate,
    and a fixed warm-up of 8 steps tuned at 4 warms up over the same samples: 2 steps."""
    spec = job(unique_id("hflr"), target=0.999)
    recorder, reported = RateRecorder(), ReportedLogs()
    with caplog.at_level(logging.INFO, logger="zeus_bso"):
        callback = train(
            server.url,
            spec,
            tmp_path,
            epochs=1,
            ahead=[recorder, reported],
            callback_options={"lr_rule": "auto", "reference_batch_size": 4},
            learning_rate=1e-3,
            warmup_steps=8,
            logging_strategy="steps",
            logging_steps=2,
        )
    assert len(recorder.factors) > 5  # every step but the warm-up's first, at rate 0
    assert recorder.factors == pytest.approx([2.0] * len(recorder.factors))
    assert (
        "warmup_steps=8 (tuned at the reference batch size 4): at batch size 16 the warm-up"
        " takes 2 steps" in caplog.text
    )
    schedule = recorder.schedule  # the schedule's rate at each step: its peak after 2 steps
    assert schedule.index(max(schedule)) == 2
    # What a reporting integration (W&B, TensorBoard...) and the log history receive: beside
    # the schedule's learning_rate, the rate the steps took.
    for logs in (reported.logs, callback.log_history):  # type: ignore[attr-defined]
        rates = [entry for entry in logs if "learning_rate" in entry]
        assert len(rates) > 2
        for entry in rates:
            assert entry["bso_lr"] == pytest.approx(2.0 * entry["learning_rate"])


def test_a_resumed_run_keeps_its_scaled_rates(server: ServerProcess, tmp_path: Path) -> None:
    spec = job(unique_id("hflrresume"), target=0.999)
    scaled = {"lr_rule": "sqrt", "reference_batch_size": 4}
    first, again = RateRecorder(), RateRecorder()
    train(server.url, spec, tmp_path, 2, save=True, ahead=[first], callback_options=scaled)
    last = max((tmp_path / "out").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    train(server.url, spec, tmp_path, 3, resume=last, ahead=[again], callback_options=scaled)
    assert first.factors == pytest.approx([2.0] * len(first.factors))  # sqrt(16 / 4)
    assert again.factors  # the resumed steps, at the factor once, not twice
    assert again.factors == pytest.approx([2.0] * len(again.factors))


class CtrlC(transformers.TrainerCallback):  # type: ignore[misc]
    """Ctrl-C in the second epoch, as in a notebook's cell (IPython catches it; the Trainer
    calls no callback on it)."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.epoch is not None and state.epoch > 1.2:
            raise KeyboardInterrupt


def test_a_batch_size_larger_than_the_data_with_drop_last_is_refused_when_the_trainer_is_built(
    server: ServerProcess, tmp_path: Path
) -> None:
    """16 samples a step over 12 samples of data, the short batch dropped
    (``dataloader_drop_last=True``): no step would train. HF would raise at ``train()`` that
    ``max_steps`` must be set; the callback refuses it when the Trainer is built, saying which
    sizes the data holds, and its trial is released. The same data without drop_last trains."""
    spec = job(unique_id("hfdroplast"), target=0.0)
    for drop_last in (True, False):
        callback = ZeusBSOTrainerCallback(
            server.url, spec, energy_meter=EstimateMeter(100), metric="eval_accuracy"
        )
        args = training_arguments(
            tmp_path / "out", callback.start(), 1, dataloader_drop_last=drop_last
        )

        def built(args: Any = args, callback: Any = callback) -> Any:
            return transformers.Trainer(
                model=tiny_bert(),
                args=args,
                train_dataset=TokenDataset(12, 0),
                eval_dataset=TokenDataset(16, 1),
                compute_metrics=accuracy,
                callbacks=[callback],
            )

        if drop_last:
            with pytest.raises(ConfigurationError, match="batch size 16 makes no training batch"):
                built()
        else:
            built().train()
    with ServerClient(server.url) as client:
        trials = client.trials(spec.job_id or "")
    assert [(t.batch_size, t.status) for t in trials] == [(16, "released"), (16, "reported")]


class RaisesInTheSecondEpoch(transformers.TrainerCallback):  # type: ignore[misc]
    """Raises ``error`` in the second epoch (the Trainer calls no callback on it)."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.epoch is not None and state.epoch > 1.2:
            raise self.error


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 MiB"), "infeasible"),
        (KeyError("accuracy"), "failed"),
    ],
)
def test_a_run_whose_notebook_cell_raised_is_judged_by_its_error_at_the_next_run(
    server: ServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    error: BaseException,
    status: str,
) -> None:
    """A Trainer run whose cell raised in a notebook (IPython sets the error aside as
    ``sys.last_value``; the Trainer calls no callback on it) stays open until the next run of
    the job in the kernel, which ends it by that error, as an exit would: out of memory marks
    the size infeasible there, so the next run gets a smaller one, where it was released and
    the same size dispatched again."""
    spec = job(unique_id("hfcellraised"), target=0.999)
    monkeypatch.setattr(sys, "last_value", ValueError("an earlier cell's"), raising=False)
    with pytest.raises(type(error)):
        train(server.url, spec, tmp_path / "first", epochs=6, ahead=[RaisesInTheSecondEpoch(error)])
    monkeypatch.setattr(sys, "last_value", error)  # as IPython keeps the cell's error
    second = train(server.url, spec, tmp_path / "second", epochs=6)
    with ServerClient(server.url) as client:
        trials = client.trials(spec.job_id or "")
    assert [t.status for t in trials] == [status, "reported"]
    first, then = trials
    if status == "infeasible":  # never dispatched at that size on these GPUs again
        assert then.batch_size < first.batch_size
    else:
        assert first.message == "KeyError: 'accuracy'"
    assert second.outcome is not None


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 MiB"), "infeasible"),
        (KeyError("accuracy"), "failed"),
    ],
)
def test_a_with_block_ends_a_run_that_raised_in_a_process_that_goes_on(
    server: ServerProcess, tmp_path: Path, error: BaseException, status: str
) -> None:
    """A worker that catches a failed ``trainer.train()`` and goes on (the Trainer calls no
    callback on the error): ``with callback:`` around it ends the run by its error when the
    block ends, as an exit would, with no later run of the job needed (out of memory: its size
    infeasible on these GPUs). Without the block, the run stayed open, its trial in flight,
    until the process exited or the job's next run in it started."""
    spec = job(unique_id("hfblock"), target=0.999)
    raising = [RaisesInTheSecondEpoch(error)]
    with pytest.raises(type(error)):
        train(server.url, spec, tmp_path, epochs=6, ahead=raising, block=True)
    with ServerClient(server.url) as client:
        (ended,) = client.trials(spec.job_id or "")
    assert ended.status == status
    if status == "failed":
        assert ended.message == "KeyError: 'accuracy'"


@pytest.mark.parametrize("in_a_notebook", [False, True])
def test_a_run_whose_train_raised_unheard_is_ended_by_the_next_run_of_any_job(
    server: ServerProcess,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    in_a_notebook: bool,
) -> None:
    """A worker (or a notebook) that caught a failed ``trainer.train()`` without ``with
    callback:`` and goes on to another job: the next run's ``start()`` ends the first, whose
    training began and whose Trainer loop is no longer running, saying to use the block. In a
    notebook, by the error IPython kept (out of memory: infeasible; here a KeyError: failed);
    else as interrupted (released). Before, it stayed open until the process exited."""
    first = job(unique_id("hfunheard"), target=0.999)
    error = KeyError("accuracy")
    monkeypatch.setattr(sys, "last_value", ValueError("an earlier cell's"), raising=False)
    with pytest.raises(KeyError):
        train(server.url, first, tmp_path / "a", epochs=6, ahead=[RaisesInTheSecondEpoch(error)])
    if in_a_notebook:
        monkeypatch.setattr(sys, "last_value", error)  # as IPython keeps the cell's error
    with ServerClient(server.url) as client:
        assert [t.status for t in client.trials(first.job_id or "")] == ["dispatched"]
    other = job(unique_id("hfunheard"), target=0.999)
    with caplog.at_level(logging.WARNING, logger="zeus_bso"):
        train(server.url, other, tmp_path / "b", epochs=1, block=True)
    with ServerClient(server.url) as client:
        (ended,) = client.trials(first.job_id or "")
    assert ended.status == ("failed" if in_a_notebook else "released")
    said = " ".join(caplog.text.split())
    assert f"of job {first.job_id} was still open: its trainer.train() ended without" in said
    assert "put `with callback:` around the training" in said


def test_a_run_of_a_model_an_earlier_run_of_the_job_trained_is_refused(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A notebook's training cell run again with the model an earlier cell built and trained:
    the run would start trained. It is refused when training starts, before any step, its
    trial released; the model built again trains. (No cost stops a run early here: on a loaded
    machine an epoch's time stopped the fourth run after its first, before its error.)"""
    stops = {"beta_knob": None, "prune_cost_ratio": None}
    spec = job(unique_id("hfretrained"), target=0.999).model_copy(update=stops)
    model = tiny_bert()
    train(server.url, spec, tmp_path / "a", epochs=6, model=model)
    with pytest.raises(ConfigurationError, match="build the model again for each run"):
        train(server.url, spec, tmp_path / "b", epochs=6, model=model)
    train(server.url, spec, tmp_path / "c", epochs=6)
    # A run that raised after its first report (ended by its with block) left it partly
    # trained: the same.
    raised, raising = tiny_bert(), [RaisesInTheSecondEpoch(KeyError("accuracy"))]
    with pytest.raises(KeyError):
        train(server.url, spec, tmp_path / "d", epochs=6, model=raised, ahead=raising, block=True)
    with pytest.raises(ConfigurationError, match="build the model again for each run"):
        train(server.url, spec, tmp_path / "e", epochs=6, model=raised)
    with ServerClient(server.url) as client:
        trials = client.trials(spec.job_id or "")
    statuses = [t.status for t in trials]
    assert statuses == ["reported", "released", "reported", "failed", "released"]


class PausesInTheFirstEpoch(transformers.TrainerCallback):  # type: ignore[misc]
    """Says it is training, then waits for ``go`` at the first epoch's end."""

    def __init__(self) -> None:
        self.training, self.go = threading.Event(), threading.Event()

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not self.go.is_set():
            self.training.set()
            assert self.go.wait(60)


def test_a_run_training_on_another_thread_is_left_alone_by_the_next_start(
    server: ServerProcess, tmp_path: Path
) -> None:
    """A run training on another thread (two jobs trained side by side in one process) is
    alive, its Trainer's frames on that thread's stack: another run's ``start()`` leaves it to
    train, and it ends as it would have."""
    first, second = (job(unique_id("hfthreads"), target=0.999) for _ in range(2))
    pause = PausesInTheFirstEpoch()
    trained: list[Any] = []
    worker = threading.Thread(
        target=lambda: trained.append(train(server.url, first, tmp_path, epochs=6, ahead=[pause]))
    )
    worker.start()
    try:
        assert pause.training.wait(120)
        other = ZeusBSOTrainerCallback(
            server.url, second, energy_meter=EstimateMeter(100), metric="accuracy"
        )
        with other:
            other.start()
    finally:
        pause.go.set()
        worker.join(120)
    (outcome,) = trained
    assert outcome.outcome is not None  # it ended as its own run would, not from outside
    with ServerClient(server.url) as client:
        (ran,) = client.trials(first.job_id or "")
    assert ran.status == "reported"


def test_a_run_that_has_not_begun_training_is_left_open_by_the_next_start(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Two runs asked for before either trains (one script, two models): the second's
    ``start()`` leaves the first open, its training yet to come."""
    first, second = (job(unique_id("hfnotbegun"), target=0.999) for _ in range(2))
    a, b = (
        ZeusBSOTrainerCallback(server.url, spec, energy_meter=EstimateMeter(100), metric="accuracy")
        for spec in (first, second)
    )
    with a, b:
        a.start()
        b.start()
        with ServerClient(server.url) as client:
            assert [t.status for t in client.trials(first.job_id or "")] == ["dispatched"]


def test_a_with_block_around_a_run_that_never_trained_releases_it(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``start()`` asked for a trial, then the Trainer's arguments failed to build (or the
    block ended before ``train()``): the block's end releases the trial, charging nothing."""
    spec = job(unique_id("hfblocknotrain"), target=0.999)
    callback = ZeusBSOTrainerCallback(
        server.url, spec, energy_meter=EstimateMeter(100), metric="eval_accuracy"
    )

    def script() -> None:
        with callback:
            callback.start()
            raise ValueError("a typo in the script, before the Trainer")

    with pytest.raises(ValueError, match="a typo"):
        script()
    with callback:
        pass  # ended: nothing more to do
    clean = ZeusBSOTrainerCallback(
        server.url, spec, energy_meter=EstimateMeter(100), metric="eval_accuracy"
    )
    with clean:
        clean.start()
    with ServerClient(server.url) as client:
        trials = client.trials(spec.job_id or "")
    assert [t.status for t in trials] == ["released", "released"]
    assert trials[1].message is not None
    assert "with block ended before trainer.train()" in trials[1].message


def test_another_cells_error_does_not_judge_the_run_it_follows(
    server: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run stopped by Ctrl-C, then a cell of the notebook's own that raised (through no code
    of the training's): the next run ends the first as interrupted, charging nothing."""
    spec = job(unique_id("hfothercell"), target=0.999)
    with pytest.raises(KeyboardInterrupt):
        train(server.url, spec, tmp_path / "first", epochs=6, ahead=[CtrlC()])
    try:
        {}["a typo"]  # the cell's own error
    except KeyError as cells:
        monkeypatch.setattr(sys, "last_value", cells, raising=False)
    train(server.url, spec, tmp_path / "second", epochs=6)
    with ServerClient(server.url) as client:
        trials = client.trials(spec.job_id or "")
    assert [t.status for t in trials] == ["released", "reported"]


def test_a_run_interrupted_in_a_notebook_is_ended_by_the_next_run(
    server: ServerProcess, tmp_path: Path
) -> None:
    """Nothing ends a Trainer run that Ctrl-C stopped in a notebook, and its heartbeat would
    keep its trial open (an exploration in flight) until the kernel exits: the next run of the
    job in the process ends it as interrupted, which charges its batch size nothing."""
    spec = job(unique_id("hfnotebook"), target=0.999)
    with pytest.raises(KeyboardInterrupt):
        train(server.url, spec, tmp_path / "first", epochs=6, ahead=[CtrlC()])
    with ServerClient(server.url) as client:
        (first,) = client.trials(spec.job_id or "")
    assert (first.status, first.epochs) == ("dispatched", 1)  # left open, as in a notebook
    second = train(server.url, spec, tmp_path / "second", epochs=6)
    with ServerClient(server.url) as client:
        trials = client.trials(spec.job_id or "")
    assert [t.status for t in trials] == ["released", "reported"]
    assert trials[0].epochs == 1
    assert trials[1].batch_size == first.batch_size  # nothing was charged: the default
    assert second.outcome is not None
