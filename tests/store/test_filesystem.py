"""A SQLite file on a network filesystem is said at the server's start
(`zeus_bso_server.store.filesystem`): on a real sshfs mount, and from mount tables that name
the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import ServerProcess, job_body, sqlite_url, unique_id
from tests.network_folder import sshfs_folder
from zeus_bso_server.store.filesystem import MOUNTINFO, Mount, mount_of, warn_if_networked

MOUNTS = """\
22 1 253:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw
41 22 0:40 / /mnt/shared rw,relatime shared:20 - nfs4 filer:/export/ml rw,vers=4.2
42 41 253:2 / /mnt/shared/local\\040disk rw,relatime - xfs /dev/vdb rw
43 22 0:41 / /scratch rw - lustre 10.0.0.1@tcp:/scratch rw
44 43 0:42 / /scratch rw - tmpfs tmpfs rw
45 22 0:43 / /data rw master:7 - nfs filer:/data rw
"""


@pytest.fixture
def mountinfo(tmp_path: Path) -> Path:
    path = tmp_path / "mountinfo"
    path.write_text(MOUNTS)
    return path


@pytest.mark.parametrize(
    ("path", "mount"),
    [
        ("/home/me/zeus-bso.db", Mount(Path("/"), "ext4", "/dev/vda1")),
        ("/mnt/shared/jobs/zeus-bso.db", Mount(Path("/mnt/shared"), "nfs4", "filer:/export/ml")),
        # a local disk mounted inside the share; its name has a space, as mountinfo escapes it
        ("/mnt/shared/local disk/x.db", Mount(Path("/mnt/shared/local disk"), "xfs", "/dev/vdb")),
        ("/mnt/sharedother/zeus-bso.db", Mount(Path("/"), "ext4", "/dev/vda1")),  # not a prefix
        ("/scratch/zeus-bso.db", Mount(Path("/scratch"), "tmpfs", "tmpfs")),  # the later mount
        ("/data", Mount(Path("/data"), "nfs", "filer:/data")),  # the mount point itself
    ],
)  # fmt: skip
def test_the_deepest_and_latest_mount_holds_a_path(
    path: str, mount: Mount, mountinfo: Path
) -> None:
    assert mount_of(Path(path), mountinfo) == mount


def test_a_network_filesystem_is_warned_of_once_and_a_local_one_not_at_all(
    mountinfo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    networked = Path(f"/mnt/shared/{unique_id('fs')}.db")
    with caplog.at_level("WARNING", logger="zeus_bso_server.store.filesystem"):
        assert warn_if_networked(Path("/home/me/zeus-bso.db"), mountinfo) is None
        assert warn_if_networked(Path("/mnt/shared/local disk/x.db"), mountinfo) is None
        assert warn_if_networked(networked, mountinfo) == mount_of(networked, mountinfo)
        assert warn_if_networked(networked, mountinfo) is not None  # said once a process
    (said,) = [record.getMessage() for record in caplog.records]
    assert said.startswith(
        f"the SQLite database {networked} is on a network filesystem (nfs4 from "
        "filer:/export/ml, mounted at /mnt/shared)"
    )
    assert "use PostgreSQL (ZEUS_BSO_DATABASE_URL=postgresql://...)" in said


def test_without_a_mount_table_nothing_is_said(tmp_path: Path) -> None:
    assert mount_of(tmp_path / "x.db", tmp_path / "no-mountinfo") is None
    assert warn_if_networked(tmp_path / "x.db", tmp_path / "no-mountinfo") is None


def test_this_machines_temporary_folder_is_not_a_network_one(tmp_path: Path) -> None:
    """Read from the real mount table: where the suite keeps its databases."""
    if not MOUNTINFO.exists():
        pytest.skip("no /proc/self/mountinfo: not Linux")
    mount = mount_of(tmp_path / "x.db")
    assert mount is not None
    assert warn_if_networked(tmp_path / "x.db") is None, mount


def test_a_server_whose_sqlite_file_is_on_sshfs_says_so_and_serves(tmp_path: Path) -> None:
    """On one machine SQLite works there (this server serves); the warning is for the day a
    second machine opens the file."""
    with sshfs_folder(tmp_path) as shared:
        server = ServerProcess(sqlite_url(shared / "bso.db"), cwd=tmp_path)
        try:
            with server.client() as http:
                assert http.post("/jobs", json=job_body(unique_id())).status_code == 201
            log = server.log()
        finally:
            server.stop()
    assert log.count("is on a network filesystem") == 1, log  # the upgrade's and the app's
    assert f"the SQLite database {shared / 'bso.db'} is on a network filesystem (fuse.sshfs" in log
    assert (tmp_path / "remote" / "bso.db").exists()  # the file lives on the other side
