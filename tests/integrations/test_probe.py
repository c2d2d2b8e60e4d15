"""The adapters' shared "try steps and undo" probe (`zeus_bso.integrations.probe`): after the
steps, the weights, the optimizers' state, the random state and the model's mode are what they
were, whether the steps ended or raised."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the probe needs torch (pip install torch)")

from tests.helpers import process_group_of_one  # noqa: E402
from zeus_bso.integrations import probe  # noqa: E402
from zeus_bso.integrations.probe import (  # noqa: E402
    FIRST_READ,
    longest_batch,
    longest_samples,
    step,
    undone,
)
from zeus_bso.training.sharded import sharding  # noqa: E402


def _model_and_optimizers() -> tuple[object, list[object]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    first = torch.optim.SGD(model[0].parameters(), lr=0.1, momentum=0.9)
    second = torch.optim.Adam(model[2].parameters(), lr=0.01)
    return model, [first, second]


def _steps(model: object, optimizers: list[object], count: int) -> None:
    for _ in range(count):
        loss = model(torch.randn(16, 4)).pow(2).mean()  # type: ignore[operator]
        step(loss, optimizers)


@pytest.mark.parametrize("raises", [False, True])
def test_the_steps_tried_are_undone(raises: bool) -> None:
    model, optimizers = _model_and_optimizers()
    _steps(model, optimizers, 2)  # optimizers with state (momentum, Adam's moments)
    model.eval()  # type: ignore[attr-defined]
    weights = {k: v.clone() for k, v in model.state_dict().items()}  # type: ignore[attr-defined]
    states = [repr(o.state_dict()) for o in optimizers]  # type: ignore[attr-defined]
    rng = torch.random.get_rng_state()
    expected = pytest.raises(RuntimeError) if raises else contextlib.nullcontext()
    with expected, undone(model, optimizers):
        assert model.training  # type: ignore[attr-defined]
        _steps(model, optimizers, 3)
        if raises:
            raise RuntimeError("CUDA out of memory (a stand-in)")
    after = model.state_dict()  # type: ignore[attr-defined]
    assert all(torch.equal(weights[k], after[k]) for k in weights)
    assert [repr(o.state_dict()) for o in optimizers] == states  # type: ignore[attr-defined]
    assert torch.equal(torch.random.get_rng_state(), rng)
    assert not model.training  # type: ignore[attr-defined]
    assert all(p.grad is None for p in model.parameters())  # type: ignore[attr-defined]


def test_frozen_weights_are_neither_copied_nor_changed() -> None:
    """A fine-tuned model's frozen base is most of its weights: the probe copies only what a
    step can change (the trained parameters, the buffers) and restores that. The frozen weight
    here is on the meta device, where a copy raises: it is never read. The trained layer and a
    batch norm's running statistics are restored."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8))
    frozen = torch.nn.Parameter(torch.empty(1024, 1024, device="meta"), requires_grad=False)
    model.register_parameter("frozen_base", frozen)
    optimizer = torch.optim.SGD(model[0].parameters(), lr=0.1, momentum=0.9)
    before = {k: v.clone() for k, v in model.state_dict().items() if k != "frozen_base"}
    with undone(model, [optimizer]):
        for _ in range(3):
            step(model(torch.randn(16, 4)).pow(2).mean(), [optimizer])
        assert not torch.equal(model[1].running_mean, before["1.running_mean"])
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert model.frozen_base is frozen
    assert optimizer.state_dict()["state"] == {}


def test_a_step_without_a_loss_takes_nothing() -> None:
    model, optimizers = _model_and_optimizers()
    before = {k: v.clone() for k, v in model.state_dict().items()}  # type: ignore[attr-defined]
    step(None, optimizers)
    after = model.state_dict()  # type: ignore[attr-defined]
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_a_model_that_fsdp_shards_is_named_and_one_that_nothing_shards_is_not() -> None:
    """The probe's steps run a model outside its strategy; a sharded one holds only this
    process's shard of its parameters between steps (FSDP), so the adapters do not try it."""
    from torch.distributed.fsdp import fully_shard

    model, _ = _model_and_optimizers()
    assert sharding(model) is None
    with process_group_of_one():
        fully_shard(model[0])  # type: ignore[index]
        assert sharding(model) == "FSDP"


@pytest.mark.parametrize("original", [False, True], ids=["flat", "original-parameters"])
def test_the_module_inside_an_fsdp_wrapper_is_named_sharded(original: bool) -> None:
    """Accelerate's ``unwrap_model`` of an FSDP (wrapper) model gives the module inside it,
    which holds no FSDP module: its parameters are FSDP's flattened ones (a view of this
    process's shard), and a loop's check (``steps_of``) must not try its steps."""
    import torch
    from torch.distributed.fsdp import FullyShardedDataParallel

    with process_group_of_one():
        model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
        wrapped = FullyShardedDataParallel(
            model, device_id=torch.device("cpu"), use_orig_params=original
        )
        assert sharding(wrapped.module) == "FSDP"


def test_a_model_of_tensor_parallel_parameters_is_named_sharded() -> None:
    """Tensor parallelism (``parallelize_module``) splits a layer's parameters across processes
    (``DTensor``s outside any FSDP module): a step by hand would need the others' parts."""
    import torch
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

    with process_group_of_one():
        model = torch.nn.Sequential(torch.nn.Linear(2, 3))
        parallelize_module(model, init_device_mesh("cpu", (1,)), {"0": ColwiseParallel()})
        assert sharding(model) == "tensor parallelism (DTensor parameters)"


def test_lightnings_sharding_strategies_are_named() -> None:
    """Lightning's strategies that shard the module, by class (of either package); DDP keeps a
    whole module on each process, and its steps can be tried."""
    strategies = pytest.importorskip("lightning.pytorch.strategies", reason="zeus-bso[lightning]")
    from zeus_bso.integrations.lightning_memory import sharded_by

    model, _ = _model_and_optimizers()
    assert sharded_by(strategies.FSDPStrategy(), model) == "FSDPStrategy"
    assert sharded_by(strategies.ModelParallelStrategy(), model) == "ModelParallelStrategy"
    assert sharded_by(strategies.DDPStrategy(), model) is None
    assert sharded_by(strategies.SingleDeviceStrategy("cpu"), model) is None


def test_the_hf_check_steps_from_the_models_loss_else_from_its_outputs() -> None:
    """The HF Trainer's memory check has the model, not the Trainer: a model whose loss a
    ``compute_loss`` of the script's makes returns logits alone (a tensor, or a dict or tuple
    of them), and a step backs up from their sum, through the same graph (a tensor's first row
    was taken for its loss, which no backward takes); the inputs its ``forward`` does not take
    (the labels that ``compute_loss`` pops) are left out."""
    from zeus_bso.integrations.hf_memory import accepted, loss_of

    model = torch.nn.Linear(4, 2)
    logits = model(torch.randn(8, 4))
    loss = logits.pow(2).mean()
    assert loss_of({"loss": loss, "logits": logits}) is loss
    assert loss_of((loss, logits)) is loss
    for outputs in (logits, (logits,), {"logits": logits, "loss": None}):
        surrogate = loss_of(outputs)
        assert surrogate.numel() == 1
        surrogate.backward(retain_graph=True)
        assert model.weight.grad is not None
        model.zero_grad()
    assert loss_of(torch.zeros(3)) is None  # nothing to back up from
    assert accepted(model) == {"input"}

    class TakesAny(torch.nn.Module):
        def forward(self, **inputs: object) -> None: ...

    assert accepted(TakesAny()) is None


def test_the_longest_samples_are_read_off_a_datasets_arrow_column() -> None:
    """A ``datasets.Dataset`` of token ids of many lengths, shuffled and selected as scripts do
    (an indices mapping over its table): the ``size`` longest, by their place in it."""
    datasets = pytest.importorskip("datasets", reason="reads a datasets.Dataset")
    lengths = [3, 9, 1, 5, 7, 2]
    rows = datasets.Dataset.from_dict({"input_ids": [[1] * n for n in lengths], "label": lengths})
    chosen = rows.shuffle(seed=1).select(range(5))
    found = longest_samples(chosen, 2)
    assert found is not None
    indices, longest = found
    kept = sorted((len(chosen[i]["input_ids"]) for i in range(5)), reverse=True)
    assert sorted(len(chosen[i]["input_ids"]) for i in indices) == sorted(kept[:2])
    assert longest == kept[0]
    shorter = rows.filter(lambda row: len(row["input_ids"]) < 9)  # the 9 left out
    assert longest_samples(shorter, 1) == ([[3, 1, 5, 7, 2].index(7)], 7)
    audio = datasets.Dataset.from_dict({"input_values": [[0.5] * n for n in lengths]})
    assert longest_samples(audio, 1) == ([1], 9)
    # A sequence-to-sequence model's targets count beside its inputs; a class label does not.
    targets = [[2] * n for n in (1, 2, 9, 3)]
    pairs = datasets.Dataset.from_dict({"input_ids": [[1] * 5] * 4, "labels": targets})
    assert longest_samples(pairs, 1) == ([2], 14)
    preferred = {"prompt_ids": [[1] * 4] * 3, "chosen_ids": [[2], [2] * 6, [2] * 2]}
    pairs_of = datasets.Dataset.from_dict({**preferred, "rejected_ids": [[3] * 3] * 3})
    assert longest_samples(pairs_of, 1) == ([1], 13)  # TRL's DPO: prompt, chosen, rejected
    labelled = datasets.Dataset.from_dict(
        {"input_ids": [[1] * n for n in lengths], "labels": lengths}
    )
    assert longest_samples(labelled, 1) == ([1], 9)
    # Not known, or no larger for it: None (the check draws its batches as the run does).
    assert longest_samples(rows, 7) is None  # fewer samples than the size
    padded = datasets.Dataset.from_dict({"input_ids": [[1] * 4] * 6})
    assert longest_samples(padded, 2) is None  # one length
    assert longest_samples(datasets.Dataset.from_dict({"x": lengths}), 2) is None  # no such column
    assert longest_samples(rows.to_iterable_dataset(), 2) is None  # no length to read
    part = torch.utils.data.Subset(rows, [0, 2, 3, 5])  # random_split's: off the table too,
    with pytest.MonkeyPatch.context() as patch:  # reading none of its samples
        patch.setattr(probe, "READ_BUDGET_S", 0.0)
        assert longest_samples(part, 1) == ([2], 5)


class Encodings:
    """The Hugging Face fine-tuning tutorial's dataset: a tokenizer's encodings (token lists of
    many lengths, unpadded) and class labels, each sample made tensors when it is read."""

    def __init__(self, lengths: list[int], *, pause_s: float = 0.0) -> None:
        self.encodings = {"input_ids": [[1] * n for n in lengths]}
        self.encodings["attention_mask"] = [[1] * n for n in lengths]
        self.labels = [n % 2 for n in lengths]
        self.pause_s, self.read = pause_s, 0

    def __getitem__(self, index: int) -> dict[str, Any]:
        self.read += 1
        time.sleep(self.pause_s)  # decoding, tokenizing on the fly
        item = {key: torch.tensor(value[index]) for key, value in self.encodings.items()}
        item["labels"] = torch.tensor(self.labels[index])  # a class: no length
        return item

    def __len__(self) -> int:
        return len(self.labels)


def test_the_longest_samples_of_a_torch_dataset_are_read_where_that_is_quick() -> None:
    """A dataset that keeps no lengths (a torch ``Dataset`` of tokenized texts, a list of
    samples, a ``Subset`` of them) is read sample by sample: its longest samples, by their
    place in it. Where reading every sample would take longer than the check may (samples
    made as they are read), only the first few are read, and the check draws its batches as
    the run does (None); so it does for samples that are not mappings of token lists."""
    lengths = [3, 9, 1, 5, 7, 2]
    found = longest_samples(Encodings(lengths), 2)
    assert found is not None
    assert (sorted(found[0]), found[1]) == ([1, 4], 9)
    as_listed = [{"input_ids": [1] * n, "labels": [2] * 2} for n in lengths]
    assert longest_samples(as_listed, 1) == ([1], 11)  # a target's tokens count beside
    batched = [{"input_ids": torch.ones(1, n)} for n in lengths]  # return_tensors="pt" each
    assert longest_samples(batched, 1) == ([1], 9)
    part = torch.utils.data.Subset(Encodings(lengths), [0, 2, 3, 5])
    assert longest_samples(part, 1) == ([2], 5)
    slow = Encodings([1, 2] * 500, pause_s=0.005)  # 1000 samples: 5 s to read them all
    assert longest_samples(slow, 8) is None
    assert slow.read == FIRST_READ
    encodings = Encodings(lengths)
    assert longest_samples(encodings, 1) == longest_samples(encodings, 1) == ([1], 9)
    assert encodings.read == len(lengths)  # kept for the next size tried
    images = [(torch.ones(3, n, n), 0) for n in lengths]  # no text, no 1-D tensor: not known
    assert longest_samples(images, 1) is None
    assert longest_samples(Encodings([4] * 6), 2) is None  # one length
    assert longest_samples([{"label": n} for n in lengths], 1) is None  # no token list


def test_raw_texts_stand_in_for_their_tokens() -> None:
    """Where a collator tokenizes the texts as it batches, the samples hold no token lists:
    the longest texts stand in for the most tokens (a ``datasets.Dataset``'s string columns,
    in bytes, read off its Arrow data; a torch dataset's texts, a tuple's 1-D tensor of token
    ids, as ``pad_sequence`` pads them). Token lists, where a sample has them, count instead."""
    datasets = pytest.importorskip("datasets", reason="reads a datasets.Dataset")
    words = ["a b", "a b c d e f g h", "a", "a b c d", "a b c d e f g"]
    rows = datasets.Dataset.from_dict({"text": words, "label": [0, 1, 0, 1, 0]})
    assert longest_samples(rows.shuffle(seed=2).select(range(4)), 1) is not None
    found = longest_samples(rows, 2)
    assert found is not None
    assert (sorted(found[0]), found[1]) == ([1, 4], 15)
    assert longest_samples(rows.filter(lambda row: len(row["text"]) < 15), 1) == ([3], 13)
    assert longest_samples([{"text": text} for text in words], 1) == ([1], 15)
    assert longest_samples(words, 1) == ([1], 15)  # a list of texts
    ids = [(torch.ones(len(text.split()), dtype=torch.long), 0) for text in words]
    assert longest_samples(ids, 1) == ([1], 8)
    both = [{"text": "a " * 50, "input_ids": [1]}, {"text": "a", "input_ids": [1, 2, 3]}]
    assert longest_samples(both, 1) == ([1], 3)


class Augmented(Encodings):
    """`Encodings` whose samples are drawn at random as they are read (an augmentation)."""

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = super().__getitem__(index)
        item["input_ids"] = item["input_ids"] * torch.randint(1, 3, (1,))
        random.random()
        np.random.rand()
        return item


def test_reading_and_collating_the_longest_samples_draws_nothing_the_run_would() -> None:
    """Samples read for their lengths and the longest batch's collation may draw at random
    (augmentations, a masking collator's masks); the run then draws what it would have."""
    loader = torch.utils.data.DataLoader(
        Augmented([3, 9, 1, 5]), batch_size=2, collate_fn=lambda rows: rows
    )

    def seeded() -> None:
        torch.manual_seed(0)
        random.seed(0)
        np.random.seed(0)

    def draws() -> tuple[float, float, float]:
        return float(torch.rand(1)), random.random(), float(np.random.rand())

    seeded()
    expected = draws()
    seeded()
    assert longest_batch(loader, 2) is not None
    assert draws() == expected


def test_the_longest_samples_of_other_data_are_not_known() -> None:
    """An iterable dataset, or one whose samples cannot be read by index: None."""

    class Stream(torch.utils.data.IterableDataset):  # type: ignore[misc]
        def __iter__(self) -> Iterator[dict[str, Any]]:
            yield from ({"input_ids": [1] * n} for n in (1, 5, 2))

        def __len__(self) -> int:
            return 3

    assert longest_samples(Stream(), 1) is None


def test_the_longest_batch_is_collated_as_the_loaders_batches_are() -> None:
    """What a loop's own ``try_steps`` takes (the guide's): a DataLoader's batch of its
    dataset's longest samples, padded by its own collate_fn; None for other data."""
    datasets = pytest.importorskip("datasets", reason="reads a datasets.Dataset")
    lengths = [3, 9, 1, 5, 7, 2]
    rows = {"input_ids": [[1] * n for n in lengths], "label": [0, 1, 0, 1, 0, 1]}
    texts = datasets.Dataset.from_dict(rows).shuffle(seed=3)

    def padded(batch: list[dict[str, object]]) -> object:
        ids = [row["input_ids"] for row in batch]
        width = max(len(row) for row in ids)  # type: ignore[arg-type]
        return torch.tensor([row + [0] * (width - len(row)) for row in ids])  # type: ignore[operator]

    loader = torch.utils.data.DataLoader(texts, batch_size=2, collate_fn=padded)
    batch = longest_batch(loader, 3)
    assert batch is not None
    assert batch.shape == (3, 9)
    assert sorted(int(row.sum()) for row in batch) == [5, 7, 9]
    points = torch.utils.data.TensorDataset(torch.zeros(6, 2))
    assert longest_batch(torch.utils.data.DataLoader(points, batch_size=2), 3) is None


def test_a_loss_that_is_no_tensor_is_refused_with_what_to_return() -> None:
    """``steps_of``'s ``loss`` returns the model's output, not its loss (``model(**batch)``
    where ``.loss`` was meant): refused, saying what to return, not an AttributeError of the
    output's ``backward``; nothing was stepped."""
    from zeus_bso.errors import ConfigurationError
    from zeus_bso.integrations.probe import steps_of

    model, optimizers = _model_and_optimizers()
    data = torch.utils.data.TensorDataset(torch.randn(16, 4))
    loader = torch.utils.data.DataLoader(data, batch_size=4)
    before = {k: v.clone() for k, v in model.state_dict().items()}  # type: ignore[attr-defined]
    tried = steps_of(model, optimizers, loader, lambda batch: {"logits": model(batch[0])})
    with pytest.raises(ConfigurationError, match=r"returned dict, not the loss.*\.loss"):
        tried(4)
    after = model.state_dict()  # type: ignore[attr-defined]
    assert all(torch.equal(before[k], after[k]) for k in before)
