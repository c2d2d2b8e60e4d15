"""`zeus_bso.integrations.loaders`: a DataLoader the script built, built again at another batch
size (as the Lightning callback does with one given to ``trainer.fit``)."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="the DataLoader tests need torch (pip install torch)")

from torch.utils.data import (  # noqa: E402
    BatchSampler,
    DataLoader,
    IterableDataset,
    SequentialSampler,
    TensorDataset,
)

from zeus_bso.integrations.loaders import (  # noqa: E402
    at_batch_size,
    batch_size_of,
    generators_kept,
    not_resizable,
)

DATA = TensorDataset(torch.arange(20))


def samples(loader: Any) -> list[list[int]]:
    return [batch[0].tolist() for batch in loader]


def test_a_loader_built_again_keeps_all_but_its_batch_size() -> None:
    """The same sampler (a shuffle of its own generator), drop_last, workers and collation;
    only the batches change size. A new loader even at the same size."""
    generator = torch.Generator().manual_seed(3)
    given = DataLoader(
        DATA, batch_size=4, shuffle=True, drop_last=True, generator=generator, num_workers=1
    )
    resized = at_batch_size(given, 8)
    assert (resized.batch_size, resized.drop_last, resized.num_workers) == (8, True, 1)
    assert resized.sampler is given.sampler
    assert resized.collate_fn is given.collate_fn
    generator.manual_seed(5)
    first = samples(resized)
    assert [len(batch) for batch in first] == [8, 8]  # 20 samples, the last 4 dropped
    order = [i for batch in first for i in batch]
    assert sorted(order) != order  # shuffled
    generator.manual_seed(5)
    assert samples(resized) == first  # by the given loader's generator
    again = at_batch_size(given, 4)
    assert again is not given
    assert again.batch_size == 4


class Counting(IterableDataset):  # type: ignore[misc]
    def __iter__(self) -> Any:
        return iter(torch.arange(10))


def test_a_loader_of_an_iterable_dataset_is_built_again_without_a_sampler() -> None:
    given = DataLoader(Counting(), batch_size=2)
    assert not_resizable(given) is None
    assert [len(batch) for batch in at_batch_size(given, 4)] == [4, 4, 2]


class OwnInit(DataLoader):  # type: ignore[misc]
    def __init__(self, dataset: Any) -> None:
        super().__init__(dataset, batch_size=4)


class SameInit(DataLoader):  # type: ignore[misc]
    pass


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ([DataLoader(DATA, batch_size=4)], "a list, not one torch DataLoader"),
        (OwnInit(DATA), "a OwnInit, whose own __init__ may take other arguments"),
        (
            DataLoader(DATA, batch_sampler=BatchSampler(SequentialSampler(DATA), 4, False)),
            "a DataLoader whose batches its batch_sampler (or its dataset) makes",
        ),
    ],
)
def test_what_cannot_be_built_again_says_what_it_is(given: Any, said: str) -> None:
    why = not_resizable(given)
    assert why is not None
    assert why.startswith(said)


def test_a_subclass_that_keeps_dataloaders_init_is_built_again_as_itself() -> None:
    resized = at_batch_size(SameInit(DATA, batch_size=4), 5)
    assert type(resized) is SameInit
    assert batch_size_of(resized) == 5
    assert [len(batch[0]) for batch in resized] == [5] * 4


def test_a_loader_iterated_for_undone_steps_leaves_its_shuffle_where_it_was() -> None:
    """The script's own generators (the DataLoader's, and a sampler's of its own) are back
    after the tried steps: the next epoch shuffles as if they had not been iterated."""
    own, sampler_own = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    sampler = torch.utils.data.RandomSampler(DATA, generator=sampler_own)
    for given in (
        DataLoader(DATA, batch_size=4, shuffle=True, generator=own),
        DataLoader(DATA, batch_size=4, sampler=sampler),
    ):
        tried = at_batch_size(given, 8)
        expected = samples(at_batch_size(given, 8))
        own.manual_seed(1)
        sampler_own.manual_seed(2)
        with generators_kept(tried):
            samples(tried)
        assert samples(at_batch_size(given, 8)) == expected
        own.manual_seed(1)
        sampler_own.manual_seed(2)
        samples(tried)  # without: the generator moved on
        assert samples(at_batch_size(given, 8)) != expected
