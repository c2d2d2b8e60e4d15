"""Each framework adapter, imported where its framework is not installed, says which install
brings it (the extra of the docs), instead of a bare ``ModuleNotFoundError`` from inside the
package. The framework is hidden from a fresh interpreter (``sys.modules[name] = None``, which
makes its import fail as an absent package's does)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zeus_bso.lazy import older_than_supported

HIDE_AND_IMPORT = """
import sys
for name in {hidden!r}:
    sys.modules[name] = None
try:
    import {module}
except ImportError as err:
    print(err)
else:
    print("imported")
"""


@pytest.mark.parametrize(
    ("module", "hidden", "said"),
    [
        (
            "zeus_bso.integrations.accelerate",
            ["accelerate"],
            "ZeusBSOAccelerate needs Accelerate: pip install 'zeus-bso[accelerate]'",
        ),
        (
            "zeus_bso.integrations.fabric",
            ["lightning.fabric"],
            "ZeusBSOFabric needs Lightning Fabric: pip install 'zeus-bso[lightning]'",
        ),
        (
            "zeus_bso.integrations.huggingface",
            ["transformers"],
            "ZeusBSOTrainerCallback needs transformers: pip install 'zeus-bso[hf]'",
        ),
        (
            "zeus_bso.integrations.lightning",
            ["lightning.pytorch", "pytorch_lightning"],
            "ZeusBSOCallback needs PyTorch Lightning: pip install 'zeus-bso[lightning]'",
        ),
        (
            "zeus_bso.elastic.lightning",
            ["lightning.pytorch"],
            "ElasticBatchSizeCallback needs PyTorch Lightning: pip install 'zeus-bso[lightning]'",
        ),
    ],
)
def test_an_adapter_without_its_framework_names_the_install(
    module: str, hidden: list[str], said: str
) -> None:
    script = HIDE_AND_IMPORT.format(hidden=hidden, module=module)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == said


LIGHTNING_TRAINER_RUNS = (
    "import lightning.pytorch as pl; import zeus_bso.integrations.lightning; "
    "from zeus_bso.integrations.lightning_packages import package_of; "
    "package_of(pl.Trainer(logger=False, enable_progress_bar=False))"
)
"""Where both Lightning packages are installed, the one a Trainer running the callback is of."""


@pytest.mark.parametrize(
    ("code", "distribution", "said"),
    [
        (
            "import zeus_bso.integrations.huggingface",
            "transformers",
            "transformers 4.41.0 is older than zeus-bso supports (transformers>=4.50, the oldest "
            "release its tests run on): its callbacks may fail there, a resumed run first; pip "
            "install -U 'transformers>=4.50'",
        ),
        (
            LIGHTNING_TRAINER_RUNS,
            "lightning",
            "lightning 2.1.0 is older than zeus-bso supports (lightning>=2.4, the oldest release "
            "its tests run on): its callbacks may fail there, a resumed run first; pip install -U "
            "'lightning>=2.4'",
        ),
    ],
)
def test_an_adapter_over_a_framework_older_than_its_extra_asks_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: str, distribution: str, said: str
) -> None:
    """pip keeps a framework installed before zeus-bso without its extra: an adapter imported
    over a release below the extra's floor warns, naming the upgrade. The release is what
    Python's metadata finds first (a distribution's record ahead of the real one on the path,
    the real package imported); over the installed releases (this process's), nothing is
    said."""
    version = said.split()[1]
    records = tmp_path / "records"
    record = records / f"{distribution}-{version}.dist-info"
    record.mkdir(parents=True)
    (record / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {distribution}\nVersion: {version}\n"
    )
    command = [sys.executable, "-W", "always::UserWarning", "-c", code]
    older = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(records), *sys.path])},
    )
    assert older.returncode == 0, older.stderr[-3000:]
    assert said in older.stderr
    # What the warning says, asked of the releases installed here (a process of its own costs
    # some 8 CPU-seconds of imports, and asks the same).
    assert older_than_supported(distribution) is None
    monkeypatch.syspath_prepend(str(records))
    assert older_than_supported(distribution) == said  # the question can tell


OLD_CLASSIC_BESIDE_NEW = """
import warnings

warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as said:
    import lightning.pytorch
    import pytorch_lightning

    from zeus_bso.integrations.lightning_packages import package_of

    print("import:", [str(w.message) for w in said if "older than" in str(w.message)])
    said.clear()
    trainers = {
        "lightning.pytorch": lightning.pytorch.Trainer(logger=False, enable_progress_bar=False),
        "pytorch_lightning": pytorch_lightning.Trainer(logger=False, enable_progress_bar=False),
    }
    for name, trainer in trainers.items():
        package_of(trainer)
        print(name + ":", [str(w.message) for w in said if "older than" in str(w.message)])
        said.clear()
"""


def test_an_old_classic_lightning_beside_a_new_one_warns_only_where_a_trainer_of_it_runs(
    tmp_path: Path,
) -> None:
    """An environment that had the classic ``pytorch_lightning`` before it took ``lightning``
    keeps both: a script that trains with ``lightning.pytorch`` is not told about the classic
    package it does not use; a classic Trainer running the callback is."""
    record = tmp_path / "pytorch_lightning-2.1.0.dist-info"
    record.mkdir()
    (record / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pytorch-lightning\nVersion: 2.1.0\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", OLD_CLASSIC_BESIDE_NEW],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    assert lines["import"] == "[]"
    assert lines["lightning.pytorch"] == "[]"
    assert "pytorch-lightning 2.1.0 is older than zeus-bso supports" in lines["pytorch_lightning"]
