"""The training side on a real NVIDIA GPU: energy the server records against NVML read
independently, the callbacks' overhead per epoch, and the energy sum through NCCL.

    .venv/bin/pip install -e '.[server,nvml,lightning,hf]'   # with a CUDA build of torch
    .venv/bin/python benchmarks/gpu_check.py [--epochs 6] [--repeats 3]
    .venv/bin/python -m pytest -m gpu        # the tests that need a GPU

Runs, against a local server on a temporary SQLite database:

1. A Lightning fit on ``cuda:0`` under ZeusBSOCallback (its default meter: NVML). An independent
   reader takes GPU 0's total-energy counter at the callback's own window (training start, and
   the end of each validation); the server's figure for the trial is compared with it
   (goal: within 2%).
2. The callback's overhead: the time its per-epoch hooks take against the epoch (goal: at most
   1%), timed directly, and the median epoch time of ``--repeats`` fits each way with and
   without it (a figure the data loader's noise dominates; both are reported).
3. A Hugging Face Trainer run on ``cuda:0`` under ZeusBSOTrainerCallback, compared as in 1.
4. ``zeus_bso.training.collectives`` through an ``nccl`` process group of world size 1: the
   run's GPUs and energy gathered as the callbacks gather them.
5. Two ranks (a ``gloo`` process group) that both train on GPU 0, as N processes on one node
   see all of its GPUs: the run's GPU count and energy gathered as the callbacks gather them,
   against GPU 0's counter read independently over the same window (goal: one GPU, within 2%;
   each rank counting what it sees would give +100%).
6. Out of memory and the learning rate (``gpu_trainable.py``): a Lightning fit whose default
   batch size (16384 of a model that keeps about 24 MiB a sample) runs out of CUDA memory: it
   must be reported ``infeasible``, the same ``fit()`` must finish at a size that fits with the
   learning rate scaled by the linear rule, and the server's next run must be another size.
7. Out of memory in the HF Trainer (``hf_oom``): a run with ``auto_find_batch_size=True`` at the
   same size: the size must be reported ``infeasible``, each size the Trainer shrinks to that
   runs out too must lower the GPU type's memory cap, and the Trainer must go on at the size it
   found with that size's learning rate (linear rule); the next run must be a size under the cap.
8. Gradient accumulation: a run of 1024 in micro-batches of 256 (``max_micro_batch_size``), its
   energy on the server against GPU 0's counter over the same window (goal: within 2%).
9. Power limits, read only: GPU 0's constraints, its limit, and the limits a profile would
   measure, through ``GpuPowerLimits``; nothing is set (the limit is the same after).
10. Power profile windows (``window``), setting nothing: quick steps measured as a profile
   measures a limit, three windows of 40 steps against three the profiler lengthens to 20
   updates of the energy counter; the spread of a step's energy over the windows (goal: at
   most 10% lengthened).
11. ``zeus-bso check`` on the machine: it must measure the GPUs through NVML and reach the
   server (it reads only).
12. A sharded model (``fsdp``): a Lightning fit under ``FSDPStrategy`` on one GPU at a batch
   size new to it; the memory check must try no step (a step outside the strategy would find
   only the process's shard) and say so, and the fit must train at the server's size.
13. A GPU another process computes on (``sharing``, ``gpu_sharing.py``): a run alone must name
   no shared GPU; a run while a process apart from it multiplies matrices on ``cuda:0`` must
   name that GPU in its outcome, with one warning.
14. Out of memory while a run trains, then the next attempt (``retry``, ``gpu_retry.py``): a
   plain loop under `until_converged` whose first step at the default runs out of CUDA memory,
   each attempt's model holding 60% of the GPU: the next attempt must start with nothing of the
   failed one's allocated, and converge at the smaller size.

``--parts`` runs some of them (e.g. ``--parts oom accumulation power check``: the device's minutes
are few).

Each part that fails is reported as failed, with its error, and the others still run. Writes
gpu_check.{json,md} under ``--out`` (benchmarks/results); ``--report-only`` rewrites the .md
from the .json. Exits with a message where there is
no CUDA GPU or NVML. CI never runs it; the test suite checks the same paths on the CPU with a
test double.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _server import free_port, running_server
from gpu_retry import retry_check
from gpu_sharing import sharing_check
from gpu_trainable import (
    accumulation_check,
    command_check,
    fsdp_check,
    hf_oom_check,
    oom_and_lr_check,
    power_read_check,
    profile_window_check,
)

RESULTS = Path(__file__).parent / "results"


def requirements() -> tuple[Any, Any]:
    try:
        import pynvml
        import torch
    except ImportError as err:
        raise SystemExit(f"needs torch (a CUDA build) and nvidia-ml-py: {err}") from err
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU here: run this on a machine with an NVIDIA GPU")
    pynvml.nvmlInit()
    return torch, pynvml


def counter_mj(pynvml: Any, torch: Any) -> int:
    """GPU 0's (the one training) total-energy counter, found by its UUID."""
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    return int(pynvml.nvmlDeviceGetTotalEnergyConsumption(handle))


def make_data(torch: Any, n: int, seed: int) -> Any:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 512, generator=g)
    y = (x[:, :16].sum(dim=1) > 0).long()
    return torch.utils.data.TensorDataset(x, y)


def timed(hook: Callable[..., None], spent: list[float]) -> Callable[..., None]:
    """``hook``, adding the seconds each call takes to ``spent``."""

    def call(*args: Any, **kwargs: Any) -> None:
        started = time.perf_counter()
        try:
            hook(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    return call


def lightning_fit(server: str, with_callback: bool, epochs: int, repeat: int) -> dict[str, Any]:
    import lightning.pytorch as pl
    import pynvml
    import torch

    from zeus_bso import JobSpec
    from zeus_bso.integrations.lightning import ZeusBSOCallback

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.batch_size = 256
            self.net = torch.nn.Sequential(
                torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 2048),
                torch.nn.ReLU(), torch.nn.Linear(2048, 2),
            )  # fmt: skip

        def training_step(self, batch: Any, _: int) -> Any:
            x, y = batch
            return torch.nn.functional.cross_entropy(self.net(x), y)

        def validation_step(self, batch: Any, _: int) -> None:
            x, y = batch
            self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

        def train_dataloader(self) -> Any:
            data = make_data(torch, 200_000, 0)
            return torch.utils.data.DataLoader(data, batch_size=self.batch_size, shuffle=True)

        def val_dataloader(self) -> Any:
            return torch.utils.data.DataLoader(make_data(torch, 20_000, 1), batch_size=1024)

    class Probe(pl.Callback):
        """Reads the counter where the callback opens and closes its window; times epochs."""

        def __init__(self) -> None:
            self.start_mj = 0
            self.last_mj = 0
            self.epoch_started = 0.0
            self.epochs: list[float] = []

        def on_train_start(self, trainer: Any, module: Any) -> None:
            self.start_mj = counter_mj(pynvml, torch)

        def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
            torch.cuda.synchronize()
            self.epoch_started = time.perf_counter()

        def on_validation_end(self, trainer: Any, module: Any) -> None:
            if not trainer.sanity_checking:
                torch.cuda.synchronize()
                self.last_mj = counter_mj(pynvml, torch)
                self.epochs.append(time.perf_counter() - self.epoch_started)

    job = JobSpec(job_id_prefix=f"gpu-check-{repeat}", batch_sizes=[256], default_batch_size=256,
                  target_metric=2.0, max_epochs=epochs)  # fmt: skip  # never converges early
    probe = Probe()
    callbacks: list[Any] = [probe]
    bso = None
    in_hooks: list[float] = []  # seconds the callback spent in each of its per-epoch hooks
    if with_callback:
        bso = ZeusBSOCallback(server, job, monitor="val_acc")
        callbacks.insert(0, bso)  # its window opens first, the probe's right after
        for hook in ("on_validation_end", "on_train_epoch_end"):
            setattr(bso, hook, timed(getattr(bso, hook), in_hooks))
    trainer = pl.Trainer(
        accelerator="cuda", devices=1, max_epochs=epochs, callbacks=callbacks,
        logger=False, enable_checkpointing=False, enable_progress_bar=False,
        num_sanity_val_steps=0,
    )  # fmt: skip
    trainer.fit(Model())
    return {"probe_j": (probe.last_mj - probe.start_mj) / 1000.0, "epochs_s": probe.epochs,
            "hook_s_per_epoch": sum(in_hooks) / epochs,
            "job_id": bso.job_id if bso else None,
            "trial": bso.trial_number if bso else None}  # fmt: skip


def hf_run(server: str, epochs: int) -> dict[str, Any]:
    import pynvml
    import torch
    import transformers

    from zeus_bso import JobSpec
    from zeus_bso.integrations.huggingface import ZeusBSOTrainerCallback

    class Data(torch.utils.data.Dataset):  # type: ignore[misc]
        def __init__(self, n: int, seed: int) -> None:
            g = torch.Generator().manual_seed(seed)
            self.ids = torch.randint(0, 1000, (n, 64), generator=g)
            self.labels = (self.ids[:, 0] > 500).long()

        def __len__(self) -> int:
            return len(self.ids)

        def __getitem__(self, i: int) -> dict[str, Any]:
            return {"input_ids": self.ids[i], "labels": self.labels[i]}

    class Probe(transformers.TrainerCallback):  # type: ignore[misc]
        start_mj = 0
        last_mj = 0

        def on_train_begin(self, *args: Any, **kwargs: Any) -> None:
            self.start_mj = counter_mj(pynvml, torch)

        def on_evaluate(self, *args: Any, **kwargs: Any) -> None:
            torch.cuda.synchronize()
            self.last_mj = counter_mj(pynvml, torch)

    job = JobSpec(job_id_prefix="gpu-check-hf", batch_sizes=[64], default_batch_size=64,
                  target_metric=2.0, max_epochs=epochs)  # fmt: skip
    callback = ZeusBSOTrainerCallback(server, job, metric="eval_accuracy")
    probe = Probe()
    config = transformers.BertConfig(vocab_size=1000, hidden_size=256, num_hidden_layers=4,
                                     num_attention_heads=4, intermediate_size=1024,
                                     max_position_embeddings=64, num_labels=2)  # fmt: skip
    with tempfile.TemporaryDirectory() as out:
        args = transformers.TrainingArguments(
            out, per_device_train_batch_size=callback.start(), num_train_epochs=epochs,
            eval_strategy="epoch", save_strategy="no", logging_strategy="no", report_to=[],
            disable_tqdm=True,
        )  # fmt: skip
        trainer = transformers.Trainer(
            model=transformers.BertForSequenceClassification(config), args=args,
            train_dataset=Data(20_000, 0), eval_dataset=Data(2_000, 1),
            compute_metrics=lambda p: {"accuracy": float((p.predictions.argmax(-1)
                                                          == p.label_ids).mean())},
            callbacks=[callback, probe],
        )  # fmt: skip
        trainer.train()
    return {"probe_j": (probe.last_mj - probe.start_mj) / 1000.0,
            "job_id": callback.job_id,
            "trial": callback.trial_number}  # fmt: skip


def measured_run(steps: int) -> dict[str, Any]:
    """Matrix products on GPU 0 inside this process's group, measured as the callbacks measure a
    run (`zeus_bso.training.collectives`: the run's GPUs, its seconds and energy gathered over the
    ranks), and GPU 0's counter read independently over the same window. Every rank must call it."""
    import pynvml
    import torch

    from zeus_bso.client.progress import TrialProgress
    from zeus_bso.energy import NVMLMeter
    from zeus_bso.training.collectives import (
        DISTRIBUTED,
        elapsed_of_the_run,
        gpus_of_the_run,
        open_window,
    )

    meter = NVMLMeter()  # every GPU of the node, as torchrun leaves CUDA_VISIBLE_DEVICES
    try:
        gpus = gpus_of_the_run(DISTRIBUTED, meter)
        progress = TrialProgress(meter)
        open_window(DISTRIBUTED, progress)
        start_mj = counter_mj(pynvml, torch)
        a = torch.randn(4096, 4096, device="cuda")
        b = torch.randn(4096, 4096, device="cuda")
        for _ in range(steps):
            torch.mm(a, b)
        torch.cuda.synchronize()
        elapsed, _ = elapsed_of_the_run(DISTRIBUTED, progress)  # and the metrics: none
        end_mj = counter_mj(pynvml, torch)
    finally:
        meter.close()
    return {"gpus": gpus.model_dump(), "seconds": elapsed.seconds, "recorded_j": elapsed.joules,
            "nvml_j": (end_mj - start_mj) / 1000.0}  # fmt: skip


def nccl_check() -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29517")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1)
    try:
        run = measured_run(50)
    finally:
        dist.destroy_process_group()
    return {"backend": "nccl", "gpus": run["gpus"], "energy_j": run["recorded_j"]}


def _two_ranks_worker(rank: int, port: int, out: str) -> None:
    """One of two ranks that both train on GPU 0; rank 0 writes what the run measured."""
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    try:
        torch.cuda.set_device(0)
        run = measured_run(1500)
        if rank == 0:
            Path(out).write_text(json.dumps({"backend": "gloo", "ranks": 2, **run}))
    finally:
        dist.destroy_process_group()


def two_ranks_check() -> dict[str, Any]:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "two_ranks.json"
        mp.spawn(_two_ranks_worker, args=(free_port(), str(out)), nprocs=2, join=True)
        result: dict[str, Any] = json.loads(out.read_text())
    result["energy_error"] = result["recorded_j"] / result["nvml_j"] - 1
    return result


def trial_energy(server: str, job_id: str, trial: int) -> float:
    from zeus_bso.client import ServerClient

    with ServerClient(server) as client:
        state = client.job_state(job_id)
    return float(next(t for t in state["trials"] if t["trial_number"] == trial)["energy"])


def lightning_check(url: str, epochs: int, repeats: int) -> dict[str, Any]:
    """Parts 1 and 2: energy against NVML, and the overhead per epoch."""
    with_cb, without_cb = [], []
    for repeat in range(repeats):  # a job each: a trial that never converges ends its job
        with_cb.append(lightning_fit(url, True, epochs, repeat))
        without_cb.append(lightning_fit(url, False, epochs, repeat))
    first = with_cb[0]
    recorded = trial_energy(url, first["job_id"], first["trial"])
    epoch_with = statistics.median(t for run in with_cb for t in run["epochs_s"][1:])
    epoch_without = statistics.median(t for run in without_cb for t in run["epochs_s"][1:])
    return {"recorded_j": recorded, "nvml_j": first["probe_j"],
            "energy_error": recorded / first["probe_j"] - 1,
            "epoch_s_with": epoch_with, "epoch_s_without": epoch_without,
            "overhead": epoch_with / epoch_without - 1,
            "hook_s_per_epoch": statistics.median(run["hook_s_per_epoch"] for run in with_cb),
            "epochs_s_with": [run["epochs_s"] for run in with_cb],
            "epochs_s_without": [run["epochs_s"] for run in without_cb]}  # fmt: skip


def hf_check(url: str, epochs: int) -> dict[str, Any]:
    """Part 3: the HF Trainer's energy against NVML."""
    hf = hf_run(url, epochs)
    recorded = trial_energy(url, hf["job_id"], hf["trial"])
    return {"recorded_j": recorded, "nvml_j": hf["probe_j"],
            "energy_error": recorded / hf["probe_j"] - 1}  # fmt: skip


def attempt(part: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """A part's figures, or its error: one part that fails leaves the others to run."""
    try:
        return part()
    except Exception as err:  # reported, and the other parts still run
        traceback.print_exc()
        return {"failed": f"{type(err).__name__}: {err}"}


def energy_row(check: str, result: dict[str, Any]) -> str:
    if "failed" in result:
        why = result["failed"]
        return f"| {check} | {why if why == NOT_RUN else f'failed: {why}'} | | | within 2% |"
    return (f"| {check} | {result['recorded_j']:.1f} | {result['nvml_j']:.1f} | "
            f"{100 * result['energy_error']:+.2f}% | within 2% |")  # fmt: skip


NOT_RUN = "not run (--parts)"
PARTS = (
    "lightning", "huggingface", "nccl", "two_ranks", "oom", "hf_oom", "accumulation", "power",
    "window", "check", "fsdp", "sharing", "retry",
)  # fmt: skip


def part_lines(label: str, result: dict[str, Any] | None, says: Callable[[Any], str]) -> list[str]:
    """A part that passes or fails its own checks (``says``: what it found), or failed to
    run; nothing for one left out."""
    if result is None:
        return []
    if "failed" in result:
        return [f"{label}: failed: {result['failed']}", ""]
    return [f"{label}: {says(result)}: {'passed' if result['passed'] else 'FAILED'}.", ""]


def trainable_lines(results: dict[str, Any]) -> list[str]:
    """Parts 6, 7 and 9 to 14 (part 8 is a row of the energy table)."""
    oom = part_lines("Out of memory", results.get("oom"), lambda r: (
        f"trials {r['trials']} (memory caps {r['memory_caps']}); the fit finished at "
        f"{r['trained_batch_size']} (largest step {r['largest_step_batch']}), learning rate "
        f"{r['lr']:g} (linear rule: {r['lr_expected']:g}), trained on {r['trained_on']}, "
        f"peak memory {r['peak_memory_gib']:.1f} GiB; next run "
        f"{r['next_run']['batch_size']}"))  # fmt: skip
    hf_oom = part_lines("Out of memory, HF auto_find_batch_size", results.get("hf_oom"),
                        lambda r: (
        f"trials {r['trials']} (memory caps {r['memory_caps']}); the Trainer went on at "
        f"{r['trainer_batch_size']} (largest step {r['largest_step_batch']}), learning rate "
        f"{r['lr']:g} (linear rule: {r['lr_expected']:g}), trained on {r['trained_on']}, "
        f"peak memory {r['peak_memory_gib']:.1f} GiB; next run "
        f"{r['next_run']['batch_size']}"))  # fmt: skip
    power = part_lines("Power limits, read only", results.get("power"), lambda r: (
        f"GPU {r['uuid']} allows {r['min_w']:g} to {r['max_w']:g} W (default {r['default_w']}), "
        f"at {r['limit_w']:g} W; a profile would measure "
        f"{', '.join(f'{w:g}' for w in r['profiled_w'])} W; its energy counter changes "
        + ("never" if r["counter_update_ms"] is None
           else f"every {r['counter_update_ms']:.3g} ms (median)")
        + "; nothing set"))  # fmt: skip
    window = part_lines("Power profile windows, nothing set", results.get("window"), lambda r: (
        f"the energy counter updates every {r['counter_period_ms']:.3g} ms; a step's energy over "
        f"{len(r['short_j_per_step'])} windows of {r['short_steps']} steps: "
        f"{', '.join(f'{j:.3g}' for j in r['short_j_per_step'])} J (spread "
        f"{100 * r['short_spread']:.0f}%); lengthened to {r['lengthened_steps']} steps: "
        f"{', '.join(f'{j:.3g}' for j in r['lengthened_j_per_step'])} J (spread "
        f"{100 * r['lengthened_spread']:.1f}%, goal: at most 10%)"))  # fmt: skip
    check = part_lines("zeus-bso check", results.get("check"), lambda r: (
        f"energy: {r['checks']['energy']['says']}; power limits: "
        f"{r['checks']['power limits']['says']}"))  # fmt: skip
    fsdp = part_lines("A sharded model (FSDP)", results.get("fsdp"), lambda r: (
        f"{r['strategy']}: trials {r['trials']}, {r['forward_steps']} training steps for the "
        f"fit's {r['global_step']} (none tried first); said: {r['said'][0] if r['said'] else '-'}; "
        f"trained on {r['trained_on']}"))  # fmt: skip
    sharing = part_lines("A GPU another process computes on", results.get("sharing"), lambda r: (
        f"alone, the outcome names {r['alone'] or 'no GPU'}; beside another process, "
        f"{r['shared'] or 'no GPU'}, with {len(r['warnings'])} warning(s): "
        f"{r['line']}"))  # fmt: skip
    retry = part_lines("Out of memory mid-run, then until_converged", results.get("retry"),
                       lambda r: (
        f"trials {r['trials']}; each attempt's model held {r['ballast_gib']:.1f} of "
        f"{r['gpu_memory_gib']:.1f} GiB; allocated as each attempt began: "
        f"{', '.join(f'{g:.2f}' for g in r['started_with'])} GiB; converged: "
        f"{r['converged']}"))  # fmt: skip
    return oom + hf_oom + power + window + check + fsdp + sharing + retry


def report(results: dict[str, Any], repeats: int) -> list[str]:
    left_out = {"failed": NOT_RUN}
    lightning = results.get("lightning", left_out)
    nccl, two = results.get("nccl", left_out), results.get("two_ranks", left_out)
    lines = [
        f"# GPU check on {results['gpu']}",
        "",
        f"torch {results['torch']}, driver {results['driver']}; {results['epochs']} epochs a fit.",
        "",
        "| check | server | NVML, read independently | difference | goal |",
        "|---|---:|---:|---:|---|",
        energy_row("Lightning energy (J)", lightning),
        energy_row("HF Trainer energy (J)", results.get("huggingface", left_out)),
        energy_row("Two ranks on GPU 0, energy gathered (J)", two),
        energy_row("Accumulated run (4 x 256), energy (J)", results.get("accumulation", left_out)),
        "",
        *trainable_lines(results),
    ]
    if "failed" in lightning:
        lines.append(f"Epoch time: not measured (the Lightning part: {lightning['failed']}).")
    else:
        without = [t for run in lightning["epochs_s_without"] for t in run[1:]]
        spread = (max(without) - min(without)) / lightning["epoch_s_without"]
        hook = lightning["hook_s_per_epoch"]
        lines.append(
            f"Overhead: the callback's per-epoch hooks (its report to the server, the stop "
            f"decision) took {1000 * hook:.1f} ms an epoch, "
            f"{100 * hook / lightning['epoch_s_without']:.2f}% of a "
            f"{lightning['epoch_s_without']:.2f} s epoch (goal: at most 1%); it does nothing per "
            f"step. Epoch times, medians over {repeats} fits each way of {results['epochs']} "
            f"epochs (the first left out): {lightning['epoch_s_with']:.3f} s with the callback, "
            f"{lightning['epoch_s_without']:.3f} s without ({100 * lightning['overhead']:+.2f}%); "
            f"epoch times without it spread over {100 * spread:.0f}% of their median (the data "
            "loader is CPU-bound), more than the hooks could move them, so the hooks are timed "
            "directly."
        )
    lines.append("")
    if "failed" in nccl:
        lines.append(f"NCCL (world size 1): failed: {nccl['failed']}")
    else:
        lines.append(f"NCCL (world size 1): the run's GPUs {nccl['gpus']}, energy gathered "
                     f"{nccl['energy_j']:.1f} J.")  # fmt: skip
    if "failed" not in two:
        lines += ["", f"Two ranks on GPU 0 (gloo): the run's GPUs {two['gpus']} over "
                      f"{two['seconds']:.1f} s (goal: one GPU)."]  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the figures go")
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS),
                        help="the parts to run (default: all)")  # fmt: skip
    parser.add_argument(
        "--report-only", action="store_true",
        help="rewrite gpu_check.md from the gpu_check.json in --out; run nothing",
    )  # fmt: skip
    args = parser.parse_args()
    if args.report_only:
        saved = json.loads((args.out / "gpu_check.json").read_text())
        lines = report(saved, saved.get("repeats", args.repeats))
        (args.out / "gpu_check.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        return
    torch, pynvml = requirements()

    results: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "driver": str(pynvml.nvmlSystemGetDriverVersion()), "epochs": args.epochs,
        "repeats": args.repeats,
    }  # fmt: skip
    parts = set(args.parts)
    with tempfile.TemporaryDirectory() as tmp, running_server(f"sqlite:///{tmp}/bso.db") as url:
        served: dict[str, Callable[[], dict[str, Any]]] = {
            "lightning": lambda: lightning_check(url, args.epochs, args.repeats),
            "huggingface": lambda: hf_check(url, args.epochs),
            "oom": lambda: oom_and_lr_check(url, "cuda"),
            "hf_oom": lambda: hf_oom_check(url, "cuda"),
            "accumulation": lambda: accumulation_check(url, "cuda"),
            "check": lambda: command_check(url),
            "fsdp": lambda: fsdp_check(url, "cuda"),
            "sharing": lambda: sharing_check(url, "cuda"),
            "retry": lambda: retry_check(url, "cuda"),
        }
        for part, run in served.items():
            if part in parts:
                results[part] = attempt(run)
    alone: dict[str, Callable[[], dict[str, Any]]] = {
        "nccl": nccl_check, "two_ranks": two_ranks_check, "power": power_read_check,
        "window": lambda: profile_window_check("cuda"),
    }  # fmt: skip
    for part, run in alone.items():
        if part in parts:
            results[part] = attempt(run)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_check.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = report(results, args.repeats)
    (args.out / "gpu_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    failed = [p for p in PARTS if p in results and ("failed" in results[p]
              or results[p].get("passed") is False)]  # fmt: skip
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
