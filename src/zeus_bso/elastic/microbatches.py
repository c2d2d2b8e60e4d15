"""The gradients of one process's accumulated micro-batches, from which `ElasticBatchSize`
measures the gradient noise without replicas: each micro-batch's own gradient is what its
backward added to the accumulated one.

One copy of the accumulated gradient is kept, its buffers used again within the step; the
squared norms are summed on the device by torch's multi-tensor kernels and read once a step (a
read a parameter tensor a micro-batch is a device synchronisation each on a GPU)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from zeus_bso.errors import ZeusBSOError


class MicroBatchGradients:
    """The micro-batches of the step under way: their gradients' squared norms, and the
    accumulated gradient so far."""

    def __init__(self) -> None:
        self._previous: list[Any] | None = None
        """The step's accumulated gradient so far (None before its first micro-batch)."""
        self._ids: list[int] = []
        """The parameters whose gradients `_previous` holds, in order."""
        self._norms: list[Any] = []
        """Each micro-batch's squared gradient norm this step (tensors, read at the step)."""

    def record(self, torch: Any, parameters: Iterable[Any], accumulation: int) -> None:
        """After a micro-batch's backward: its own gradient's squared norm (the loss divided
        by the ``accumulation`` steps, which this undoes).

        Raises:
            ZeusBSOError: the parameters hold no gradient (called before a backward).
        """
        with_grads = [p for p in parameters if getattr(p, "grad", None) is not None]
        if not with_grads:
            raise ZeusBSOError("record_microbatch() found no gradients: call it after backward()")
        current = [p.grad.detach() for p in with_grads]
        ids = [id(p) for p in with_grads]
        k2 = accumulation * accumulation
        with torch.no_grad():
            previous = self._previous_for(torch, with_grads, ids)
            if previous is None:  # the step's first: its gradient is all there is
                self._norms.append(squared_norm(torch, current) * k2)
                self._previous = [g.clone() for g in current]
            else:
                _subtract(torch, previous, current)  # minus this micro-batch's gradient
                self._norms.append(squared_norm(torch, previous) * k2)
                _copy(torch, previous, current)
                self._previous = previous
        self._ids = ids

    def _previous_for(self, torch: Any, with_grads: list[Any], ids: list[int]) -> list[Any] | None:
        """The accumulated gradient before this micro-batch, one tensor for each of
        ``with_grads`` (their ``ids``; zeros for a parameter that had none yet: one a branch
        the earlier micro-batches did not take); None at the step's first micro-batch."""
        if self._previous is None:
            return None
        if ids == self._ids:
            return self._previous
        kept = dict(zip(self._ids, self._previous, strict=True))
        return [kept[id(p)] if id(p) in kept else torch.zeros_like(p.grad) for p in with_grads]

    def step(self, torch: Any) -> tuple[list[float], float] | None:
        """At the optimizer step: each micro-batch's squared gradient norm and the step's own
        (one transfer from the device), where two micro-batches or more were recorded (None
        otherwise); the next step starts afresh."""
        norms, previous = self._norms, self._previous
        self.forget()
        if len(norms) < 2 or previous is None:
            return None
        *micro, mean_sqr = torch.stack([*norms, squared_norm(torch, previous)]).tolist()
        return micro, mean_sqr

    def forget(self) -> None:
        """Drop what this step's micro-batches recorded (gradients zeroed without a step)."""
        self._norms, self._previous, self._ids = [], None, []


def squared_norm(torch: Any, tensors: list[Any]) -> Any:
    """The squared norm of ``tensors`` together, a float64 tensor on the first one's device
    (the dense ones summed per device by torch's multi-tensor kernels; in float64, so that
    half-precision gradients add up exactly enough; a sparse one, an embedding's
    ``sparse=True`` gradient, by its values)."""
    by_device: dict[Any, list[Any]] = {}
    sparse = []
    for tensor in tensors:
        if tensor.is_sparse:
            sparse.append(tensor)
        else:
            by_device.setdefault(tensor.device, []).append(tensor)
    first = tensors[0].device
    parts = [
        torch.stack(torch._foreach_norm(group)).double().pow(2).sum().to(first)
        for group in by_device.values()
    ]
    parts += [t.coalesce().values().double().pow(2).sum().to(first) for t in sparse]
    return torch.stack(parts).sum()


def _dense(tensors: list[Any]) -> bool:
    return not any(t.is_sparse for t in tensors)


def _subtract(torch: Any, kept: list[Any], values: list[Any]) -> None:
    """``kept[i] -= values[i]`` for each, in one multi-tensor kernel (a sparse one apart)."""
    if _dense(values):
        torch._foreach_sub_(kept, values)
        return
    for i, value in enumerate(values):
        kept[i] = kept[i] - value


def _copy(torch: Any, into: list[Any], values: list[Any]) -> None:
    """``into[i]`` takes ``values[i]``'s values, for each, in one multi-tensor kernel where
    torch has it (a sparse one apart)."""
    foreach_copy = getattr(torch, "_foreach_copy_", None)
    if foreach_copy is not None and _dense(values):
        foreach_copy(into, values)
        return
    for i, value in enumerate(values):
        if value.is_sparse or into[i].is_sparse:
            into[i] = value.clone()
        else:
            into[i].copy_(value)
