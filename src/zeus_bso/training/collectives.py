"""The object collectives the training side needs (`Collectives`): over ``torch.distributed``
when a process group is initialised, and the identity in a single process (`DISTRIBUTED`), or
the identity always (`WORLD_OF_ONE`: a run of one process, even inside a distributed program);
and `from_rank_zero`, the one way a decision made on rank 0 (the one process that talks to the
server) reaches every rank.

Object collectives pickle their value into a tensor on the process group's device (the current
CUDA device under NCCL, the CPU under gloo), so they work under every backend; the callbacks
use them rather than reducing a CPU tensor, which NCCL rejects.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from zeus_bso.client.progress import Elapsed, TrialProgress
from zeus_bso.energy import EnergyMeter
from zeus_bso.energy.devices import run_energy, run_gpus
from zeus_bso.errors import ConfigurationError, ZeusBSOError
from zeus_bso.spec import GpuConfig
from zeus_bso.training import clean_exit

T = TypeVar("T")


LAUNCHER_RANKS = (
    ("RANK", "WORLD_SIZE"),  # torchrun, accelerate launch, Kubeflow's PyTorchJob
    ("SLURM_PROCID", "SLURM_NTASKS"),  # srun
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),  # Open MPI's mpirun
    ("PMI_RANK", "PMI_SIZE"),  # MPICH's and Intel MPI's mpirun
)
"""Where launchers say a process's rank and world size, the first found winning."""


def launcher_rank() -> tuple[int, int]:
    """This process's rank and world size as a launcher gives them before a process group
    exists (`LAUNCHER_RANKS`: torchrun's ``RANK``, else srun's, else MPI's); (0, 1) where none
    is set, or the first set is not whole numbers (then it is not a launcher's)."""
    for rank, world in LAUNCHER_RANKS:
        if rank in os.environ:
            try:
                return int(os.environ[rank]), int(os.environ.get(world, "1"))
            except ValueError:
                return 0, 1
    return 0, 1


def torch_distributed() -> Any | None:
    """``torch.distributed`` when a process group is initialised here, else None."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() and dist.is_initialized() else None


def is_rank_zero(before_group: str) -> bool:
    """Whether this process talks to the server: global rank 0 of the process group, or of the
    launcher's rank before one exists, where a process of another rank could not get rank 0's
    answer (`ConfigurationError`, ``before_group`` saying what to initialise first)."""
    dist = torch_distributed()
    if dist is not None:
        return bool(dist.get_rank() == 0)
    if launcher_rank()[0] != 0:
        raise ConfigurationError(
            f"a process of rank != 0 gets the batch size from rank 0: {before_group}"
        )
    return True


def broadcast_object(value: T) -> T:
    """Rank 0's ``value`` on every rank."""
    dist = torch_distributed()
    if dist is None:
        return value
    clean_exit.register_at_exit()  # the collective's tensors may outlive it on gloo's threads
    box: list[Any] = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]  # type: ignore[no-any-return]


def all_gather_object(value: T) -> list[T]:
    """Every rank's ``value``, in rank order, on every rank."""
    dist = torch_distributed()
    if dist is None:
        return [value]
    clean_exit.register_at_exit()
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def barrier() -> None:
    """Wait until every rank is here (nothing in a single process)."""
    dist = torch_distributed()
    if dist is None:
        return
    clean_exit.register_at_exit()
    if dist.get_backend() == "nccl":
        import torch

        dist.barrier(device_ids=[torch.cuda.current_device()])
    else:
        dist.barrier()


def _alone(value: T) -> list[T]:
    return [value]


def _identity(value: T) -> T:
    return value


def _nothing() -> None:
    return None


@dataclass(frozen=True)
class Collectives:
    """How the processes of one run share objects: every process calls each at once."""

    broadcast: Callable[[Any], Any]
    """Rank 0's picklable object on every rank."""
    all_gather: Callable[[Any], list[Any]]
    """Every rank's picklable object, in rank order, on every rank."""
    barrier: Callable[[], None]
    """Wait until every rank is here."""

    def with_broadcast(self, broadcast: Callable[[Any], Any] | None) -> Collectives:
        """These collectives with a framework's own broadcast (None: these)."""
        return self if broadcast is None else replace(self, broadcast=broadcast)


DISTRIBUTED = Collectives(broadcast_object, all_gather_object, barrier)
"""``torch.distributed``'s collectives when a process group is initialised, else a world of one."""

WORLD_OF_ONE = Collectives(_identity, _alone, _nothing)
"""A run of one process: what it shares, it keeps (a run that talks to the server from one
process of a distributed program, too)."""


def open_window(collectives: Collectives, progress: TrialProgress) -> None:
    """Open the measuring window on every rank at once. Every rank must call it.

    Each rank reads its own devices from its own window; opened together, a device that one
    rank reads is measured over the same time as the run's (rank 0's) clock."""
    collectives.barrier()
    progress.begin()


def gpus_of_the_run(collectives: Collectives, meter: EnergyMeter) -> GpuConfig:
    """The GPUs of the whole run (every rank, every node), each once. Every rank must call it.

    Raises:
        MixedGpuModelsError: on every rank alike, when the run's GPUs are of several models.
    """
    every_rank = collectives.all_gather(list(meter.devices))
    if len(every_rank) == 1:  # a run of one process: its meter's own count and power
        return GpuConfig(
            max_power=meter.max_power,
            number_of_gpus=meter.device_count,
            gpu_model=meter.device_model,
        )
    return run_gpus(every_rank)


def elapsed_of_the_run(
    collectives: Collectives, progress: TrialProgress, metric: object = None
) -> tuple[Elapsed, list[float | None]]:
    """Seconds and joules of the whole run since training began, each device once, and every
    rank's ``metric`` (the number it reports; None where it is not one: a framework's function
    that rank 0 alone calls), in rank order. Every rank must call it.

    The ranks read their devices together (after a barrier), as they opened their windows, and
    the seconds are read at that moment too, so that a run's time and energy span one window
    (rank 0's seconds are the run's; gathering the readings takes time that neither counts)."""
    collectives.barrier()
    seconds, readings = progress.sample()
    gathered = collectives.all_gather((readings, _number(metric)))
    return Elapsed(seconds, run_energy(r for r, _ in gathered)), [m for _, m in gathered]


def _number(metric: object) -> float | None:
    """``metric`` as a number (a float, a tensor of one), or None where it is not one."""
    try:
        return None if callable(metric) else float(metric)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def metrics_apart(metrics: list[float | None]) -> str | None:
    """What to tell a run whose processes reported different metrics (a metric of each one's
    share of the validation set, not gathered): the main process's is the run's, so the server
    judges the run by a part of it. None: they agree (or only one is known)."""
    known = [(rank, m) for rank, m in enumerate(metrics) if m is not None and math.isfinite(m)]
    values = [m for _, m in known]
    if len(values) < 2 or max(values) - min(values) <= 1e-6 * max(1.0, abs(values[0])):
        return None
    shown = ", ".join(f"{m:.4g} on rank {rank}" for rank, m in known[:4])
    return (
        f"zeus-bso: the processes reported different metrics ({shown}"
        f"{', ...' if len(known) > 4 else ''}): the main process's is the run's, so the server "
        "judges the run by its part of the validation set; report a metric of the whole set on "
        "every process (accelerator.gather_for_metrics, fabric.all_reduce, or "
        "torch.distributed.all_reduce)"
    )


NOTHING_FROM_RANK_ZERO = "zeus-bso: nothing from rank 0"
"""What a rank other than 0 sends into `from_rank_zero`'s broadcast: still there after it, no
broadcast took place (no process group)."""


def from_rank_zero(broadcast: Callable[[Any], Any], is_zero: bool, work: Callable[[], T]) -> T:
    """Run ``work`` on rank 0 and give every rank its result, or its error.

    ``broadcast`` sends a picklable object from rank 0 to every rank and returns it there (the
    framework's broadcast). An error on rank 0 is sent too: rank 0 raises it and every other
    rank raises a `ZeusBSOError` naming it, instead of waiting in the next collective.
    """
    clean_exit.register_at_exit()  # the broadcast's tensors may outlive it on gloo's threads
    value: Any = None
    error: Exception | None = None
    if is_zero:
        try:
            value = work()
        except Exception as err:  # every error is shared, then raised again
            error = err
    sent = f"{type(error).__name__}: {error}" if error is not None else None
    if not is_zero:
        sent = NOTHING_FROM_RANK_ZERO  # replaced by rank 0's, unless no broadcast took place
    value, message = broadcast((value, sent))
    if error is not None:
        raise error
    if message == NOTHING_FROM_RANK_ZERO:
        raise ConfigurationError(
            "this process is not rank 0, and nothing reached it from rank 0: its process group "
            "is not initialised yet (launch the processes, e.g. fabric.launch(), or initialise "
            "torch.distributed, before the zeus-bso session starts)"
        )
    if message is not None:
        raise ZeusBSOError(f"rank 0 failed, so this rank stops too: {message}")
    return value  # type: ignore[no-any-return]
