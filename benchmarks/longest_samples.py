"""What the memory check's search for the longest samples costs (`zeus_bso.integrations.probe`
``longest_samples``), on a ``datasets.Dataset`` of token ids of many lengths, as a fine-tune's
data is: as built, shuffled (an indices mapping over the table, as ``shuffle``, ``select`` and
``train_test_split`` leave it) and filtered (``filter``, the same). Beside it, what taking the
column in the dataset's order costs (``dataset.with_format("arrow")[column]``, which copies
every token where an indices mapping orders them): the way it is not read. Then a torch dataset
that keeps no lengths (the Hugging Face tutorial's ``Dataset`` over a tokenizer's encodings,
each sample made tensors as it is read), read sample by sample where that is projected to take
at most ``READ_BUDGET_S``: how long the search takes at each number of rows, and where it stops
after the first samples.

Lengths are drawn uniformly between 20 and 200 tokens (int32 ids). Each figure is the median
of the repeats, in milliseconds.

    .venv/bin/python benchmarks/longest_samples.py [--rows 1000000] [--size 64]
        [--torch-rows 10000 25000 40000 60000 100000]

Writes benchmarks/results/longest_samples.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import torch

from zeus_bso.integrations.probe import READ_BUDGET_S, longest_samples

RESULTS = Path(__file__).parent / "results"


def texts(rows: int) -> datasets.Dataset:
    rng = np.random.default_rng(0)
    lengths = rng.integers(20, 200, rows)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    ids = pa.array(rng.integers(0, 30000, int(lengths.sum())).astype(np.int32))
    table = pa.table(
        {"input_ids": pa.ListArray.from_arrays(offsets, ids), "label": rng.integers(0, 2, rows)}
    )
    return datasets.Dataset(table)


def timed(run: Callable[[], Any], repeats: int) -> float:
    spent = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        spent.append(time.perf_counter() - started)
    return 1e3 * statistics.median(spent)


class Encodings(torch.utils.data.Dataset):  # type: ignore[misc]
    """The Hugging Face fine-tuning tutorial's dataset: encodings made tensors when read."""

    def __init__(self, lengths: Any) -> None:
        self.encodings = {"input_ids": [[1] * int(n) for n in lengths]}
        self.encodings["attention_mask"] = self.encodings["input_ids"]
        self.labels = [int(n) % 2 for n in lengths]

    def __getitem__(self, index: int) -> dict[str, Any]:
        item = {key: torch.tensor(value[index]) for key, value in self.encodings.items()}
        item["labels"] = torch.tensor(self.labels[index])
        return item

    def __len__(self) -> int:
        return len(self.labels)


def taken_in_order(dataset: datasets.Dataset) -> Any:
    column = dataset.with_format("arrow")["input_ids"]
    return np.concatenate([np.asarray(chunk.value_lengths()) for chunk in column.chunks])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--torch-rows", type=int, nargs="*", default=[10_000, 25_000, 40_000, 60_000, 100_000]
    )
    args = parser.parse_args()
    built = texts(args.rows)
    shuffled = built.shuffle(seed=0)
    kept = shuffled.filter(
        lambda batch: [len(ids) < 150 for ids in batch["input_ids"]],
        batched=True,
        batch_size=100_000,
    )
    figures: dict[str, dict[str, float]] = {}
    for name, dataset in (("as built", built), ("shuffled", shuffled), ("filtered", kept)):
        found = longest_samples(dataset, args.size)
        assert found is not None
        indices, longest = found
        assert min(len(dataset[i]["input_ids"]) for i in indices) == longest  # all of the top
        figures[name] = {
            "rows": float(len(dataset)),
            "longest_samples_ms": timed(partial(longest_samples, dataset, args.size), args.repeats),
            "taken_in_order_ms": timed(partial(taken_in_order, dataset), 1),
            "longest": float(longest),
        }
    read: dict[str, dict[str, float]] = {}
    rng = np.random.default_rng(0)
    for rows in args.torch_rows:
        lengths = rng.integers(20, 200, rows)
        spent, found = [], []
        for _ in range(3):  # a dataset of its own each time: its lengths are kept beside it
            dataset = Encodings(lengths)
            started = time.perf_counter()
            found.append(longest_samples(dataset, args.size) is not None)
            spent.append(time.perf_counter() - started)
        read[str(rows)] = {
            "longest_samples_ms": 1e3 * statistics.median(spent),
            "read": float(statistics.median(found)),
        }
    RESULTS.mkdir(exist_ok=True)
    out = {
        "args": vars(args),
        "datasets": datasets.__version__,
        "figures": figures,
        "torch_dataset": read,
    }
    (RESULTS / "longest_samples.json").write_text(json.dumps(out, indent=1))
    lines = [
        f"{args.rows:,} texts of 20-199 tokens; the {args.size} longest; datasets "
        f"{datasets.__version__}; medians of {args.repeats} repeats (taking the column in order: "
        "one).",
        "",
        "| dataset | rows | longest_samples | the column taken in order | longest |",
        "|---|---:|---:|---:|---:|",
        *(
            f"| {name} | {int(f['rows']):,} | {f['longest_samples_ms']:.1f} ms "
            f"| {f['taken_in_order_ms']:,.0f} ms | {int(f['longest'])} |"
            for name, f in figures.items()
        ),
    ]
    lines += [
        "",
        f"A torch dataset of tokenized texts (the tutorial's), read sample by sample where that "
        f"is projected to take at most {READ_BUDGET_S} s; medians of 3 repeats.",
        "",
        "| rows | longest_samples | its longest samples |",
        "|---:|---:|---|",
        *(
            f"| {int(rows):,} | {f['longest_samples_ms']:,.0f} ms "
            f"| {'found' if f['read'] else 'not read: the first batches are tried'} |"
            for rows, f in read.items()
        ),
    ]
    (RESULTS / "longest_samples.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
