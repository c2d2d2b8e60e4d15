"""A server asked through a proxy that the environment names (`zeus_bso.client.proxy`): the
errors name the proxy and ``NO_PROXY``; ``NO_PROXY`` read as httpx reads it."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import httpx
import pytest

from tests.helpers import ServerProcess
from tests.ports import free_port
from zeus_bso.client import ServerClient
from zeus_bso.client.proxy import proxy_for
from zeus_bso.errors import ServerConnectionError, ServerRejectedError

PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                   "ALL_PROXY", "no_proxy", "NO_PROXY")  # fmt: skip


@pytest.fixture(autouse=True)
def no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server(sqlite_server: ServerProcess) -> ServerProcess:
    return sqlite_server


class _Denying(http.server.BaseHTTPRequestHandler):
    """A company proxy that may not reach the cluster's hosts: a page of its own for each
    request it is asked to forward."""

    def do_GET(self) -> None:
        page = b"<html><head><title>Access Denied</title></head><body>by policy</body></html>"
        self.send_response(403)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    do_POST = do_GET  # noqa: N815

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def denying_proxy() -> Iterator[str]:
    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Denying)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{proxy.server_address[1]}"
    proxy.shutdown()
    proxy.server_close()


def test_a_proxy_that_cannot_be_reached_is_named_not_the_server(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server is up; the error used to say "connection refused" at its address."""
    monkeypatch.setenv("HTTP_PROXY", f"http://alice:s3cret@127.0.0.1:{free_port()}")
    with ServerClient(server.url) as client, pytest.raises(ServerConnectionError) as info:
        client.list_jobs()
    said = str(info.value)
    assert f"cannot reach the batch size optimizer at {server.url}" in said
    assert "it was sent through the proxy http://alice:***@127.0.0.1:" in said
    assert "that HTTP_PROXY names" in said
    assert "add its host to NO_PROXY (NO_PROXY=127.0.0.1;" in said
    assert "s3cret" not in said
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")  # as the error says: the server answers
    with ServerClient(server.url) as client:
        client.list_jobs()


def test_a_proxys_own_page_is_said_with_the_proxy(
    server: ServerProcess, denying_proxy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("http_proxy", denying_proxy)
    monkeypatch.setenv("NO_PROXY", "127.0.0.0/8")  # a range: httpx does not read it
    with ServerClient(server.url) as client, pytest.raises(ServerRejectedError) as info:
        client.list_jobs()
    assert info.value.status == 403
    said = str(info.value)
    assert "an HTML page (Access Denied), not a zeus-bso server's answer" in said
    assert f"it was sent through the proxy {denying_proxy} that http_proxy names" in said
    assert "not address ranges" in said


def test_a_server_reached_directly_says_nothing_of_proxies(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{free_port()}")  # https only
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens
    with ServerClient(url) as client, pytest.raises(ServerConnectionError) as info:
        client.list_jobs()
    assert "proxy" not in str(info.value)
    with ServerClient(server.url) as client:
        client.list_jobs()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    # A transport of the caller's: httpx reads no proxy from the environment then.
    with (
        ServerClient(url, transport=httpx.HTTPTransport()) as client,
        pytest.raises(ServerConnectionError) as info,
    ):
        client.list_jobs()
    assert "proxy" not in str(info.value)


@pytest.mark.parametrize(
    ("url", "no_proxy"),
    [
        ("http://zeus.corp:8000", ""),
        ("http://zeus.corp:8000", "zeus.corp"),
        ("http://zeus.corp:8000", "corp"),
        ("http://zeus.corp:8000", ".corp"),
        ("http://corp:8000", ".corp"),
        ("http://notcorp:8000", "corp"),
        ("http://zeus.corp:8000", "other.corp, ZEUS.CORP"),
        ("http://10.1.2.3:8000", "10.0.0.0/8"),
        ("http://10.1.2.3:8000", "10.1.2.3"),
        ("http://[::1]:8000", "::1"),
        ("http://localhost:8000", "localhost"),
        ("http://zeus.corp:8000", "*"),
        ("https://zeus.corp:8443", "example.com"),
        ("https://zeus.corp:8443", ""),
    ],
)
def test_no_proxy_is_read_as_httpx_reads_it(
    url: str, no_proxy: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Held against the transport httpx itself picks for the URL."""
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    with httpx.Client() as client:
        proxied = client._transport_for_url(httpx.URL(url)) is not client._transport
    assert (proxy_for(url) is not None) == proxied
    if url.startswith("https"):
        assert not proxied  # HTTP_PROXY carries http:// alone
