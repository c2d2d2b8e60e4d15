"""Virtual environments with torch and one install of the project alone (``zeus-bso[lightning]``),
as a user who follows an extra's docs has it: the examples run in them, and so do the training
processes of the multi-process tests whose subject is one framework.

Each is made once for the whole run, whichever xdist worker asks first (the others wait for it),
from the CPU torch wheel ``scripts/test`` keeps and with uv, which ``scripts/test`` installs. A
process in one is also cheaper than in the suite's environment, which has every extra: there,
importing Lightning imports transformers and matplotlib too (torchmetrics loads each it finds),
2 of Lightning's 7 CPU-seconds. Without uv or the wheel (an environment made by hand), this one's
Python stands in."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"
TORCH_WHEELS = sorted((ROOT / ".venv" / "wheels").glob("torch-2.13.0*.whl"))
LIGHTNING = "zeus-bso[lightning]"
"""The install of the Lightning callback's docs: ``pip install torch 'zeus-bso[lightning]'``."""


class Environments:
    """The environments of a run, in a folder every worker of it shares."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def python(self, requirement: str) -> str:
        """The Python of an environment with torch and ``requirement`` (``zeus-bso`` or
        ``zeus-bso[extra]``, the project installed from this checkout) alone."""
        if not UV.exists() or not TORCH_WHEELS:
            return sys.executable
        extra = requirement.removeprefix("zeus-bso")
        return self._made(extra.strip("[]") or "base", extra)

    def oldest(self) -> str:
        """The Python of an environment with torch, ``zeus-bso[server,lightning,hf]`` at the
        `oldest_supported` releases of the frameworks, and the tools to run the tests in it."""
        if not UV.exists() or not TORCH_WHEELS:
            return sys.executable
        extras = f"[server,{','.join(OLDEST_EXTRAS)}]"
        pins = tuple(f"{name}=={version}" for name, version in oldest_supported().items())
        return self._made("oldest", extras, pins, OLDEST_BESIDE + OLDEST_TOOLS)

    def _made(
        self, name: str, extra: str, pins: tuple[str, ...] = (), beside: tuple[str, ...] = ()
    ) -> str:
        venv = self.folder / name
        python = venv / "env" / "bin" / "python"
        venv.mkdir(parents=True, exist_ok=True)
        with open(venv / "lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be making it
            if not (venv / "made").exists():
                make(venv, extra, pins, beside)
                seed_bytecode(str(python))
                (venv / "made").touch()
        return str(python)


OLDEST_EXTRAS = ("lightning", "hf", "accelerate")
"""The training extras whose lower bounds `oldest_supported` pins."""
OLDEST_BESIDE = ("peft==0.13.2", "datasets==3.6.0")
"""The corpus's own libraries (``tests/scripts/words.py``'s texts, ``peft_lora.py``) at releases
that install beside the oldest Transformers; TRL's releases that do are not tried (its script is
skipped there)."""
OLDEST_TOOLS = (
    "pytest>=8", "pytest-timeout>=2.3", "pytest-xdist>=3.5", "hypothesis>=6.100",
    "jsonargparse[signatures]>=4.27.7",
)  # fmt: skip
"""What the tests run at the oldest releases need beside the project (``tests/conftest.py``
imports, LightningCLI's for ``lightning_cli.py``)."""


def lower_bounds(requirements: list[str]) -> dict[str, str]:
    """Each requirement's lower bound (``name>=version``), by its name in lower case; a
    requirement without one is left out."""
    found = {}
    for requirement in requirements:
        bound = re.fullmatch(
            r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?>=([0-9][^,<;]*)(?:,.*)?", requirement
        )
        if bound is not None:
            found[bound[1].lower().replace("_", "-")] = bound[2]
    return found


def release(version: str) -> tuple[int, ...]:
    """``2.7.0`` and ``2.7`` alike: the release's numbers without trailing zeros."""
    numbers = [int(part) for part in re.findall(r"\d+", version.split("+")[0])]
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def oldest_supported() -> dict[str, str]:
    """The lower bound of each requirement of the training extras in ``pyproject.toml``
    (``lightning>=2.4``: 2.4): the releases a user who keeps an older framework may have."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    return lower_bounds([requirement for extra in OLDEST_EXTRAS for requirement in extras[extra]])


def make(venv: Path, extra: str, pins: tuple[str, ...] = (), beside: tuple[str, ...] = ()) -> None:
    pin = venv / "torch-pin.txt"
    pin.write_text("".join(f"{line}\n" for line in ("torch==2.13.0", *pins)))
    for command in (
        [str(UV), "venv", "-q", "--python", sys.executable, str(venv / "env")],
        [str(UV), "pip", "install", "-q", "--python", str(venv / "env" / "bin" / "python"),
         "--constraint", str(pin), str(TORCH_WHEELS[-1]), "-e", f"{ROOT}{extra}", *beside],
    ):  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]


def seed_bytecode(python: str) -> None:
    """Give a fresh environment this one's compiled modules (``__pycache__``) for the packages
    both have. What is installed stays as it was: a folder the fresh environment lacks is not
    made (it would be an importable namespace package), and Python checks each file against its
    source's time and size, compiling again where they differ. Without them, the first import
    of torch and Lightning in each environment compiled them (7 CPU-seconds for Lightning's
    alone, twice at once under torchrun)."""
    ours = Path(sysconfig.get_paths()["purelib"])
    asked = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    theirs = Path(subprocess.check_output([python, "-c", asked], text=True).strip())
    for folder, subfolders, _ in os.walk(theirs):
        if "__pycache__" in subfolders:
            continue
        compiled = ours / Path(folder).relative_to(theirs) / "__pycache__"
        if not compiled.is_dir():
            continue
        # Other processes of the run compile into ours meanwhile: Python writes each file under
        # a temporary name (``x.cpython-311.pyc.<id>``) and moves it into place, so such a name
        # may be gone before it is copied (seen in CI). They are left out, and a file that went
        # away anyway is only a module the environment compiles for itself.
        with contextlib.suppress(shutil.Error):
            shutil.copytree(
                compiled,
                Path(folder, "__pycache__"),
                copy_function=link_or_copy,
                ignore=shutil.ignore_patterns("*.pyc.*"),
            )


def link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)  # Python replaces a compiled file, never writes into it
    except OSError:
        shutil.copy2(source, target)


def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's own temporary folder: under xdist, the parent of each worker's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
