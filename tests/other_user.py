"""Running Python as another user id, one with no home (no ``HOME``, no entry in the password
database: a container run under an arbitrary user id, as OpenShift runs images), with this
interpreter's packages and the repository's source. Root alone can; the tests that do are
skipped otherwise (`MARKS`)."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SYSTEM_PYTHON = "/usr/bin/python3"
"""The system's python: the suite's may lie in a folder of root's alone (a pyenv under /root).
It runs this interpreter's packages, so it must be the same minor version."""
PACKAGES = sysconfig.get_paths()["purelib"]
PATHS = [str(REPO), str(REPO / "src"), PACKAGES, sysconfig.get_paths()["platlib"]]
"""The repository (its tests' helpers), its source and this interpreter's packages (httpx,
pydantic, ...)."""

MARKS = [
    pytest.mark.skipif(os.geteuid() != 0, reason="runs a process as another user: needs root"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)"),
    pytest.mark.skipif(
        sys.version_info[:2] != (3, 11) or not os.access(SYSTEM_PYTHON, os.X_OK),
        reason=f"runs this interpreter's packages under {SYSTEM_PYTHON}, which is not 3.11 here",
    ),
]


def homeless_uid(start: int) -> int:
    """A user id from ``start`` on with no entry in the password database; skips the test
    where that user cannot read this interpreter's packages (a private folder)."""
    uid = start
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            break
        uid += 1
    probe = f"import os; sys.exit(0 if os.access({PACKAGES!r}, os.R_OK) else 1)"
    if run_as(uid, probe, Path("/")).returncode != 0:
        pytest.skip("another user cannot read this interpreter's packages (a private folder)")
    return uid


def run_as(
    uid: int, code: str, cwd: Path, *args: str, tmp: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` (with ``args``) as ``uid`` of group 0 (root's, as OpenShift gives), without
    ``HOME``, in ``cwd``, its temporary folder ``tmp``, with `PATHS` first on its path."""
    environment = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    if tmp is not None:
        environment["TMPDIR"] = str(tmp)
    prelude = f"import sys\nsys.path[:0] = {PATHS!r}\n"
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", "--regid=0", "--clear-groups", SYSTEM_PYTHON]
        + ["-c", prelude + code, *args],
        cwd=cwd,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
