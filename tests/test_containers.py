"""The deployment tests' podman helper as a user other than root: the kept-images lock of each
user, and why containers are skipped."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.containers import _kept_images_lock
from tests.other_user import MARKS, homeless_uid, run_as

# As another user: take the lock, then, with the argument "probe", make a Podman (which fails:
# the user has no range of subordinate ids for a rootless podman) and print what the deployment
# tests would skip with.
AS_ANOTHER_USER = """
from tests.containers import Podman, _kept_images_lock
with _kept_images_lock():
    print("locked")
if sys.argv[1:] == ["probe"]:
    try:
        Podman()
    except FileNotFoundError as err:
        print("skipped:", err)
"""

pytestmark = MARKS


def test_another_user_takes_its_own_kept_images_lock_and_is_told_why_containers_are_skipped() -> (
    None
):
    """Root's runs leave their lock file in the temporary folder, which another user may not
    open; each user's podman keeps images of its own, so each user has a lock of its own."""
    with _kept_images_lock():  # root's file exists from here
        pass
    uid = homeless_uid(50000)
    probe = shutil.which("podman") is not None and not _has_subordinate_ids(uid)
    ran = run_as(uid, AS_ANOTHER_USER, Path("/"), *(["probe"] if probe else []))
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.startswith("locked\n"), ran.stdout
    skipped = ran.stdout.removeprefix("locked\n")
    if probe:  # the reason names the user, and what to do
        assert skipped.startswith(f"skipped: uid {uid}, not root"), skipped
        assert "apt-get install uidmap slirp4netns" in skipped


def _has_subordinate_ids(uid: int) -> bool:
    """Whether ``uid`` has a range in /etc/subuid (a rootless podman could run)."""
    try:
        lines = Path("/etc/subuid").read_text().splitlines()
    except OSError:
        return False
    return any(line.split(":", 1)[0] == str(uid) for line in lines)
