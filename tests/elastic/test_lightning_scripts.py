"""`ElasticBatchSizeCallback` under Lightning scripts written the way the ecosystem writes them: a
schedule sized in ``configure_optimizers`` from ``trainer.estimated_stepping_batches`` and stepped
each optimizer step, a DataLoader given to ``trainer.fit``, a fit resumed from a checkpoint. Each
with a real Trainer on the CPU."""

from __future__ import annotations

import csv
import logging
import math
from pathlib import Path
from typing import Any

import pytest

pl = pytest.importorskip("lightning.pytorch", reason="pip install 'zeus-bso[lightning]'")
torch = pytest.importorskip("torch", reason="pip install 'zeus-bso[lightning]'")

from tests.integrations.lightning_models import quiet_trainer_options  # noqa: E402
from zeus_bso.elastic import ElasticBatchSize, ElasticBatchSizeCallback  # noqa: E402
from zeus_bso.elastic.schedules import Progress, follow  # noqa: E402
from zeus_bso.errors import ZeusBSOError  # noqa: E402

EPOCHS = 6
SAMPLES = 2000  # no multiple of the larger sizes: epochs end on a short batch


def classification(n: int = SAMPLES) -> Any:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 12, generator=g)
    return torch.utils.data.TensorDataset(x, (x[:, 0] + 0.3 * x[:, 1] > 0).long())


class OneCycle(pl.LightningModule):  # type: ignore[misc]
    """As tutorials write it: the batch size in hparams (32, not the elastic's first size), a
    one-cycle schedule over ``estimated_stepping_batches``, stepped each optimizer step."""

    def __init__(self, batch_size: int = 32, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2)
        )
        self.data = classification()
        self.first_batches: list[int] = []  # the first batch's size, each epoch
        self.total_steps = 0

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(
            self.data, batch_size=self.hparams.batch_size, shuffle=True
        )

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        if batch_idx == 0:
            self.first_batches.append(len(x))
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        self.total_steps = int(self.trainer.estimated_stepping_batches)
        schedule = torch.optim.lr_scheduler.OneCycleLR(
            optimizer, max_lr=self.hparams.lr, total_steps=self.total_steps
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class Doubling(ElasticBatchSize):
    """Doubles the batch each epoch, up to its bounds: what these tests hold (where the size
    goes, how the schedules follow it) does not hang on the measured throughput, which a busy
    machine changes, that the goodput's choice reads."""

    def get_local_bsz(self) -> int:
        if self.choice.global_batch * 2 <= (self.max_batch_size or 0):
            self.update_scale(self.scale * 2)
        return self.choice.local_bsz


def elastic(rule: str = "linear") -> ElasticBatchSize:
    return Doubling(
        initial_batch_size=16, max_batch_size=512, local_bsz_bounds=(8, 256), lr_rule=rule
    )


def fit(
    model: Any,
    ebs: ElasticBatchSize,
    tmp_path: Any,
    *callbacks: Any,
    loader: Any = None,
    ckpt_path: Any = None,
    **options: Any,
) -> Any:
    torch.manual_seed(0)
    trainer = pl.Trainer(
        max_epochs=options.pop("max_epochs", EPOCHS),
        callbacks=[ElasticBatchSizeCallback(ebs), *callbacks],
        reload_dataloaders_every_n_epochs=1,
        **(quiet_trainer_options(tmp_path) | options),
    )
    trainer.fit(model, loader, ckpt_path=ckpt_path)
    return trainer


def test_the_first_epoch_trains_the_elastic_size_that_the_schedule_is_sized_for(
    tmp_path: Any,
) -> None:
    # estimated_stepping_batches builds the first epoch's DataLoader inside
    # configure_optimizers: the callback sets the size and accumulation before it (in setup),
    # not at the fit's start, when that DataLoader held the module's 32.
    ebs = elastic()
    model = OneCycle()
    fit(model, ebs, tmp_path)
    assert model.first_batches[0] == 8  # the initial 16 as two micro-batches of 8
    assert model.total_steps == EPOCHS * SAMPLES // 16  # sized at 16 a step, accumulation too


def test_a_schedule_stepped_each_step_ends_with_the_training_as_the_batch_grows(
    tmp_path: Any, recwarn: pytest.WarningsRecorder
) -> None:
    ebs = elastic("linear")
    model = OneCycle()
    trainer = fit(model, ebs, tmp_path)
    assert len(set(model.first_batches)) > 1  # it grew
    schedule = trainer.lr_scheduler_configs[0].scheduler
    # Stepped once an optimizer step, it would stand at the steps taken, far short of its end.
    assert trainer.global_step < 0.7 * model.total_steps
    # Stepped by each step's samples (the linear rule), it ends where the training does: each
    # epoch is SAMPLES / 16 steps of the initial size, less at most one for a short last batch.
    assert model.total_steps - EPOCHS <= schedule.last_epoch <= model.total_steps
    assert schedule.get_last_lr()[0] < 0.01 * model.hparams.lr  # annealed
    # The wrapped step still tells the schedule that the optimizer stepped.
    assert not [w for w in recwarn if "optimizer.step()" in str(w.message)]


def test_under_adascale_the_schedule_stands_at_the_runs_scale_invariant_progress(
    tmp_path: Any,
) -> None:
    ebs = elastic("adascale")
    model = OneCycle()
    trainer = fit(model, ebs, tmp_path)
    schedule = trainer.lr_scheduler_configs[0].scheduler
    worth = ebs.schedule_progress.worth
    assert trainer.global_step < worth < model.total_steps  # gains between 1 and the scale
    assert math.floor(worth) - 1 <= schedule.last_epoch <= math.floor(worth) + 1
    assert worth <= ebs.progress + 1e-9  # AdaScale's progress, less short batches' part


def test_only_whole_micro_batches_are_timed_for_the_throughput(tmp_path: Any) -> None:
    # An epoch's last batch is short where the size does not divide the data: its time says
    # nothing of the size's, and it was timed as a whole one.
    ebs, model = elastic(), OneCycle()
    fit(model, ebs, tmp_path)
    timed = {size: len(times) for size, times in ebs.throughput._samples.items()}
    assert timed == {size: SAMPLES // size for size in model.first_batches}
    assert any(SAMPLES % size for size in model.first_batches)  # short batches were there


class WithReplay(OneCycle):
    """Two train DataLoaders that Lightning combines, as continual learning trains: a replay
    of old data at a fixed size (listed first, and shorter), and the new data at the elastic's
    sizes."""

    def train_dataloader(self) -> Any:
        replay = torch.utils.data.DataLoader(classification(40), batch_size=8)
        return [replay, super().train_dataloader()]

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        (old_x, old_y), (x, y) = batch
        return super().training_step((torch.cat([x, old_x]), torch.cat([y, old_y])), batch_idx)


def test_with_a_replay_dataloader_beside_it_the_elastic_sizes_are_timed_and_counted(
    tmp_path: Any,
) -> None:
    # The batch's first part, the replay's 8, was read as the micro-batch: no size was ever
    # timed whole, and the schedules moved by 8 samples a micro-batch.
    ebs, model = elastic(), WithReplay()
    fit(model, ebs, tmp_path)
    sizes = [size - 8 for size in model.first_batches]
    timed = {size: len(times) for size, times in ebs.throughput._samples.items()}
    assert timed == {size: SAMPLES // size for size in sizes}
    # Under the linear rule a step is worth its samples over the initial 16's: every new one.
    assert ebs.schedule_progress.worth == pytest.approx(EPOCHS * SAMPLES / 16)


class FixedSize(OneCycle):
    """A DataLoader of a fixed size, which no size the callback sets changes."""

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.data, batch_size=16, shuffle=True)


def test_a_dataloader_that_ignores_the_size_is_refused_before_a_step(tmp_path: Any) -> None:
    # It trained 32 samples a step (16, accumulated twice) while the rate was scaled for the
    # elastic's 16, 32, 64... and the noise was read as of those sizes.
    ebs, model = elastic(), FixedSize()
    with pytest.raises(ZeusBSOError, match="epoch's first training batch has 16 samples, but "):
        fit(model, ebs, tmp_path)
    assert model.first_batches == []  # no step took it
    assert ebs.schedule_progress.steps == 0


class KeepsItsLoader(OneCycle):
    """Builds its DataLoader from the size at its first call and returns that one after."""

    kept: Any = None

    def train_dataloader(self) -> Any:
        if self.kept is None:
            self.kept = super().train_dataloader()
        return self.kept


def test_a_dataloader_kept_from_the_first_epoch_is_named_at_the_second(tmp_path: Any) -> None:
    # Each epoch Lightning asks train_dataloader() for the DataLoader again; the one kept from
    # the first epoch's 8 would train the second's 16 at 8 while the rate is scaled for 16.
    ebs, model = elastic(), KeepsItsLoader()
    with pytest.raises(ZeusBSOError, match="returned the DataLoader it built at 8") as refused:
        fit(model, ebs, tmp_path)
    assert "each epoch, as reload_dataloaders_every_n_epochs=1 has it" in str(refused.value)
    assert model.first_batches == [8]  # the first epoch trained; no step of the second


class SizeFromHparams(OneCycle):
    """Its ``batch_size`` is a property without a setter that returns
    ``self.hparams.batch_size`` (``fixed``: a number of its own)."""

    fixed = 0

    @property
    def batch_size(self) -> int:
        return self.fixed or int(self.hparams.batch_size)

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.data, batch_size=self.batch_size, shuffle=True)


def test_a_property_that_reads_the_hparams_takes_each_epochs_size(tmp_path: Any) -> None:
    # The size goes on the hparams the property reads (setting the property raised); one that
    # returns a number of its own is refused when the fit is set up, before a step.
    model = SizeFromHparams()
    fit(model, elastic(), tmp_path)
    assert model.first_batches[0] == 8
    assert len(set(model.first_batches)) > 1  # it grew
    fixed = SizeFromHparams()
    fixed.fixed = 8
    with pytest.raises(ZeusBSOError, match="cannot set 'batch_size', a property of SizeFromHp"):
        fit(fixed, elastic(), tmp_path)
    assert fixed.first_batches == []


class WithinCandidates(ElasticBatchSize):
    """Doubles the batch each epoch as far as its candidates go (`Doubling` sets the scale,
    past any bound): the bounds, and the data's, hold."""

    def get_local_bsz(self) -> int:
        target = self.choice.global_batch * 2
        options = [c for c in self._candidates() if c.global_batch <= target]
        if options:
            self.choice = max(options, key=lambda c: (c.global_batch, -c.accumulation))
        return self.choice.local_bsz


class SmallData(OneCycle):
    """96 samples, a short last batch dropped."""

    def train_dataloader(self) -> Any:
        data = classification(96)
        return torch.utils.data.DataLoader(
            data, batch_size=self.hparams.batch_size, shuffle=True, drop_last=True
        )


def test_the_batch_grows_no_larger_than_an_epochs_data(tmp_path: Any) -> None:
    # Past 96 samples a step, a micro-batch made no batch: Lightning ended the fit after 4 of
    # its 6 epochs ("No training batches"), or a step of more micro-batches than the epoch
    # held trained the epoch's alone while the rate was scaled for the whole.
    ebs = WithinCandidates(
        initial_batch_size=16, max_batch_size=512, local_bsz_bounds=(8, 256), lr_rule="linear"
    )
    model = SmallData()
    trainer = fit(model, ebs, tmp_path)
    assert trainer.current_epoch == EPOCHS  # every epoch trained
    assert ebs.choice.global_batch == 96  # grew 16, 32, 64, then as far as the data goes
    assert ebs.data_bound == 96


def test_a_fit_that_max_steps_ends_steps_its_schedule_as_written(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # estimated_stepping_batches is max_steps here, and the fit takes max_steps optimizer steps
    # at any size: stepped by their worth, the one-cycle would step past its end and raise.
    model = OneCycle()
    with caplog.at_level("WARNING", logger="zeus_bso.elastic"):
        trainer = fit(model, elastic(), tmp_path, max_steps=300, max_epochs=100)
    assert len(set(model.first_batches)) > 1
    schedule = trainer.lr_scheduler_configs[0].scheduler
    assert model.total_steps == trainer.global_step == schedule.last_epoch == 300
    # Not followed, on purpose: no word of a schedule that falls behind.
    assert not [r for r in caplog.records if r.name.startswith("zeus_bso.elastic")]


def test_a_later_fit_with_the_same_callback_steps_at_the_scaled_rate(tmp_path: Any) -> None:
    # A notebook's second fit, or the next phase of a training: its optimizers are new, and
    # were left unattached (every step at the schedule's rate, the batch 16 times larger).
    class Constant(OneCycle):
        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)

    taken: list[float] = []

    class Watch(pl.Callback):  # type: ignore[misc]
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            trainer.optimizers[0].register_step_post_hook(
                lambda opt, *_: taken.append(opt.param_groups[0]["lr"])
            )

    ebs, model = elastic("linear"), Constant()
    callback = ElasticBatchSizeCallback(ebs)
    for _ in range(2):
        taken.clear()
        pl.Trainer(
            max_epochs=2,
            callbacks=[callback, Watch()],
            reload_dataloaders_every_n_epochs=1,
            **quiet_trainer_options(tmp_path),
        ).fit(model)
    # The first fit trained 16 and 32; the second went on at 64 and 128, each step at the rate
    # times its batch's scale.
    assert sorted(set(taken)) == pytest.approx([0.05 * 4, 0.05 * 8])


@pytest.mark.parametrize(
    ("other", "options", "said"),
    [
        ("BatchSizeFinder", {}, "BatchSizeFinder"),
        ("GradientAccumulationScheduler", {}, "GradientAccumulationScheduler"),
        (None, {"accumulate_grad_batches": 4}, r"Trainer\(accumulate_grad_batches=4\)"),
    ],
)
def test_what_else_sets_the_batch_size_or_accumulation_is_refused_before_a_step(
    tmp_path: Any, other: str | None, options: dict[str, Any], said: str
) -> None:
    # Whichever set it last would train, while the noise and the rate took the elastic's.
    callbacks = []
    if other == "BatchSizeFinder":
        callbacks.append(pl.callbacks.BatchSizeFinder())
    elif other == "GradientAccumulationScheduler":
        callbacks.append(pl.callbacks.GradientAccumulationScheduler({0: 1, 2: 4}))
    model = OneCycle()
    with pytest.raises(ZeusBSOError, match=said) as refused:
        fit(model, elastic(), tmp_path, *callbacks, **options)
    assert "initial_batch_size is the global batch" in str(refused.value)
    assert model.first_batches == []


def test_the_same_trainer_fit_again_goes_on_growing(tmp_path: Any) -> None:
    # Its accumulation is the callback's own from the first fit: not refused as the script's.
    model = OneCycle()
    trainer = fit(model, elastic(), tmp_path, max_epochs=2)
    trainer.fit_loop.max_epochs = 3
    trainer.fit(model)
    assert model.first_batches == [8, 16, 32]


def test_a_dataloader_given_to_fit_is_built_again_at_each_epochs_size(tmp_path: Any) -> None:
    class Given(OneCycle):
        def __init__(self) -> None:
            super().__init__()
            del self.hparams["batch_size"]  # the size is the given DataLoader's alone

    model = Given()
    loader = torch.utils.data.DataLoader(model.data, batch_size=32, shuffle=True)
    ebs = elastic()
    fit(model, ebs, tmp_path, loader=loader)
    assert model.first_batches[0] == 8
    assert len(set(model.first_batches)) > 1
    assert all(8 <= size <= 256 for size in model.first_batches)


def test_a_resumed_fit_trains_the_checkpoints_size_from_its_first_epoch(tmp_path: Any) -> None:
    saved = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "every", save_top_k=-1)
    first = OneCycle()
    fit(first, elastic(), tmp_path, saved, enable_checkpointing=True)
    assert first.first_batches[3] != 8  # the case at hand: not the initial size
    (checkpoint,) = (tmp_path / "every").glob("epoch=2-*.ckpt")  # before the 4th epoch

    resumed = OneCycle()
    fit(resumed, elastic(), tmp_path, ckpt_path=checkpoint)
    assert resumed.first_batches == first.first_batches[3:]  # from its first epoch on


@pytest.mark.parametrize("every", [1, 5])
def test_each_epochs_size_and_each_steps_rate_go_to_the_loggers(tmp_path: Any, every: int) -> None:
    taken: list[float] = []  # the rate each optimizer step took, as the optimizer saw it

    class Watch(pl.Callback):  # type: ignore[misc]
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            trainer.optimizers[0].register_step_post_hook(
                lambda opt, *_: taken.append(opt.param_groups[0]["lr"])
            )

    model = OneCycle()
    logs = pl.loggers.CSVLogger(tmp_path, name="logs")
    fit(model, elastic("linear"), tmp_path, Watch(), logger=logs, log_every_n_steps=every)
    rows = list(csv_rows(Path(logs.log_dir) / "metrics.csv"))
    epochs = [row for row in rows if row.get("elastic/batch_size")]
    # Each epoch's size as it trained: its first micro-batch, two of them a step.
    assert [float(row["elastic/batch_size"]) for row in epochs] == [
        2.0 * size for size in model.first_batches
    ]
    assert [float(row["elastic/scale"]) for row in epochs] == [
        2.0 * size / 16 for size in model.first_batches
    ]
    assert all(float(row["elastic/progress"]) > 0 for row in epochs)
    # At the steps Lightning logs, the rate that step took: the schedule's times the scale.
    steps = {int(row["step"]): float(row["elastic/lr"]) for row in rows if row.get("elastic/lr")}
    assert sorted(steps) == list(range(every, len(taken) + 1, every))
    assert [steps[step] for step in sorted(steps)] == pytest.approx(
        [taken[step - 1] for step in sorted(steps)]
    )
    factors = [float(row["elastic/lr_factor"]) for row in rows if row.get("elastic/lr_factor")]
    assert set(factors) == {2.0 * size / 16 for size in model.first_batches}


def test_a_new_size_is_said_on_lightnings_console(tmp_path: Any) -> None:
    # Where Lightning's callbacks speak (its rank-zero logger, which writes to the console
    # whatever the script's logging): the zeus_bso logger has no handler unless one is set.
    said: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    ebs = elastic()
    fit(OneCycle(), ebs, tmp_path, max_epochs=1)
    assert ebs.show is not None
    # Lightning's rank-zero logger is the package's imported last where both are installed
    # (they share lightning_utilities' record of it): each has its console handler.
    consoles = [logging.getLogger(name) for name in ("lightning.pytorch", "pytorch_lightning")]
    catch = Catch()
    for console in consoles:
        console.addHandler(catch)
    try:
        ebs.show("ElasticBatchSize: the batch size goes from 16 to 32")
    finally:
        for console in consoles:
            console.removeHandler(catch)
    assert said == ["ElasticBatchSize: the batch size goes from 16 to 32"]


def csv_rows(path: Path) -> Any:
    with path.open() as file:
        yield from csv.DictReader(file)


def test_follow_steps_a_schedule_by_what_the_optimizer_steps_were_worth() -> None:
    class Counting:
        def __init__(self) -> None:
            self.calls = 0

        def step(self) -> None:
            self.calls += 1

    progress, counting = Progress(), Counting()
    schedule = follow(follow(counting, progress), progress)  # followed once
    assert schedule.schedule is counting
    progress.stepped(1.0)
    schedule.step()
    assert counting.calls == 1
    progress.stepped(2.5)
    schedule.step()  # 2.5: two now, the half carried
    assert counting.calls == 3
    progress.stepped(2.5)
    schedule.step()  # 2.5 + 0.5
    assert counting.calls == 6
    schedule.step()  # no optimizer step since (AMP skipped it): once, as written
    assert counting.calls == 7
    for _ in range(4):  # stepped every fourth optimizer step (Lightning's frequency=4)
        progress.stepped(3.0)
    schedule.step()  # four steps of 3: the schedule's one step is worth three
    assert counting.calls == 10


def test_a_given_dataloader_that_cannot_be_built_again_is_refused_before_a_step(
    tmp_path: Any,
) -> None:
    model = OneCycle()
    sampler = torch.utils.data.BatchSampler(
        torch.utils.data.SequentialSampler(model.data), batch_size=32, drop_last=False
    )
    loader = torch.utils.data.DataLoader(model.data, batch_sampler=sampler)
    with pytest.raises(ZeusBSOError, match="ElasticBatchSizeCallback cannot build again"):
        fit(model, elastic(), tmp_path, loader=loader)
    assert model.first_batches == []


def test_a_followed_one_cycle_is_never_stepped_past_its_total() -> None:
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    progress = Progress()
    schedule = follow(torch.optim.lr_scheduler.OneCycleLR(optimizer, 0.1, total_steps=10), progress)
    for _ in range(4):  # worth 3 a step: 12 steps of the schedule's, which has 10
        optimizer.step()
        progress.stepped(3.0)
        schedule.step()
    assert schedule.last_epoch == 10
