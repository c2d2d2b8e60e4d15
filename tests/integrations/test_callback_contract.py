"""The Lightning and Hugging Face callbacks pass the callback adapters' contract
(`zeus_bso.testing.CallbackAdapterContract`): the same scripted fits, through each framework's
real trainer on the CPU, against the suite's real server."""

from __future__ import annotations

import functools
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the callbacks need torch (pip install torch)")
pl = pytest.importorskip("lightning.pytorch", reason="pip install 'zeus-bso[lightning]'")
transformers = pytest.importorskip("transformers", reason="pip install 'zeus-bso[hf]'")

from tests.helpers import ServerProcess  # noqa: E402
from tests.integrations.lightning_models import make_data, quiet_trainer_options  # noqa: E402
from tests.integrations.test_huggingface import (  # noqa: E402
    TokenDataset,
    runs_out_of_memory_above,
    tiny_bert,
    training_arguments,
)
from zeus_bso.energy import EstimateMeter  # noqa: E402
from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback  # noqa: E402
from zeus_bso.integrations.lightning import ZeusBSOCallback  # noqa: E402
from zeus_bso.testing import (  # noqa: E402
    CallbackAdapterContract,
    FitResult,
    MakeCallback,
    RunFit,
    ScriptedFit,
)


def out_of_memory(samples: int) -> Any:
    return torch.cuda.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {samples} MiB")


class ScriptedModule(pl.LightningModule):
    """A tiny classifier whose validation metric is the script's for each epoch."""

    def __init__(self, scripted: ScriptedFit) -> None:
        super().__init__()
        self.batch_size = 4
        self.layer = torch.nn.Linear(8, 2)
        self.scripted = scripted
        self.sizes: list[int] = []
        self.rates: list[float] = []

    def train_dataloader(self) -> Any:
        data = make_data(self.scripted.samples, 0)
        return torch.utils.data.DataLoader(data, batch_size=self.batch_size)

    def val_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(make_data(32, 1), batch_size=32)

    def training_step(self, batch: Any, _: int) -> Any:
        x, y = batch
        limit = self.scripted.out_of_memory_above
        if limit is not None and len(x) > limit:
            raise out_of_memory(len(x))
        if self.scripted.step is not None:
            self.scripted.step()
        loss = torch.nn.functional.cross_entropy(self.layer(x), y)
        self.sizes.append(len(x))
        return loss

    def validation_step(self, batch: Any, _: int) -> None:
        self.log("val_metric", self.scripted.metrics[self.current_epoch])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.scripted.learning_rate)

    def on_train_start(self) -> None:
        # After the callback's own on_train_start (Lightning runs callbacks' hooks first).
        for optimizer in self.trainer.optimizers:
            optimizer.register_step_pre_hook(
                lambda o, *_: self.rates.append(float(o.param_groups[0]["lr"]))
            )


class RecordingLogger(pl.loggers.Logger):  # type: ignore[misc]
    """Keeps what the Trainer logs, as a logging integration would receive it."""

    def __init__(self) -> None:
        super().__init__()
        self.logged: list[dict[str, float]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        self.logged.append(dict(metrics))


def meter_of(scripted: ScriptedFit) -> EstimateMeter | None:
    """The script's estimate, or None where power limits are optimized: the callback's own
    NVML meter (the test double's), which measures each limit's draw."""
    return EstimateMeter(100) if scripted.power_limit == "off" else None


def fit_with_lightning(scripted: ScriptedFit) -> FitResult:
    pl.seed_everything(0, verbose=False)
    module = ScriptedModule(scripted)
    callback = ZeusBSOCallback(
        scripted.server_url,
        scripted.job,
        monitor="val_metric",
        energy_meter=meter_of(scripted),
        memory_check_steps=scripted.memory_check_steps,
        lr_rule=scripted.lr_rule,
        reference_batch_size=scripted.reference_batch_size,
        power_limit=scripted.power_limit,
    )
    logger = RecordingLogger()
    options = quiet_trainer_options(scripted.output_dir) | {"logger": logger}
    options["accumulate_grad_batches"] = scripted.accumulation
    callbacks: list[Any] = [callback]
    if scripted.checkpoint:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=scripted.output_dir, save_last=True))
        options["enable_checkpointing"] = True
    epochs = scripted.epochs or len(scripted.metrics)
    trainer = pl.Trainer(callbacks=callbacks, max_epochs=epochs, **options)
    last = scripted.output_dir / "last.ckpt"
    trainer.fit(module, ckpt_path=str(last) if scripted.resume else None)
    return FitResult(
        epochs=trainer.current_epoch,
        batch_sizes=module.sizes,
        outcome=callback.outcome,
        logged_costs=[float(v["bso/cost"]) for v in logger.logged if "bso/cost" in v],
        rates=module.rates,
    )


def recording_sizes(model: Any, sizes: list[int], step: Any = None) -> Any:
    """``model``, whose training forward calls ``step`` first (if any) and notes each batch it
    ran through."""
    forward = model.forward

    @functools.wraps(forward)  # the Trainer keeps the dataset columns its signature names
    def recorded(*args: Any, **kwargs: Any) -> Any:
        if model.training and step is not None:
            step()
        out = forward(*args, **kwargs)
        if model.training:
            sizes.append(kwargs["input_ids"].shape[0])
        return out

    model.forward = recorded
    return model


def limited(model: Any, limit: int | None) -> Any:
    """``model``, whose training forward runs out of memory above ``limit`` samples (None:
    never)."""
    return model if limit is None else runs_out_of_memory_above(model, limit)


class RecordingRates(transformers.TrainerCallback):  # type: ignore[misc]
    """Notes the rate each optimizer step takes: a step pre-hook registered when training
    begins, after the zeus-bso callback's (which the Trainer runs first)."""

    def __init__(self) -> None:
        self.rates: list[float] = []

    def on_train_begin(self, *_: Any, optimizer: Any = None, **__: Any) -> None:
        inner = getattr(optimizer, "optimizer", optimizer)  # inside Accelerate's wrapper
        inner.register_step_pre_hook(
            lambda o, *_: self.rates.append(float(o.param_groups[0]["lr"]))
        )


def fit_with_hugging_face(scripted: ScriptedFit) -> FitResult:
    torch.manual_seed(0)
    callback = ZeusBSOTrainerCallback(
        scripted.server_url,
        scripted.job,
        metric="eval_accuracy",
        energy_meter=meter_of(scripted),
        memory_check_steps=scripted.memory_check_steps,
        power_limit=scripted.power_limit,
        resume_from_checkpoint=scripted.resume or None,
        output_dir=scripted.output_dir,
        lr_rule=scripted.lr_rule,
        reference_batch_size=scripted.reference_batch_size,
    )
    sizes: list[int] = []
    args = training_arguments(
        scripted.output_dir,
        callback.start(),
        scripted.epochs or len(scripted.metrics),
        gradient_accumulation_steps=scripted.accumulation,
        learning_rate=scripted.learning_rate,
        lr_scheduler_type="constant",
        save_strategy="epoch" if scripted.checkpoint else "no",
    )
    rates = RecordingRates()
    trainer = transformers.Trainer(
        model=recording_sizes(
            limited(tiny_bert(), scripted.out_of_memory_above), sizes, scripted.step
        ),
        args=args,
        train_dataset=TokenDataset(scripted.samples, 0),
        eval_dataset=TokenDataset(32, 1),
        callbacks=[callback, rates],
    )
    # Each epoch's evaluation takes the script's metric of that epoch (the Trainer's count
    # goes on from a resumed checkpoint's).
    trainer.compute_metrics = lambda _: {
        "accuracy": scripted.metrics[round(trainer.state.epoch or 1) - 1]
    }
    trainer.train(resume_from_checkpoint=scripted.resume or None)
    return FitResult(
        epochs=round(trainer.state.epoch or 0),
        batch_sizes=sizes,
        outcome=callback.outcome,
        logged_costs=[e["bso/cost"] for e in trainer.state.log_history if "bso/cost" in e],
        rates=rates.rates,
    )


class OnTheSuitesServer(CallbackAdapterContract):
    """The contract against the suite's SQLite server (not one of its own)."""

    @pytest.fixture(scope="class")
    @classmethod
    def server_url(cls, sqlite_server: ServerProcess) -> str:
        return sqlite_server.url


class TestLightningCallback(OnTheSuitesServer):
    @pytest.fixture
    def fit(self) -> RunFit:
        return fit_with_lightning

    @pytest.fixture
    def make_callback(self) -> MakeCallback:
        return lambda url, job, **options: ZeusBSOCallback(
            url, job, monitor="val_metric", **options
        )


class TestHuggingFaceCallback(OnTheSuitesServer):
    @pytest.fixture
    def fit(self) -> RunFit:
        return fit_with_hugging_face

    @pytest.fixture
    def make_callback(self) -> MakeCallback:
        return lambda url, job, **options: ZeusBSOTrainerCallback(url, job, **options)
