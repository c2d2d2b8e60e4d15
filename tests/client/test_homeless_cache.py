"""A run under a user id with no home (no ``HOME``, no entry in the password database: a
container started with an arbitrary user id) keeps its recommendations all the same."""

from __future__ import annotations

import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.other_user import MARKS, homeless_uid, run_as

# Two things a run does with the cache: keep the job's recommendation, and recall it.
KEEP_AND_RECALL = """
from zeus_bso.client import fallback
if "keep" in sys.argv:
    fallback.remember("homeless-job", 64)
print(fallback.cache_dir(), fallback.recalled("homeless-job"))
"""

pytestmark = MARKS


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A temporary folder any user may write to (as /tmp), out of the test's own tmp_path,
    which other users cannot reach."""
    folder = Path(tempfile.mkdtemp(prefix="zeus-bso-homeless-", dir="/tmp"))
    folder.chmod(0o1777)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _run(uid: int, tmp: Path, *args: str) -> tuple[str, str]:
    ran = run_as(uid, KEEP_AND_RECALL, Path("/"), *args, tmp=tmp)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return ran.stdout, ran.stderr


def test_runs_without_a_home_share_a_private_folder_of_their_user(shared_tmp: Path) -> None:
    uid = homeless_uid(47000)
    folder = shared_tmp / f"zeus-bso-{uid}"
    kept, _ = _run(uid, shared_tmp, "keep")
    assert kept.split() == [str(folder), "64"]
    recalled, _ = _run(uid, shared_tmp)  # a later run of the same user
    assert recalled.split() == [str(folder), "64"]
    found = folder.lstat()
    assert stat.S_ISDIR(found.st_mode)
    assert found.st_uid == uid
    assert stat.S_IMODE(found.st_mode) == 0o700


def test_a_name_another_user_took_is_not_written_into(shared_tmp: Path) -> None:
    uid = homeless_uid(48000)
    taken = shared_tmp / f"zeus-bso-{uid}"
    taken.mkdir()
    taken.chmod(0o777)  # root's, and open to anyone
    out, warned = _run(uid, shared_tmp, "keep")
    folder, size = out.split()
    assert size == "64"  # kept for this process
    assert Path(folder) != taken
    assert Path(folder).parent == shared_tmp
    assert list(taken.iterdir()) == []
    assert f"{taken} is not this user's private folder" in warned
    assert "ZEUS_BSO_CACHE_DIR" in warned
