"""The example scripts run as the README says, against a real server."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ServerProcess, sqlite_url

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def example_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("examples")
    proc = ServerProcess(sqlite_url(tmp / "bso.db"), cwd=tmp)
    yield proc
    proc.stop()


@pytest.mark.parametrize(
    ("script", "needs"),
    [
        ("plain_pytorch.py", "torch"),
        ("lightning_trainer.py", "lightning"),
        ("hf_trainer.py", "transformers"),
        ("accelerate_loop.py", "accelerate"),
        ("fabric_loop.py", "lightning"),
    ],
)
def test_example_runs_recurrences(
    example_server: ServerProcess, tmp_path: Path, script: str, needs: str
) -> None:
    pytest.importorskip(needs, reason=f"the example needs {needs}")
    result = subprocess.run(
        [
            sys.executable,
            str(EXAMPLES / script),
            "--server",
            example_server.url,
            "--recurrences",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # Every run's line, on the console without any logging set up (stderr, or stdout where
    # the framework prints: accelerator.print, fabric.print).
    output = result.stdout + result.stderr
    lines = [line for line in output.splitlines() if line.startswith("zeus-bso: batch size")]
    assert len(lines) >= 2, output[-3000:]
    assert all(
        re.search(r"batch size \d+ (reached the target|stopped|ended) at epoch \d+ of \d+", line)
        for line in lines
    ), lines
    assert all("Next run: " in line for line in lines), lines
