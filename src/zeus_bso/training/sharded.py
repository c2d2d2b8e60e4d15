"""What shards a model's parameters across processes, each of which then holds a part of them:
its steps cannot be tried outside the strategy (the memory check), nor its weights summed on one
process (`zeus_bso.training.trained_models`)."""

from __future__ import annotations

from typing import Any

SHARDED_MODULES = ("FullyShardedDataParallel", "FSDPModule")
"""The classes of PyTorch's FSDP (its wrapper, and what ``fully_shard`` makes a module) whose
modules hold only each process's shard of their parameters between steps."""


def sharding(model: Any) -> str | None:
    """What shards ``model``'s parameters across processes, where something does: PyTorch's
    FSDP (a wrapper, or ``fully_shard``; or the module inside an FSDP wrapper, as Accelerate's
    ``unwrap_model`` gives it, whose parameters FSDP flattened), DeepSpeed's ZeRO stage 3 (its
    parameters carry a ``ds_id``) or tensor parallelism (``DTensor`` parameters outside an FSDP
    module). None: nothing, and its steps can be tried
    (`zeus_bso.integrations.probe.undone`)."""
    for module in model.modules():
        if any(cls.__name__ in SHARDED_MODULES for cls in type(module).__mro__):
            return "FSDP"
    for parameter in model.parameters():
        if hasattr(parameter, "ds_id"):
            return "DeepSpeed ZeRO-3"
        if type(parameter).__name__ == "DTensor":  # not FSDP's own (its modules are above)
            return "tensor parallelism (DTensor parameters)"
        if sharded_parameter(parameter):
            return "FSDP"
    return None


def sharded_parameter(parameter: Any) -> bool:
    """Whether ``parameter`` is a process's part of a sharded one: a ``DTensor`` (FSDP's
    ``fully_shard``), an FSDP ``FlatParameter`` or a parameter it flattened, or one of
    DeepSpeed's ZeRO stage 3 (``ds_id``)."""
    return (
        type(parameter).__name__ in ("DTensor", "FlatParameter")
        or hasattr(parameter, "_fsdp_flattened")
        or hasattr(parameter, "ds_id")
    )
