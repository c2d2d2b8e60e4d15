"""Plot of cumulative cost per recurrence against the oracle and the default batch size."""

from __future__ import annotations

from pathlib import Path

from zeus_bso.errors import ZeusBSOError
from zeus_bso.sim.report import Summary


def check_plotting() -> None:
    """Whether a plot can be drawn here, asked before the work it plots.

    Raises:
        ZeusBSOError: matplotlib is not installed (the ``plot`` extra).
    """
    try:
        import matplotlib
    except ImportError as err:
        raise ZeusBSOError("plotting needs matplotlib: pip install 'zeus-bso[plot]'") from err
    matplotlib.use("Agg")


def plot_cumulative(summaries: list[Summary], path: Path) -> None:
    """Write a PNG with one panel per summary (mean over seeds).

    Raises:
        ZeusBSOError: matplotlib is not installed.
        OSError: the file cannot be written.
    """
    check_plotting()
    import matplotlib.pyplot as plt

    columns = min(3, len(summaries))
    rows = (len(summaries) + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False)
    for ax, s in zip(axes.flat, summaries, strict=False):
        x = list(range(1, s.recurrences + 1))
        ax.plot(x, s.mean_cumulative(), label=f"zeus-bso (regret {s.regret:.3f})")
        ax.plot(x, [i * s.oracle_cost for i in x], "--", label=f"oracle (bs {s.oracle_batch_size})")
        ax.plot(
            x, [i * s.default_cost for i in x], ":", label=f"default (bs {s.default_batch_size})"
        )
        ax.set_title(f"{s.workload} on {s.gpu}")
        ax.set_xlabel("recurrence")
        ax.set_ylabel("cumulative cost (J)")
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(summaries) :]:
        ax.set_visible(False)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
