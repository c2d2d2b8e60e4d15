"""A run under a user id with no home (no ``HOME``, no entry in the password database: a
container started with an arbitrary user id) keeps its recommendations all the same."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# The system's python: the suite's may lie in a folder of root's alone (a pyenv under /root).
SYSTEM_PYTHON = "/usr/bin/python3"
# This interpreter's packages (httpx, pydantic, ...) and the repository's source.
PATHS = [str(REPO / "src"), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]
# Two things a run does with the cache: keep the job's recommendation, and recall it.
KEEP_AND_RECALL = """
import sys
sys.path[:0] = {paths!r}
from zeus_bso.client import fallback
if "keep" in sys.argv:
    fallback.remember("homeless-job", 64)
print(fallback.cache_dir(), fallback.recalled("homeless-job"))
"""

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="runs a process as another user: needs root"),
    pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)"),
    pytest.mark.skipif(
        sys.version_info[:2] != (3, 11) or not os.access(SYSTEM_PYTHON, os.X_OK),
        reason=f"runs this interpreter's packages under {SYSTEM_PYTHON}, which is not 3.11 here",
    ),
]


def _homeless_uid(start: int) -> int:
    """A user id with no entry in the password database."""
    uid = start
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temporary folder any user may write to (as /tmp), out of the test's own tmp_path,
    which other users cannot reach."""
    folder = Path(tempfile.mkdtemp(prefix="zeus-bso-homeless-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _run(uid: int, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    environment = {
        "PATH": "/usr/bin:/bin",
        "TMPDIR": str(tmp),
        "PYTHONDONTWRITEBYTECODE": "1",
    }  # no HOME
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", SYSTEM_PYTHON]
        + ["-c", KEEP_AND_RECALL.format(paths=PATHS), *args],
        cwd="/",
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _readable_by(uid: int) -> bool:
    probe = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", SYSTEM_PYTHON]
    probe += ["-c", f"import os, sys; sys.exit(0 if os.access({PATHS[1]!r}, os.R_OK) else 1)"]
    return subprocess.run(probe, cwd="/", capture_output=True, timeout=60).returncode == 0


def test_runs_without_a_home_share_a_private_folder_of_their_user(shared_tmp: Path) -> None:
    uid = _homeless_uid(47000)
    if not _readable_by(uid):
        pytest.skip("another user cannot read this interpreter's packages (a private folder)")
    kept = _run(uid, shared_tmp, "keep")
    assert kept.returncode == 0, kept.stderr[-2000:]
    folder = shared_tmp / f"zeus-bso-{uid}"
    assert kept.stdout.split() == [str(folder), "64"]
    recalled = _run(uid, shared_tmp)  # a later run of the same user
    assert recalled.returncode == 0, recalled.stderr[-2000:]
    assert recalled.stdout.split() == [str(folder), "64"]
    found = folder.lstat()
    assert stat.S_ISDIR(found.st_mode)
    assert found.st_uid == uid
    assert stat.S_IMODE(found.st_mode) == 0o700


def test_a_name_another_user_took_is_not_written_into(shared_tmp: Path) -> None:
    uid = _homeless_uid(48000)
    if not _readable_by(uid):
        pytest.skip("another user cannot read this interpreter's packages (a private folder)")
    taken = shared_tmp / f"zeus-bso-{uid}"
    taken.mkdir(mode=0o777)  # root's, and open to anyone
    taken.chmod(0o777)
    ran = _run(uid, shared_tmp, "keep")
    assert ran.returncode == 0, ran.stderr[-2000:]
    folder, size = ran.stdout.split()
    assert size == "64"  # kept for this process
    assert Path(folder) != taken
    assert Path(folder).parent == shared_tmp
    assert list(taken.iterdir()) == []
    assert f"{taken} is not this user's private folder" in ran.stderr
    assert "ZEUS_BSO_CACHE_DIR" in ran.stderr
