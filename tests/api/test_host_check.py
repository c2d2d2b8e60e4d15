"""DNS rebinding: a server without a token (on loopback, the default) answers only requests
addressed to a loopback name; a page whose name was rebound to 127.0.0.1 sends its own name in
``Host`` and is refused, for reads as for writes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.helpers import ServerProcess, job_body, sqlite_url, unique_id
from zeus_bso_server.api.host_check import host_name, is_loopback_name


@pytest.mark.parametrize(
    ("header", "name", "loopback"),
    [
        ("127.0.0.1:8000", "127.0.0.1", True),
        ("localhost:8000", "localhost", True),
        ("LOCALHOST", "localhost", True),
        ("[::1]:8000", "::1", True),
        ("127.1.2.3", "127.1.2.3", True),
        ("evil.test:8000", "evil.test", False),
        ("127.0.0.1.evil.test:8000", "127.0.0.1.evil.test", False),
        ("[2001:db8::1]:80", "2001:db8::1", False),
    ],
)
def test_a_hosts_name_and_whether_it_is_loopback(header: str, name: str, loopback: bool) -> None:
    assert host_name(header) == name
    assert is_loopback_name(name) is loopback


def test_a_rebound_name_is_refused_and_loopback_names_answered(server: ServerProcess) -> None:
    port = server.url.rsplit(":", 1)[1]
    job_id = unique_id("rebind")
    with httpx.Client(base_url=server.url) as http:
        for host in (f"127.0.0.1:{port}", f"localhost:{port}"):
            assert http.get("/api/jobs", headers={"Host": host}).status_code == 200
        for method, path, body in (
            ("GET", "/api/jobs", None),
            ("POST", "/jobs", job_body(job_id)),
            ("DELETE", f"/jobs?job_id={job_id}", None),
        ):
            refused = http.request(method, path, json=body, headers={"Host": f"evil.test:{port}"})
            assert refused.status_code == 403, refused.text
            assert "answers loopback names only" in refused.json()["message"]
        assert http.get(f"/api/jobs/{job_id}").status_code == 404  # nothing was registered


def test_names_a_proxy_forwards_can_be_allowed(tmp_path: Path) -> None:
    server = ServerProcess(
        sqlite_url(tmp_path / "bso.db"),
        cwd=tmp_path,
        env={"ZEUS_BSO_ALLOWED_HOSTS": "bso.example.org, Other.Example"},
    )
    try:
        with httpx.Client(base_url=server.url) as http:
            for host, status in (
                ("bso.example.org", 200),
                ("other.example:443", 200),
                ("evil.test", 403),
            ):
                assert http.get("/api/jobs", headers={"Host": host}).status_code == status
    finally:
        server.stop()
