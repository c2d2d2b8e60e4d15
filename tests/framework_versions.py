"""What the frameworks' supported releases do differently, for the tests that run on all of them:
the suite's own environment has the newest, and `tests/test_oldest_supported.py` runs the corpus
and the Hugging Face tests at the oldest releases the extras allow. Each is read off the installed
release's own code, not its version number."""

from __future__ import annotations

import inspect
from functools import cache


@cache
def auto_find_shrinks_by_a_tenth() -> bool:
    """Whether Accelerate's ``find_executable_batch_size`` (the HF Trainer's
    ``auto_find_batch_size``) takes 0.9 of the batch size at each out-of-memory error (Accelerate
    1.7 on); before, it halved it."""
    from accelerate.utils.memory import find_executable_batch_size

    return "reduce_batch_size_fn" in inspect.signature(find_executable_batch_size).parameters


def auto_find_sizes(start: int, largest_that_fits: int) -> list[int]:
    """The batch sizes the HF Trainer's ``auto_find_batch_size`` trains at, from ``start``, where
    every size above ``largest_that_fits`` runs out of memory: the last fits."""
    sizes = [start]
    while sizes[-1] > largest_that_fits:
        sizes.append(int(sizes[-1] * 0.9) if auto_find_shrinks_by_a_tenth() else sizes[-1] // 2)
    return sizes


@cache
def trainer_rereads_its_batch_size() -> bool:
    """Whether ``Trainer.train()`` takes the batch size from its arguments again (Transformers 4),
    so that ``per_device_train_batch_size`` set after the Trainer was built still trains; from
    Transformers 5 it trains at the size it took when it was built."""
    import transformers

    source = inspect.getsource(transformers.Trainer.train)
    return "self._train_batch_size = self.args.train_batch_size" in source


@cache
def loop_sets_accumulation_steps() -> bool:
    """Whether the HF Trainer's loop sets ``current_gradient_accumulation_steps`` on the Trainer
    (later 4.x releases on)."""
    from transformers import trainer

    return "self.current_gradient_accumulation_steps = " in inspect.getsource(trainer)


def transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])
