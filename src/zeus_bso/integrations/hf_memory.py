"""The Hugging Face Trainer's memory check: training steps of its model, tried and undone
(`zeus_bso.integrations.probe`)."""

from __future__ import annotations

from typing import Any

from zeus_bso.integrations.probe import sharding, step, undone


def sharded(args: Any, model: Any) -> str | None:
    """What shards the Trainer's model across processes: ``TrainingArguments(deepspeed=...)``
    or ``fsdp=...``, or the model's own sharding (an Accelerate configuration's FSDP:
    `zeus_bso.integrations.probe.sharding`). None: nothing does, and its steps can be tried."""
    if getattr(args, "deepspeed", None):
        return "DeepSpeed (TrainingArguments.deepspeed)"
    if getattr(args, "fsdp", None):
        return "FSDP (TrainingArguments.fsdp)"
    return sharding(model)


def try_steps(model: Any, optimizer: Any, loader: Any, size: int, steps: int) -> None:
    """Run ``steps`` training steps of the Trainer's model on this process alone (unwrapped: no
    collective), with the Trainer's optimizer and batches (of ``size`` samples: the Trainer's,
    or a smaller size's from the same data), then undo them: the weights, the optimizer's state
    and the random state are restored. An out-of-memory error is raised."""
    import torch

    if getattr(loader, "batch_size", None) != size:  # the same data, in batches of size
        loader = torch.utils.data.DataLoader(
            loader.dataset, batch_size=size, collate_fn=loader.collate_fn
        )

    device = next(model.parameters()).device
    with undone(model, [optimizer]):
        for _, batch in zip(range(steps), loader, strict=False):
            inputs = {
                k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()
            }
            outputs = model(**inputs)
            # None where the Trainer's compute_loss makes it: the forward pass alone
            step(outputs.get("loss") if isinstance(outputs, dict) else outputs[0], [optimizer])
