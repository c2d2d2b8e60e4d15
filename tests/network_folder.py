"""A folder on a real network filesystem: an SSH server of the test's own on the loopback
interface, and sshfs (FUSE) mounting a folder it serves. Needs root (FUSE mounts, and sshd's
privilege separation) and the ``sshfs`` and ``openssh-server`` packages; skips, saying why,
without them."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ports import free_port

SSHD = Path("/usr/sbin/sshd")


@contextlib.contextmanager
def sshfs_folder(tmp: Path) -> Iterator[Path]:
    """An empty folder mounted over sshfs from ``tmp/remote``, unmounted at the end."""
    missing = [tool for tool in ("sshfs", "ssh-keygen") if shutil.which(tool) is None]
    if missing or not SSHD.exists():
        pytest.skip(f"no {' '.join(missing) or SSHD}: apt-get install sshfs openssh-server")
    if os.geteuid() != 0 or not Path("/dev/fuse").exists():
        pytest.skip("mounting a network filesystem here needs root and /dev/fuse")
    for key in ("host", "user"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp / key)], check=True
        )
    remote, mounted = tmp / "remote", tmp / "mounted"
    remote.mkdir()
    mounted.mkdir()
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)  # its privilege separation folder
    port = free_port()
    (tmp / "sshd_config").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {tmp / 'host'}\n"
        f"AuthorizedKeysFile {tmp / 'user.pub'}\nPermitRootLogin prohibit-password\n"
        "StrictModes no\nUsePAM no\nPidFile none\nSubsystem sftp internal-sftp\n"
    )
    sshd = subprocess.Popen(
        [str(SSHD), "-D", "-e", "-f", str(tmp / "sshd_config")],
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "sshd.log").open("w"),
    )
    try:
        options = f"IdentityFile={tmp / 'user'},StrictHostKeyChecking=no,BatchMode=yes"
        options += ",UserKnownHostsFile=/dev/null"
        mount = ["sshfs", "-p", str(port), "-o", options, f"root@127.0.0.1:{remote}", str(mounted)]
        deadline = time.monotonic() + 20
        while (done := subprocess.run(mount, capture_output=True, text=True)).returncode != 0:
            if time.monotonic() > deadline or sshd.poll() is not None:
                log = (tmp / "sshd.log").read_text()
                pytest.fail(f"sshfs could not mount: {done.stderr.strip()}; sshd: {log}")
            time.sleep(0.2)  # sshd is not listening yet
        try:
            yield mounted
        finally:
            subprocess.run(["umount", "-l", str(mounted)], capture_output=True)
    finally:
        sshd.terminate()
        sshd.wait(10)
