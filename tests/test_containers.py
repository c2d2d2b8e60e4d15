"""The deployment tests' podman helper as a user other than root: the kept-images lock of each
user, and why containers are skipped."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.containers import REPO, _kept_images_lock

# The system's python: the suite's may lie in a folder of root's alone (a pyenv under /root);
# tests/containers.py needs the standard library only.
SYSTEM_PYTHON = "/usr/bin/python3"
# As `nobody`: take the lock, then, with the argument "probe", make a Podman (which fails:
# nobody has no range of subordinate ids for a rootless podman) and print what the deployment
# tests would skip with.
AS_ANOTHER_USER = """
import sys
from tests.containers import Podman, _kept_images_lock
with _kept_images_lock():
    print("locked")
if sys.argv[1:] == ["probe"]:
    try:
        Podman()
    except FileNotFoundError as err:
        print("skipped:", err)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="runs a process as another user: needs root")
@pytest.mark.skipif(shutil.which("runuser") is None, reason="needs runuser (util-linux)")
@pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"needs {SYSTEM_PYTHON}")
def test_another_user_takes_its_own_kept_images_lock_and_is_told_why_containers_are_skipped() -> (
    None
):
    """Root's runs leave their lock file in the temporary folder, which another user may not
    open; each user's podman keeps images of its own, so each user has a lock of its own."""
    as_nobody = ["runuser", "-u", "nobody", "--"]
    readable = [*as_nobody, SYSTEM_PYTHON, "-c", f"open({str(REPO / 'tests/containers.py')!r})"]
    if subprocess.run(readable, cwd="/", capture_output=True, timeout=60).returncode != 0:
        pytest.skip("the user nobody cannot read this clone (it lies in a private folder)")
    with _kept_images_lock():  # root's file exists from here
        pass
    environment = {**os.environ, "HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1"}
    environment["PYTHONPATH"] = str(REPO)
    probe = shutil.which("podman") is not None and not _has_subordinate_ids("nobody")
    ran = subprocess.run(
        [*as_nobody, SYSTEM_PYTHON, "-c", AS_ANOTHER_USER, *(["probe"] if probe else [])],
        cwd="/",
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.startswith("locked\n"), ran.stdout
    skipped = ran.stdout.removeprefix("locked\n")
    if probe:  # the reason names the user, and what to do
        uid = pwd.getpwnam("nobody").pw_uid
        assert skipped.startswith(f"skipped: uid {uid}, not root"), skipped
        assert "apt-get install uidmap slirp4netns" in skipped


def _has_subordinate_ids(user: str) -> bool:
    """Whether ``user`` has a range in /etc/subuid (a rootless podman could run)."""
    try:
        lines = Path("/etc/subuid").read_text().splitlines()
    except OSError:
        return False
    return any(line.split(":", 1)[0] == user for line in lines)
