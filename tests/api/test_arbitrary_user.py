"""``zeus-bso-server`` under an arbitrary user id with no home, as OpenShift runs images: in a
working directory it may not read, it says so in a line instead of a traceback."""

from __future__ import annotations

from pathlib import Path

from tests.other_user import MARKS, homeless_uid, run_as

pytestmark = MARKS

SERVE = """
from zeus_bso_server.cli import main
sys.argv = ["zeus-bso-server", "serve", "--port", "0"]
main()
"""


def test_a_working_directory_it_may_not_read_is_a_usage_error_in_a_line(tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)  # root's, as an image's /data was to OpenShift's user
    (private / ".env").write_text("ZEUS_BSO_LOG_LEVEL=DEBUG\n")
    ran = run_as(homeless_uid(49000), SERVE, private)
    assert ran.returncode == 2, ran.stderr[-3000:]
    assert "Traceback" not in ran.stderr
    assert "cannot read the settings file .env in the working directory" in ran.stderr
    assert "Permission denied" in ran.stderr
