"""The gradients of a DistributedDataParallel model's replicas, from which `ElasticBatchSize`
measures the gradient noise with several processes: each replica's own gradient is read in a
DDP communication hook before the all-reduce, and the mean after it, in the same buffers (the
counterpart of `zeus_bso.elastic.microbatches` for one process)."""

from __future__ import annotations

import logging
from typing import Any

from zeus_bso.training import clean_exit

logger = logging.getLogger(__name__)


class ReplicaGradients:
    """The step under way's buckets: this replica's squared norm of each, before the all-reduce,
    and the all-reduced buffers."""

    def __init__(self) -> None:
        self._squares: list[Any] = []
        """This replica's squared gradient norm of each bucket this step (tensors)."""
        self._reduced: list[Any] = []
        """The buckets' buffers, which hold the replicas' mean once all-reduced."""
        self._buckets: list[int] = []
        """The buckets' indices, in the order the hook saw them."""
        self._warned_sync = False

    def hook(self, state: Any, bucket: Any) -> Any:
        """DDP's communication hook: note this replica's gradient, then all-reduce the bucket
        to the replicas' mean as DDP's own hook does."""
        import torch.distributed as dist

        # Before the all-reduce the bucket holds this replica's gradient. The all-reduce then
        # averages the same buffer in place, and it keeps the mean until the next backward: the
        # step reads it there (the hook only hands DDP the tensor).
        buffer = bucket.buffer()
        self._buckets.append(bucket.index())
        self._squares.append(buffer.detach().pow(2).sum())
        self._reduced.append(buffer)
        group = state if state is not None else dist.group.WORLD
        buffer.div_(dist.get_world_size(group))
        work = dist.all_reduce(buffer, group=group, async_op=True)

        def mean(fut: Any) -> Any:
            return fut.value()[0]

        # The process group's thread runs `mean` and then drops it, which takes the GIL:
        # tracked, so that a fit's end waits for it (see zeus_bso.training.clean_exit).
        return clean_exit.then(work.get_future(), mean)

    def forget(self) -> None:
        """Drop what the backward passes since the last step noted (gradients zeroed without a
        step)."""
        self._squares, self._reduced, self._buckets = [], [], []

    def step(self, torch: Any, replicas: int) -> tuple[float, float] | None:
        """At an optimizer step: the replicas' mean squared norm of their own gradients (the
        same on every rank: one all-reduce) and the squared norm of their mean; None where the
        step had no synchronised backward, or one all-reduced more than once (warned once)."""
        local, reduced, buckets = self._squares, self._reduced, self._buckets
        self.forget()
        if not local:
            return None  # no synchronised backward in this step
        if len(set(buckets)) != len(buckets):
            # Every micro-batch was all-reduced: the later buckets mix replicas' gradients.
            # Every rank sees the same, so every rank skips the same steps.
            if not self._warned_sync:
                logger.warning(
                    "ElasticBatchSize: gradients were all-reduced more than once in a step; "
                    "run all but the last accumulated micro-batch under model.no_sync() "
                    "(Lightning does) or the noise is not measured"
                )
                self._warned_sync = True
            return None
        local_sum = torch.stack(local).sum().double()
        torch.distributed.all_reduce(local_sum)  # over replicas: every rank sees the same
        mean_sqr = float(sum(b.detach().double().pow(2).sum() for b in reduced))
        return float(local_sum) / replicas, mean_sqr
