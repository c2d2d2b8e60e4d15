"""Real training, not the trace: a recurring job on the CPU, through a real server, with the
Lightning callback, in three setups, against a brute-force oracle.

The job: scikit-learn's handwritten digits (1,797 8x8 images, shipped with the package), a
small MLP trained with plain SGD whose learning rate was tuned at the default batch size (32).
A run converges when its validation accuracy reaches the target. Each run's cost is the job's
cost (``eta`` x energy + (1 - eta) x max power x time) of its real CPU time, with energy
estimated at a fixed power (`EstimateMeter`): what it is priced by is its compute.

Setups, each ``--recurrences`` runs of the job through its own server:

- ``none``: the callback with ``lr_rule="none"`` (the rate stays the one tuned at 32);
- ``linear``: the recommended rule for SGD (``lr_rule="linear"``);
- ``default``: always the default batch size (a job pinned to it: the same callback and
  reports, no optimizer).

The oracle: every batch size's expected cost to deliver a model, with each rule, measured by
brute force (``--oracle-seeds`` runs each, of a job pinned to the size, through the server with
the callback, so that they pay the same per-epoch reports as the setups; the converged runs'
mean cost plus, for the share that missed the target, the failed runs it takes, as the
simulator prices the trace); the oracle pays the cheapest every recurrence. Prints and saves
(``benchmarks/results/real_training.json``) each setup's chosen batch sizes and cumulative
time, energy and cost, and each against the oracle.

On a loaded CPU (``--loaded``): the ``linear`` setup with each early-stop reference
(``best_run``, the cheapest converged run; ``best_mean``, the lowest mean of a size's converged
runs) while busy processes come and go on every core (a shared machine: a run's pace depends on
what else runs), each with the same seeded load; prints and saves
(``benchmarks/results/real_training_loaded.json``) each one's cost and its runs stopped on
their cost at a batch size that had converged before.

Needs the lightning extra and scikit-learn::

    pip install -e '.[server,lightning]' scikit-learn
    python benchmarks/real_training.py --recurrences 30
    python benchmarks/real_training.py --loaded --recurrences 20
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

try:
    import lightning.pytorch as pl
    import torch
    from sklearn.datasets import load_digits
except ImportError as err:  # pragma: no cover - a benchmark's own requirement
    raise SystemExit(
        f"{err.name} is missing: pip install -e '.[server,lightning]' scikit-learn"
    ) from err

from _server import running_server
from zeus_bso import JobSpec, JobSpecFromClient
from zeus_bso.client import ServerClient
from zeus_bso.energy import EstimateMeter
from zeus_bso.integrations.lightning import ZeusBSOCallback
from zeus_bso.policy import zeus_cost

BATCH_SIZES = [8, 16, 32, 64, 128, 256, 512]
DEFAULT = 32
LR = 0.1
"""Tuned at the default batch size: the cheapest rate that reaches the target there reliably."""
TARGET = 0.95
MAX_EPOCHS = 30
WATTS = 100.0
ETA = 0.5
RESULTS = Path(__file__).parent / "results" / "real_training.json"


def digits() -> tuple[Any, Any]:
    """The digits as (train, validation) datasets: a fixed 80/20 split, scaled to [0, 1]."""
    data = load_digits()
    x = torch.tensor(data.data, dtype=torch.float32) / 16.0
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    x, y = x[order], y[order]
    cut = int(0.8 * len(x))
    dataset = torch.utils.data.TensorDataset
    return dataset(x[:cut], y[:cut]), dataset(x[cut:], y[cut:])


TRAIN, VAL = digits()


class DigitsMLP(pl.LightningModule):
    def __init__(self, batch_size: int = DEFAULT) -> None:
        super().__init__()
        self.batch_size = batch_size
        self.net = torch.nn.Sequential(
            torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
        )

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(TRAIN, batch_size=self.batch_size, shuffle=True)

    def val_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(VAL, batch_size=512)

    def training_step(self, batch: Any, _: int) -> Any:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch: Any, _: int) -> None:
        x, y = batch
        self.log("val_acc", (self.net(x).argmax(1) == y).float().mean())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=LR)


def trainer(callbacks: list[Any], root: Path) -> pl.Trainer:
    return pl.Trainer(
        callbacks=callbacks,
        max_epochs=MAX_EPOCHS,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(root),
    )


@dataclass
class Setup:
    name: str
    batch_sizes: list[int] = field(default_factory=list)
    converged: list[bool] = field(default_factory=list)
    time: float = 0.0
    energy: float = 0.0
    cost: float = 0.0
    cost_stops: int = 0
    """Runs stopped on their cost at a batch size that had converged before."""


def recurrences_through_a_server(
    rule: str, count: int, root: Path, reference: str = "best_mean"
) -> Setup:
    setup = Setup(rule if reference == "best_mean" else f"{rule}/{reference}")
    with tempfile.TemporaryDirectory() as db, running_server(f"sqlite:///{db}/bso.db") as url:
        spec = JobSpec(
            job_id_prefix=f"digits-{rule}",
            batch_sizes=BATCH_SIZES,
            default_batch_size=DEFAULT,
            target_metric=TARGET,
            max_epochs=MAX_EPOCHS,
            eta_knob=ETA,
            mab_seed=7,
            early_stop_reference=reference,
        )
        for index in range(count):
            pl.seed_everything(1000 + index, verbose=False)
            callback = ZeusBSOCallback(
                url, spec, monitor="val_acc", energy_meter=EstimateMeter(WATTS), lr_rule=rule
            )
            trainer([callback], root).fit(DigitsMLP())
            assert callback.job_id is not None
            assert callback.batch_size is not None
            setup.batch_sizes.append(callback.batch_size)
            outcome = callback.outcome
            setup.converged.append(bool(outcome is not None and outcome.converged))
            print(f"  {rule:>7} #{index + 1:>2}: batch size {callback.batch_size:>4}", flush=True)
        with ServerClient(url) as client:
            trials = client.trials(callback.job_id)  # oldest first
        converged: set[int] = set()
        for trial in trials:  # every run's measured spending, as the server recorded it
            setup.time += trial.time or 0.0
            setup.energy += trial.energy or 0.0
            stopped = "cost upper bound" in (trial.message or "")
            setup.cost_stops += stopped and trial.batch_size in converged
            if trial.converged:
                converged.add(trial.batch_size)
        setup.cost = zeus_cost(setup.energy, setup.time, ETA, WATTS)
    return setup


def pinned_runs(
    url: str, size: int, rule: str, seeds: list[int], root: Path
) -> list[tuple[bool, float, float]]:
    """Runs of a job pinned to ``size`` through the server, with the callback (the same
    per-epoch reports as the optimized setups): whether each converged, and its seconds and
    joules as the server recorded them. A pinned run stops at its target or ``max_epochs``."""
    meter = EstimateMeter(WATTS)
    job_id = f"digits-pinned-{rule}-{size}"
    spec = JobSpec(
        job_id=job_id,
        job_id_prefix="digits-pinned",
        batch_sizes=BATCH_SIZES,
        default_batch_size=DEFAULT,
        target_metric=TARGET,
        max_epochs=MAX_EPOCHS,
        eta_knob=ETA,
    )
    gpus = {
        "max_power": meter.max_power,
        "number_of_gpus": meter.device_count,
        "gpu_model": meter.device_model,
    }
    with ServerClient(url) as client:
        # The rule is part of the job's settings: registered with it, as the callback sends it.
        lr_rule = None if rule == "none" else rule
        fields = spec.model_dump(exclude={"lr_rule"})
        client.register_job(JobSpecFromClient(**fields, lr_rule=lr_rule, **gpus))
        client.pin(job_id, size)
    runs = []
    for seed in seeds:
        pl.seed_everything(seed, verbose=False)
        callback = ZeusBSOCallback(url, spec, monitor="val_acc", energy_meter=meter, lr_rule=rule)
        trainer([callback], root).fit(DigitsMLP())
        assert callback.batch_size == size
        outcome = callback.outcome
        runs.append((bool(outcome is not None and outcome.converged), outcome))
    with ServerClient(url) as client:
        trials = client.trials(job_id)  # oldest first
    return [
        (converged, trial.time or 0.0, trial.energy or 0.0)
        for (converged, _), trial in zip(runs, trials, strict=True)
    ]


def always_the_default(count: int, root: Path) -> Setup:
    """The default batch size every recurrence, through the server with the callback (a job
    pinned to it), so that it pays the same reports as the other setups."""
    setup = Setup("default")
    with tempfile.TemporaryDirectory() as db, running_server(f"sqlite:///{db}/bso.db") as url:
        seeds = [1000 + index for index in range(count)]
        for converged, seconds, joules in pinned_runs(url, DEFAULT, "none", seeds, root):
            setup.batch_sizes.append(DEFAULT)
            setup.converged.append(converged)
            setup.time += seconds
            setup.energy += joules
    setup.cost = zeus_cost(setup.energy, setup.time, ETA, WATTS)
    return setup


def expected_cost(runs: list[tuple[bool, float]]) -> float:
    """What delivering one model at a batch size costs in expectation, from runs of it (whether
    each converged, and its cost): the converged runs' mean, plus ``(1 - p) / p`` failed runs
    (``p`` the share that converged), as the simulator prices the trace; inf if none did."""
    converged = [cost for ok, cost in runs if ok]
    if not converged:
        return math.inf
    failed = [cost for ok, cost in runs if not ok]
    p = len(converged) / len(runs)
    failed_cost = statistics.fmean(failed) if failed else 0.0
    return statistics.fmean(converged) + (1 - p) / p * failed_cost


def oracle(seeds: int, root: Path) -> dict[str, dict[int, float]]:
    """Each rule's expected cost to deliver a model at each batch size (`expected_cost` of
    ``seeds`` runs), the runs made as the setups' are: through the server, with the callback
    (a job pinned to the size), so that every setup and the oracle pay the same reports."""
    table: dict[str, dict[int, float]] = {}
    with tempfile.TemporaryDirectory() as db, running_server(f"sqlite:///{db}/bso.db") as url:
        for rule in ("none", "linear"):
            table[rule] = {}
            for size in BATCH_SIZES:
                runs = pinned_runs(url, size, rule, [2000 + seed for seed in range(seeds)], root)
                priced = [(ok, zeus_cost(j, t, ETA, WATTS)) for ok, t, j in runs]
                table[rule][size] = expected_cost(priced)
                print(f"  oracle {rule:>6} {size:>4}: {table[rule][size]:.1f}", flush=True)
    return table


HOG = """
import random, sys, time
rng = random.Random(int(sys.argv[1]))
while True:
    end = time.monotonic() + rng.uniform(0.2, 2.0)
    while time.monotonic() < end:
        pass
    time.sleep(rng.uniform(0.2, 2.0))
"""
"""A busy process that comes and goes: busy 0.2-2 s, idle 0.2-2 s, seeded."""


@contextmanager
def loaded_cpu(seed: int) -> Iterator[None]:
    """One `HOG` per core while the block runs."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", HOG, str(seed * 100 + core)])
        for core in range(os.cpu_count() or 1)
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def run_loaded(recurrences: int, out: Path) -> None:
    """The ``linear`` setup with each early-stop reference on a loaded CPU (``--loaded``)."""
    setups = []
    with tempfile.TemporaryDirectory() as tmp:
        for reference in ("best_run", "best_mean"):
            print(f"{reference}, on a loaded CPU", flush=True)
            with loaded_cpu(seed=1):
                setups.append(
                    recurrences_through_a_server("linear", recurrences, Path(tmp), reference)
                )
    print(f"{'setup':>16} {'cost':>9} {'time s':>8} {'converged':>10} {'cost stops':>10}")
    for s in setups:
        print(
            f"{s.name:>16} {s.cost:>9.1f} {s.time:>8.1f} {sum(s.converged):>6}/"
            f"{len(s.converged):<3} {s.cost_stops:>10}  {s.batch_sizes}"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {"recurrences": recurrences, "cores": os.cpu_count(), "setups": setups}
    out.write_text(json.dumps(data, default=asdict, indent=2) + "\n")
    print(f"saved {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--recurrences", type=int, default=20)
    parser.add_argument("--oracle-seeds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--loaded", action="store_true", help="only the early-stop references on a loaded CPU"
    )
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    if args.loaded:
        run_loaded(args.recurrences, args.out or RESULTS.with_name("real_training_loaded.json"))
        return
    args.out = args.out or RESULTS
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print("oracle (brute force)", flush=True)
        table = oracle(args.oracle_seeds, root)
        setups = [
            recurrences_through_a_server("linear", args.recurrences, root),
            recurrences_through_a_server("none", args.recurrences, root),
            always_the_default(args.recurrences, root),
        ]
    best = min(min(row.values()) for row in table.values())
    best_at = [(rule, size) for rule, row in table.items() for size, c in row.items() if c == best]
    oracle_cost = best * args.recurrences
    print(f"\noracle: {best_at[0]} at {best:.1f} per run; {oracle_cost:.1f} for all")
    print(f"{'setup':>8} {'cost':>9} {'x oracle':>9} {'time s':>8} {'converged':>10}  batch sizes")
    for s in setups:
        print(
            f"{s.name:>8} {s.cost:>9.1f} {s.cost / oracle_cost:>9.2f} {s.time:>8.1f} "
            f"{sum(s.converged):>6}/{len(s.converged):<3}  {s.batch_sizes}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "recurrences": args.recurrences,
                "target": TARGET,
                "eta": ETA,
                "watts": WATTS,
                "batch_sizes": BATCH_SIZES,
                "default": DEFAULT,
                "oracle": {r: {str(b): c for b, c in row.items()} for r, row in table.items()},
                "oracle_cost": oracle_cost,
                "setups": [asdict(s) | {"x_oracle": s.cost / oracle_cost} for s in setups],
            },
            indent=2,
        )
        + "\n"
    )
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
