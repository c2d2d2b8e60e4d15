"""DNS rebinding: a server without a token (on loopback, the default) answers only requests
addressed to a loopback name; a page whose name was rebound to 127.0.0.1 sends its own name in
``Host`` and is refused, for reads as for writes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.helpers import ServerProcess, job_body, sqlite_url, unique_id
from tests.ports import CHROMIUM_SOCKET, socket_environment
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


def test_with_a_token_a_browser_must_name_the_server_and_programs_need_not(
    tmp_path: Path,
) -> None:
    """With a token, a browser's request (Fetch Metadata or Origin) must name the server by
    an address, a loopback name or an allowed name; a program's request is not checked."""
    token = "host-check-token"
    server = ServerProcess(
        sqlite_url(tmp_path / "bso.db"),
        cwd=tmp_path,
        env={"ZEUS_BSO_TOKEN": token, "ZEUS_BSO_ALLOWED_HOSTS": "bso.example.org"},
    )
    bearer = {"Authorization": f"Bearer {token}"}
    browser = {"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}
    try:
        with httpx.Client(base_url=server.url, headers=bearer) as http:
            for host, headers, status in (
                ("evil.test", browser, 403),
                ("evil.test", {"Origin": "http://evil.test"}, 403),
                ("evil.test", {}, 200),  # a program behind any name
                ("10.1.2.3:8000", browser, 200),  # an address cannot be rebound
                ("bso.example.org", browser, 200),
                ("localhost", browser, 200),
            ):
                answer = http.get("/api/jobs", headers={"Host": host, **headers})
                assert answer.status_code == status, (host, headers, answer.text)
            refused = http.get("/api/jobs", headers={"Host": "evil.test", **browser})
            assert "add the name to ZEUS_BSO_ALLOWED_HOSTS" in refused.json()["message"]
    finally:
        server.stop()


def test_a_rebound_page_in_chromium_reads_and_changes_nothing(
    sqlite_server: ServerProcess, tmp_path: Path
) -> None:
    """Chromium resolves evil.test to 127.0.0.1, as a rebound name would: a page of that
    origin (on the server's port, so same-origin with it) reads and changes nothing, without a
    token and with one, while the same requests from a loopback origin are answered."""
    from tests.api.test_browser import CHROMIUM

    if CHROMIUM is None:
        pytest.skip("no Chromium: apt-get install chromium (.ci/run does), or ZEUS_BSO_CHROMIUM")
    from playwright.sync_api import sync_playwright

    token = "rebind-token"
    guarded = ServerProcess(
        sqlite_url(tmp_path / "guarded.db"), cwd=tmp_path, env={"ZEUS_BSO_TOKEN": token}
    )
    script = """async ([jobId, token]) => {
        const headers = {"Content-Type": "application/json"};
        if (token) headers["Authorization"] = "Bearer " + token;
        const body = JSON.stringify({job_id: jobId, job_id_prefix: jobId.split("-")[0],
            batch_sizes: [32, 64], default_batch_size: 32, max_power: 300,
            number_of_gpus: 1, gpu_model: "A100"});
        const read = await fetch("/api/jobs", {headers});
        const wrote = await fetch("/jobs", {method: "POST", headers, body});
        return [read.status, wrote.status];
    }"""
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=["--host-resolver-rules=MAP evil.test 127.0.0.1"],
                env=socket_environment(CHROMIUM_SOCKET),
            )
            try:
                for target, secret in ((sqlite_server, None), (guarded, token)):
                    port = target.url.rsplit(":", 1)[1]
                    page = chromium.new_page()
                    job_id = unique_id("rebound")
                    page.goto(f"http://evil.test:{port}/healthz")
                    # The rebound page has no token. Its read carries no Origin or Fetch
                    # Metadata (a same-origin GET from a plain-HTTP page), so with a token it is
                    # the token that refuses it (401); its write carries an Origin: 403.
                    expected = [403, 403] if secret is None else [401, 403]
                    assert page.evaluate(script, [job_id, None]) == expected
                    with httpx.Client(base_url=target.url) as http:
                        headers = {"Authorization": f"Bearer {secret}"} if secret else {}
                        gone = http.get(f"/api/jobs/{job_id}", headers=headers)
                        assert gone.status_code == 404  # nothing was registered
                    page.goto(f"http://localhost:{port}/healthz")
                    assert page.evaluate(script, [job_id, secret]) == [200, 201]
                    page.close()
            finally:
                chromium.close()
    finally:
        guarded.stop()
