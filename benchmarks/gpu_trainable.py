"""What makes a batch size trainable, on a real GPU: the parts of ``gpu_check.py`` for
out-of-memory (in Lightning and in the HF Trainer's ``auto_find_batch_size``), learning-rate
scaling, gradient accumulation and power limits (read only).

Each part takes ``accelerator``: ``"cuda"`` on the GPU machine (a real CUDA out-of-memory error,
NVML's real counter and limits), ``"cpu"`` for the dry run the test suite makes of this script
(``tests/integrations/test_gpu_check_parts.py``): there a model raises
``torch.cuda.OutOfMemoryError`` above ``oom_above`` samples, and NVML is the test double. No part
ever sets a GPU's power limit.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from zeus_bso.scaling.lr import step_factor, stepped_rate

OOM_SIZE = 16384
"""The batch size that cannot fit: ``Wide`` keeps about 24 MiB a sample on the GPU (384 GiB)."""
REFERENCE = 128
"""The batch size the learning rate (0.01) was tuned at: the fit's is two or four times it."""
ROWS_ON_GPU = 1024
"""``Wide``'s rows a sample on the GPU (8 MiB a sample in each of its large tensors)."""


def width(accelerator: str) -> int:
    """``Wide``'s hidden width: 2048 on the GPU; 128 in the CPU's dry run, whose out-of-memory
    error comes from ``oom_above``, not from the model's size (the width only made its steps
    slower)."""
    return 2048 if accelerator == "cuda" else 128


def counter_mj(pynvml: Any, accelerator: str) -> int:
    """The training GPU's total-energy counter: ``cuda:0`` by its UUID (the double's first GPU
    on the CPU)."""
    if accelerator == "cuda":
        import torch

        uuid = str(torch.cuda.get_device_properties(0).uuid)
        uuid = uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
    else:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    return int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))


def _synchronize(accelerator: str) -> None:
    if accelerator == "cuda":
        import torch

        torch.cuda.synchronize()


def _data(n: int, seed: int) -> Any:
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 512, generator=g)
    return torch.utils.data.TensorDataset(x, (x[:, :16].sum(dim=1) > 0).long())


def _model(
    accelerator: str, rows: int, oom_above: int | None, batch_size: int, samples: int = 2 * OOM_SIZE
) -> Any:
    """A classifier whose every sample spreads over ``rows`` rows of `width` (its memory grows
    with the batch as a convolutional net's does); the batch sizes its steps saw; above
    ``oom_above`` samples (the CPU's dry run) it raises CUDA's out-of-memory error."""
    import lightning.pytorch as pl
    import torch

    class Wide(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = batch_size
            self.up = torch.nn.Linear(512, width(accelerator))
            self.spread = torch.nn.Parameter(torch.ones(1, rows, 1))
            self.out = torch.nn.Linear(width(accelerator), 2)
            self.seen: set[int] = set()
            self.trained_on = ""  # the device of its training batches (Lightning moves the
            # parameters back to the CPU when the fit ends)

        def forward(self, x: Any) -> Any:
            wide = (self.up(x).unsqueeze(1) * self.spread).relu()
            return self.out(wide.mean(dim=1))

        def training_step(self, batch: Any, _: int) -> Any:
            x, y = batch
            if oom_above is not None and len(x) > oom_above:
                raise torch.cuda.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {len(x)} MiB (the dry run's limit)"
                )
            loss = torch.nn.functional.cross_entropy(self(x), y)
            self.seen.add(len(x))  # a step that fitted (on the GPU, its forward did)
            self.trained_on = str(x.device)
            return loss

        def validation_step(self, batch: Any, _: int) -> None:
            x, y = batch
            self.log("val_acc", (self(x).argmax(1) == y).float().mean())

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self) -> Any:
            data = _data(samples, 0)
            return torch.utils.data.DataLoader(data, batch_size=self.batch_size, shuffle=True)

        def val_dataloader(self) -> Any:
            return torch.utils.data.DataLoader(_data(2048, 1), batch_size=256)

    return Wide()


def _trainer(accelerator: str, epochs: int, callbacks: list[Any], strategy: str = "auto") -> Any:
    import lightning.pytorch as pl

    return pl.Trainer(
        accelerator=accelerator, devices=1, max_epochs=epochs, callbacks=callbacks,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=2,
        strategy=strategy,
    )  # fmt: skip


def _fresh(prefix: str) -> str:
    """A job of its own for each call (a check that runs again starts from nothing)."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def _job_state(url: str, job_id: str) -> dict[str, Any]:
    from zeus_bso.client import ServerClient

    with ServerClient(url) as client:
        state: dict[str, Any] = client.job_state(job_id)
    return state


def oom_and_lr_check(url: str, accelerator: str, oom_above: int | None = None) -> dict[str, Any]:
    """#43 part 7, the first two: a Lightning fit whose default batch size runs out of memory
    on this GPU. It must be caught before training (the memory check's steps), reported
    ``infeasible``, and the same ``fit()`` must finish at a size that fits, its learning rate
    scaled by the linear rule (from 0.01 at 128) on the GPU; the server's next run must not be
    that size again."""
    import torch

    from zeus_bso import JobSpec
    from zeus_bso.integrations.lightning import ZeusBSOCallback

    rows = ROWS_ON_GPU if accelerator == "cuda" else 4
    job = JobSpec(job_id=_fresh("gpu-oom"), job_id_prefix="gpu-oom",
                  batch_sizes=[256, 512, OOM_SIZE], default_batch_size=OOM_SIZE,
                  target_metric=0.75, max_epochs=3, learning_curve_stop=False)  # fmt: skip
    callback = ZeusBSOCallback(url, job, monitor="val_acc", lr_rule="linear",
                               reference_batch_size=REFERENCE)  # fmt: skip
    model = _model(accelerator, rows, oom_above, OOM_SIZE)
    trainer = _trainer(accelerator, job.max_epochs, [callback])
    if accelerator == "cuda":
        torch.cuda.reset_peak_memory_stats()
    trainer.fit(model)
    assert callback.job_id is not None
    state = _job_state(url, callback.job_id)
    trials = sorted(state["trials"], key=lambda t: t["trial_number"])
    lr = stepped_rate(trainer.optimizers[0])  # the rate its steps take: the schedule's x factor
    return {
        "trials": [(t["batch_size"], t["status"]) for t in trials],
        "memory_caps": state["memory_caps"],
        "next_run": state["next_run"],
        "trained_batch_size": callback.batch_size,
        "largest_step_batch": max(model.seen),
        "lr": lr,
        "lr_expected": 0.01 * (callback.batch_size or 0) / REFERENCE,
        "trained_on": model.trained_on,
        "peak_memory_gib": (
            torch.cuda.max_memory_allocated() / 2**30 if accelerator == "cuda" else None
        ),
        "passed": (
            [t["status"] for t in trials] == ["infeasible", "reported"]
            and trials[0]["batch_size"] == OOM_SIZE
            and callback.batch_size in (256, 512)
            and max(model.seen) <= 512
            and model.trained_on.startswith(accelerator)
            and abs(lr - 0.01 * (callback.batch_size or 0) / REFERENCE) < 1e-12
            and not state["next_run"]["refused"]
            and state["next_run"]["batch_size"] != OOM_SIZE
        ),
    }


def fsdp_check(url: str, accelerator: str) -> dict[str, Any]:
    """A Lightning fit of a sharded model under ZeusBSOCallback: on the GPU under Lightning's
    ``FSDPStrategy`` (one device), on the CPU (the dry run) a module that ``fully_shard``
    shards in a ``gloo`` process group of one. Its batch size is new to the GPU, yet the memory
    check must try no step (outside the strategy a step would find only the process's shard),
    and say so; the fit must train at the server's size and its trial be reported."""
    import logging

    import torch

    from zeus_bso import JobSpec
    from zeus_bso.integrations.lightning import ZeusBSOCallback

    job = JobSpec(job_id=_fresh("gpu-fsdp"), job_id_prefix="gpu-fsdp",
                  batch_sizes=[128, 256, 512], default_batch_size=256,
                  target_metric=0.75, max_epochs=2, learning_curve_stop=False)  # fmt: skip
    callback = ZeusBSOCallback(url, job, monitor="val_acc")
    model = _model(accelerator, 16, None, 256, samples=4096)
    steps: list[int] = []
    model.register_forward_pre_hook(lambda module, _: steps.append(1) if module.training else None)
    said: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    package_logger = logging.getLogger("zeus_bso")
    level = package_logger.level
    package_logger.addHandler(handler)
    package_logger.setLevel(logging.INFO)  # the line is said at INFO
    try:
        if accelerator == "cuda":
            trainer = _trainer(accelerator, job.max_epochs, [callback], strategy="fsdp")
            trainer.fit(model)
        else:
            trainer = _fit_sharded_on_the_cpu(model, job.max_epochs, callback)
    finally:
        package_logger.removeHandler(handler)
        package_logger.setLevel(level)
    assert callback.job_id is not None
    state = _job_state(url, callback.job_id)
    not_tried = [line for line in said if "its steps are not tried" in line]
    return {
        "strategy": type(trainer.strategy).__name__,
        "trials": [(t["batch_size"], t["status"]) for t in state["trials"]],
        "forward_steps": len(steps),
        "global_step": trainer.global_step,
        "said": not_tried[:1],
        "trained_on": model.trained_on,
        "torch": torch.__version__,
        "passed": (
            [t["status"] for t in state["trials"]] == ["reported"]
            and model.seen == {callback.batch_size}
            and len(steps) == trainer.global_step > 0
            and len(not_tried) == 1
            and model.trained_on.startswith(accelerator)
        ),
    }


def _fit_sharded_on_the_cpu(model: Any, epochs: int, callback: Any) -> Any:
    """`fsdp_check`'s fit on the CPU: Lightning's FSDP strategy needs a GPU, so the module's
    layers are sharded by ``fully_shard`` itself, in a ``gloo`` process group of one."""
    import socket

    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = dist.TCPStore("127.0.0.1", port, 1, is_master=True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        fully_shard(model.up)
        fully_shard(model.out)
        trainer = _trainer("cpu", epochs, [callback])
        trainer.fit(model)
    finally:
        dist.destroy_process_group()
    return trainer


def hf_oom_check(url: str, accelerator: str, oom_above: int | None = None) -> dict[str, Any]:
    """#43 part 2 on a real GPU: an HF Trainer run with ``auto_find_batch_size=True`` whose
    dispatched batch size runs out of memory. The dispatched size must be reported
    ``infeasible``, each of the Trainer's own sizes that ran out must bring the profile's memory
    cap down, the Trainer must train on at the size it found (below the cap) at the learning
    rate of that size by the linear rule, and the server's next run must be a size under the
    cap."""
    import torch
    import transformers

    from zeus_bso import JobSpec
    from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback

    on_gpu = accelerator == "cuda"
    rows = ROWS_ON_GPU if on_gpu else 1

    class Samples(torch.utils.data.Dataset):  # type: ignore[misc]
        def __init__(self, n: int, seed: int) -> None:
            self.data = _data(n, seed).tensors

        def __len__(self) -> int:
            return len(self.data[0])

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"x": self.data[0][i], "labels": self.data[1][i]}

    class Wide(torch.nn.Module):
        """``_model``'s classifier, as the HF Trainer calls a model."""

        def __init__(self) -> None:
            super().__init__()
            self.up = torch.nn.Linear(512, width(accelerator))
            self.spread = torch.nn.Parameter(torch.ones(1, rows, 1))
            self.out = torch.nn.Linear(width(accelerator), 2)
            self.trained_on = ""
            self.last = 0  # the size of its latest training batch
            self.stepped: set[int] = set()  # the sizes of batches whose optimizer step ran

        def forward(self, x: Any, labels: Any = None) -> dict[str, Any]:
            if self.training and oom_above is not None and len(x) > oom_above:
                raise torch.cuda.OutOfMemoryError(
                    f"CUDA out of memory. Tried to allocate {len(x)} MiB (the dry run's limit)"
                )
            logits = self.out((self.up(x).unsqueeze(1) * self.spread).relu().mean(dim=1))
            if self.training:  # a forward that fitted may still run out in its backward
                self.trained_on, self.last = str(x.device), len(x)
            loss = torch.nn.functional.cross_entropy(logits, labels)
            return {"loss": loss, "logits": logits}

    class Steps(transformers.TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, *args: Any, **kwargs: Any) -> None:
            model.stepped.add(model.last)

    job = JobSpec(job_id=_fresh("gpu-hf-oom"), job_id_prefix="gpu-hf-oom",
                  batch_sizes=[256, 512, OOM_SIZE], default_batch_size=OOM_SIZE,
                  target_metric=2.0, max_epochs=2, learning_curve_stop=False)  # fmt: skip
    callback = ZeusBSOTrainerCallback(url, job, metric="eval_accuracy", lr_rule="linear",
                                      reference_batch_size=REFERENCE)  # fmt: skip
    model = Wide()
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(
            out, per_device_train_batch_size=callback.start(), per_device_eval_batch_size=256,
            num_train_epochs=2, learning_rate=0.01, auto_find_batch_size=True,
            eval_strategy="epoch", save_strategy="no", logging_strategy="no", report_to=[],
            disable_tqdm=True, use_cpu=not on_gpu,
        )  # fmt: skip
        trainer = transformers.Trainer(
            model=model, args=args, train_dataset=Samples(2 * OOM_SIZE if on_gpu else 12_000, 0),
            eval_dataset=Samples(2048, 1), callbacks=[callback, Steps()],
            compute_metrics=lambda p: {"accuracy": float((p.predictions.argmax(-1)
                                                          == p.label_ids).mean())},
        )  # fmt: skip
        if on_gpu:
            torch.cuda.reset_peak_memory_stats()
        trainer.train()
    assert callback.job_id is not None
    state = _job_state(url, callback.job_id)
    found = int(trainer.state.train_batch_size)
    (cap,) = state["memory_caps"].values() or [None]
    factor = step_factor(trainer.optimizer) or 1.0  # the steps take the schedule's rates x it
    rates = [float(group["initial_lr"]) * factor for group in trainer.optimizer.param_groups]
    return {
        "trials": [(t["batch_size"], t["status"]) for t in state["trials"]],
        "memory_caps": state["memory_caps"],
        "next_run": state["next_run"],
        "trainer_batch_size": found,
        "largest_step_batch": max(model.stepped, default=0),
        "lr": rates[0],
        "lr_expected": 0.01 * found / REFERENCE,
        "trained_on": model.trained_on,
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if on_gpu else None,
        "passed": (
            [(t["batch_size"], t["status"]) for t in state["trials"]] == [(OOM_SIZE, "infeasible")]
            and cap is not None
            and found < cap <= OOM_SIZE  # the Trainer's own sizes that ran out (Accelerate
            # before 1.7 halves the size: none of its own ran out)
            and max(model.stepped, default=0) == found
            and all(abs(rate - 0.01 * found / REFERENCE) < 1e-12 for rate in rates)
            and model.trained_on.startswith(accelerator)
            and not state["next_run"]["refused"]
            and state["next_run"]["batch_size"] in (256, 512)
        ),
    }


def accumulation_check(
    url: str, accelerator: str, epochs: int = 5, tolerance: float = 0.02
) -> dict[str, Any]:
    """#43 part 7, the third: a run of 1024 that accumulates micro-batches of 256
    (``max_micro_batch_size``): the energy the server records for it against the GPU's
    counter, read independently over the callback's window (goal: within ``tolerance``, 2%)."""
    import lightning.pytorch as pl
    import pynvml

    from zeus_bso import JobSpec
    from zeus_bso.integrations.lightning import ZeusBSOCallback

    pynvml.nvmlInit()

    class Probe(pl.Callback):  # type: ignore[misc]
        """Reads the counter right after the callback opens its window and right after each of
        its reports (placed after it), and right before each of its reports (placed before
        it): the same window, without the reports' waits on the server, which the run's
        energy leaves out."""

        def __init__(self) -> None:
            self.start_mj = self.last_mj = 0
            self.readings: list[int] = []

        def on_train_start(self, trainer: Any, module: Any) -> None:
            if self is opens:
                self.start_mj = counter_mj(pynvml, accelerator)

        def on_validation_end(self, trainer: Any, module: Any) -> None:
            _synchronize(accelerator)
            self.readings.append(counter_mj(pynvml, accelerator))
            if self is closes:
                self.last_mj = self.readings[-1]

    opens, closes = Probe(), Probe()
    job = JobSpec(job_id=_fresh("gpu-accumulate"), job_id_prefix="gpu-accumulate",
                  batch_sizes=[1024], default_batch_size=1024, target_metric=2.0,
                  max_epochs=epochs)  # fmt: skip  # never converges: every epoch runs
    callback = ZeusBSOCallback(url, job, monitor="val_acc", max_micro_batch_size=256)
    on_gpu = accelerator == "cuda"
    model = _model(
        accelerator, ROWS_ON_GPU if on_gpu else 4, None, 1024, 4 * OOM_SIZE if on_gpu else 8192
    )
    trainer = _trainer(accelerator, epochs, [closes, callback, opens])
    trainer.fit(model)
    assert callback.job_id is not None
    (trial,) = _job_state(url, callback.job_id)["trials"]
    waits_mj = sum(a - b for b, a in zip(closes.readings[:-1], opens.readings[:-1], strict=True))
    recorded = float(trial["energy"])
    measured = (closes.last_mj - opens.start_mj - waits_mj) / 1000.0
    return {
        "micro_batch_sizes": sorted(model.seen),
        "accumulate_grad_batches": trainer.accumulate_grad_batches,
        "recorded_j": recorded,
        "nvml_j": measured,
        "energy_error": recorded / measured - 1 if measured else None,
        "passed": (
            max(model.seen) == 256
            and trainer.accumulate_grad_batches == 4
            and measured > 0
            and abs(recorded / measured - 1) <= tolerance
        ),
    }


def profile_window_check(accelerator: str, windows: int = 3) -> dict[str, Any]:
    """#45's profiler on a real GPU's energy counter, setting nothing: quick steps (a matrix
    product of a few milliseconds) measured as a profile measures a limit, ``windows`` times
    each way, every window at the GPU's own limit (the profiler's ``set_limit`` does nothing).
    The 40 steps a limit of a long first epoch gets, against the steps the profiler lengthens
    them to (20 updates of the counter, `GpuPowerLimits.counter_period_s`): each window's energy
    a step, whose spread over the windows is the measurement's error (goal: at most 10%
    lengthened)."""
    import torch

    from zeus_bso.power import GpuPowerLimits, PowerProfiler
    from zeus_bso.power.profiler import COUNTER_PERIODS, MAX_MEASURED_STEPS

    on_gpu = accelerator == "cuda"
    if on_gpu:
        a = torch.randn(4096, 4096, device="cuda")

        def step() -> None:
            a @ a
    else:  # the dry run: a step's time, on the double's counter

        def step() -> None:
            time.sleep(0.001)

    with tempfile.TemporaryDirectory() as records:
        limits = GpuPowerLimits(Path(records), gpu_indices=[0])
        period = limits.counter_period_s()
        before = limits.current()

        def measure(min_window_s: float) -> tuple[int, list[float]]:
            """Each window's joules a step, and the steps measured a window."""
            profiler = PowerProfiler(
                [float(w) for w in range(windows, 0, -1)], lambda _: None, limits.joules,
                lambda: _synchronize(accelerator), measured_steps=MAX_MEASURED_STEPS,
                min_window_s=min_window_s, room=windows * 5000,
            )  # fmt: skip
            while not profiler.done:
                profiler.step_begin()
                step()
                profiler.step_end()
            measured = profiler.measurements(steps_per_epoch=1)
            return profiler.measured_steps, [m.energy_per_epoch for m in measured]

        for _ in range(50):  # the GPU's clocks up before either is measured
            step()
        short_steps, short = measure(0.0)
        long_steps, long = measure(COUNTER_PERIODS * (period or 0.0))
        after = limits.current()

    def spread(joules: list[float]) -> float:
        return (max(joules) - min(joules)) / statistics.median(joules) if min(joules) > 0 else 1.0

    return {
        "counter_period_ms": 1000 * period if period else None,
        "short_steps": short_steps,
        "short_j_per_step": short,
        "short_spread": spread(short),
        "lengthened_steps": long_steps,
        "lengthened_j_per_step": long,
        "lengthened_spread": spread(long),
        "passed": (
            period is not None
            and long_steps > short_steps
            and spread(long) <= 0.10
            and after == before
        ),
    }


def power_read_check() -> dict[str, Any]:
    """#45 on a real GPU: read GPU 0's power-limit constraints, its limit now and by default,
    the limits a profile would measure (through `GpuPowerLimits`) and how often its energy
    counter changes, and set nothing: the limit is the same after, and no record of a change
    is written."""
    import pynvml

    from zeus_bso.power import GpuPowerLimits

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    before = pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0
    low, high = (w / 1000.0 for w in pynvml.nvmlDeviceGetPowerManagementLimitConstraints(handle))
    try:
        default: float | None = pynvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / 1000.0
    except pynvml.NVMLError:
        default = None
    with tempfile.TemporaryDirectory() as records:
        limits = GpuPowerLimits(Path(records), gpu_indices=[0])
        profiled = limits.limits()
        current = limits.current()
        period = limits.counter_period_s()  # what a profile lengthens its windows by
        written = sorted(p.name for p in Path(records).iterdir())
    after = pynvml.nvmlDeviceGetPowerManagementLimit(handle) / 1000.0
    return {
        "counter_update_ms": None if period is None else 1000 * period,
        "uuid": limits.uuids[0],
        "min_w": low,
        "max_w": high,
        "default_w": default,
        "limit_w": before,
        "profiled_w": profiled,
        "passed": (
            after == before
            and current == [before]
            and not written
            and bool(profiled)
            and profiled[0] == high
            and all(low <= w <= high for w in profiled)
        ),
    }


def command_check(url: str) -> dict[str, Any]:
    """``zeus-bso check`` where the runs train: it must measure the GPUs through NVML and reach
    the server (it reads; it sets nothing)."""
    from _server import installed_command  # beside this script, which gpu_check.py runs

    done = subprocess.run(
        [installed_command("zeus-bso"), "check", "--json", "--server", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    checks = {check["what"]: check for check in json.loads(done.stdout)["checks"]}
    energy, server = checks["energy"], checks["server"]
    return {
        "status": done.returncode,
        "checks": checks,
        "passed": done.returncode == 0
        and energy["ok"] is True
        and "measured by nvml" in energy["says"]
        and server["ok"] is True,
    }
