"""Contract test classes, as Optuna ships ``optuna.testing``: a store, a bandit or an energy
meter (in this repository or in a plug-in of yours) subclasses the matching class in its test
module and defines one fixture, and pytest runs every test of the contract on it.

- `StoreContract`: a `zeus_bso.policy.store.JobStore` (fixture ``opened``);
- `BanditContract`: a `zeus_bso.policy.bandits.Bandit` (fixture ``bandit``);
- `MeterContract`: a `zeus_bso.energy.EnergyMeter` (fixture ``meter``);
- `LoopAdapterContract`: a training framework's loop adapter, a `zeus_bso.training.TrialSession`
  (fixture ``adapter``; its ``server_url`` starts a real server, `running_server`);
- `CallbackAdapterContract`: a training framework's callback that drives its own fit, as the
  Lightning and Hugging Face callbacks do (fixture ``fit``, which runs a `ScriptedFit`: the
  metric after each epoch, the batch above which a step runs out of memory; and
  ``make_callback``, which builds the callback alone, for its option checks).

And the NVML test double (`GPU_DOUBLE`, `described_gpus`: a ``pynvml`` over GPUs a test
describes, in processes it starts; `double_in_this_process`, in its own; `paced_gpu`, a GPU whose
steps take the time its power limit gives them; `fail_counter_reads`, the errors a GPU's next
energy-counter reads answer), for a meter, power-limit or adapter test on a machine without a
GPU.

Importing this package needs pytest (the ``dev`` dependency group, or ``pip install pytest``).
"""

try:
    import pytest  # noqa: F401 (the hint, before the contracts import it)
except ImportError as err:
    raise ImportError("zeus_bso.testing needs pytest: pip install pytest") from err

from zeus_bso.testing.adapters import Logged, LoopAdapterContract, MakeAdapter, loop_job
from zeus_bso.testing.bandits import BanditContract
from zeus_bso.testing.callbacks import (
    CallbackAdapterContract,
    FitResult,
    MakeCallback,
    RunFit,
    ScriptedFit,
)
from zeus_bso.testing.gpus import (
    GPU_DOUBLE,
    described_gpus,
    double_in_this_process,
    fail_counter_reads,
    paced_gpu,
)
from zeus_bso.testing.meters import MeterContract
from zeus_bso.testing.server import running_server
from zeus_bso.testing.stores import SIZES, Opener, StoreContract, new_job

__all__ = [
    "GPU_DOUBLE",
    "SIZES",
    "BanditContract",
    "CallbackAdapterContract",
    "FitResult",
    "Logged",
    "LoopAdapterContract",
    "MakeAdapter",
    "MakeCallback",
    "MeterContract",
    "Opener",
    "RunFit",
    "ScriptedFit",
    "StoreContract",
    "described_gpus",
    "double_in_this_process",
    "fail_counter_reads",
    "loop_job",
    "new_job",
    "paced_gpu",
    "running_server",
]
