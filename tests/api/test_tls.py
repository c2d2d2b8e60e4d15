"""HTTPS: a server with a certificate (``--tls-cert-file``, ``--tls-key-file``) answers only
HTTPS, and the client trusts a CA of one's own through ``ZEUS_BSO_CA_BUNDLE`` or the system's
trust paths, on top of certifi's. A certificate it cannot trust is said in words (what to set),
and the run trains at its default as for any server it cannot reach. The CA is trustme's, made
for each test session; real server processes, real TLS."""

from __future__ import annotations

import json
import logging
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import certifi
import httpx
import pytest

from tests.helpers import (
    SERVER_BIN,
    ZEUS_BSO,
    ServerProcess,
    environment_without_settings,
    sqlite_url,
    unique_id,
)
from tests.ports import free_port
from zeus_bso import BatchSizeOptimizer, JobSpec
from zeus_bso.client import ServerClient
from zeus_bso.client.tls import CA_BUNDLE_VARIABLE, trusted_context
from zeus_bso.energy import EstimateMeter
from zeus_bso.errors import ConfigurationError, ServerCertificateError, ServerConnectionError
from zeus_bso_server.errors import SettingsError
from zeus_bso_server.settings import load_settings

trustme = pytest.importorskip("trustme", reason="the TLS tests make their CA with trustme")

TOKEN = "tls-token-value"


@dataclass
class Pki:
    ca: Path
    cert: Path
    key: Path
    context: ssl.SSLContext
    """Trusts the CA alone (for the tests' own requests)."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA of one's own, and a certificate it signed for 127.0.0.1 only."""
    tmp = tmp_path_factory.mktemp("pki")
    ca = trustme.CA(organization_name="zeus-bso tests")
    issued = ca.issue_cert("127.0.0.1")
    paths = Pki(
        tmp / "ca.pem", tmp / "server.pem", tmp / "server.key", ssl.create_default_context()
    )
    ca.cert_pem.write_to_path(str(paths.ca))
    paths.cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(paths.key))
    paths.key.chmod(0o600)
    ca.configure_trust(paths.context)
    return paths


@pytest.fixture(scope="module")
def https_server(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Two workers, the certificate given as flags (the workers get it from the server)."""
    tmp = tmp_path_factory.mktemp("https")
    server = ServerProcess(
        sqlite_url(tmp / "bso.db"),
        cwd=tmp,
        workers=2,
        env={"ZEUS_BSO_TOKEN": TOKEN},
        extra_args=["--tls-cert-file", str(pki.cert), "--tls-key-file", str(pki.key)],
        https_ca=pki.context,
    )
    yield server
    server.stop()


@pytest.fixture
def no_trust_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (CA_BUNDLE_VARIABLE, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)


def job() -> JobSpec:
    return JobSpec(
        job_id=unique_id("tls"),
        job_id_prefix="tls",
        batch_sizes=[16, 32],
        default_batch_size=32,
        target_metric=0.5,
        max_epochs=3,
    )


def test_a_run_trains_over_https_with_the_ca_in_zeus_bso_ca_bundle(
    https_server: ServerProcess, pki: Pki, monkeypatch: pytest.MonkeyPatch, no_trust_settings: None
) -> None:
    monkeypatch.setenv(CA_BUNDLE_VARIABLE, str(pki.ca))
    spec = job()
    with BatchSizeOptimizer(https_server.url, spec, token=TOKEN) as bso:
        size = bso.get_batch_size()
        bso.on_train_begin()
        assert bso.on_evaluate(0.9).stop_train
    assert size in (16, 32)
    assert bso.outcome is not None
    assert bso.outcome.converged
    assert bso.outcome.trial_number == 1
    with ServerClient(https_server.url, token=TOKEN) as client:
        (trial,) = client.job_state(spec.job_id or "")["trials"]
    assert trial["status"] == "reported"
    assert trial["batch_size"] == size
    assert "https://127.0.0.1" in https_server.log()
    # Plain HTTP to it is not served.
    with pytest.raises(httpx.TransportError):
        httpx.get(https_server.url.replace("https://", "http://") + "/healthz", timeout=5)


def test_the_system_trust_paths_add_to_certifi(
    https_server: ServerProcess, pki: Pki, monkeypatch: pytest.MonkeyPatch, no_trust_settings: None
) -> None:
    """OpenSSL's SSL_CERT_FILE stands for the system's store here (the tests change no
    machine's): it is trusted, and certifi's CAs stay trusted beside it (httpx alone would
    trust SSL_CERT_FILE instead of certifi)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
    with ServerClient(https_server.url, token=TOKEN) as client:
        # Answered over TLS (a list, empty where no other test registered a job here first).
        assert isinstance(client.list_jobs(limit=1), list)
    certifi_only = ssl.create_default_context(cafile=certifi.where())
    both = trusted_context()
    assert both.cert_store_stats()["x509_ca"] == certifi_only.cert_store_stats()["x509_ca"] + 1


def test_an_untrusted_certificate_is_said_and_the_run_trains_at_its_default(
    https_server: ServerProcess, no_trust_settings: None, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        ServerClient(https_server.url, token=TOKEN, retry_seconds=0) as client,
        pytest.raises(ServerCertificateError) as raised,
    ):
        client.list_jobs(limit=1)
    assert "the server's TLS certificate is not trusted here" in str(raised.value)
    assert f"set {CA_BUNDLE_VARIABLE} to the PEM file of the CA" in str(raised.value)
    spec = job()
    with (
        caplog.at_level(logging.WARNING),
        BatchSizeOptimizer(https_server.url, spec, token=TOKEN) as bso,
    ):
        assert bso.get_batch_size() == 32
        assert bso.offline
    assert "not trusted here" in caplog.text
    assert "training at batch size 32, the job's default, without the server" in caplog.text


def test_check_says_what_to_set_and_passes_with_the_ca(
    https_server: ServerProcess, pki: Pki
) -> None:
    env = environment_without_settings()
    for name in (CA_BUNDLE_VARIABLE, "SSL_CERT_FILE", "SSL_CERT_DIR"):
        env.pop(name, None)
    argv = [ZEUS_BSO, "check", "--json", "--server", https_server.url, "--token", TOKEN]

    def server_check(extra: dict[str, str]) -> tuple[int, dict[str, object]]:
        ran = subprocess.run(argv, env=env | extra, capture_output=True, text=True, timeout=120)
        (found,) = [c for c in json.loads(ran.stdout)["checks"] if c["what"] == "server"]
        return ran.returncode, found

    status, refused = server_check({})
    assert status == 1
    assert refused["ok"] is False
    assert f"set {CA_BUNDLE_VARIABLE} to the PEM file of the CA" in str(refused["says"])
    status, unreadable = server_check({CA_BUNDLE_VARIABLE: str(pki.ca) + ".missing"})
    assert status == 1
    assert "no such file or directory" in str(unreadable["says"])
    status, trusted = server_check({CA_BUNDLE_VARIABLE: str(pki.ca)})
    assert trusted == {
        "what": "server",
        "ok": True,
        "says": f"{https_server.url} answers, and takes the token",
    }


def test_a_name_the_certificate_is_not_for_is_said(
    https_server: ServerProcess, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CA_BUNDLE_VARIABLE, str(pki.ca))
    by_name = https_server.url.replace("127.0.0.1", "localhost")
    with (
        ServerClient(by_name, token=TOKEN, retry_seconds=0) as client,
        pytest.raises(ServerCertificateError, match="is not for the name in https://localhost"),
    ):
        client.list_jobs(limit=1)


def test_https_to_a_server_without_tls_says_to_use_http(sqlite_server: ServerProcess) -> None:
    url = sqlite_server.url.replace("http://", "https://")
    with (
        ServerClient(url, retry_seconds=0) as client,
        pytest.raises(ConfigurationError, match=f"use {sqlite_server.url}$"),
    ):
        client.list_jobs(limit=1)


def test_http_to_a_server_with_tls_says_to_use_https(https_server: ServerProcess) -> None:
    plain = https_server.url.replace("https://", "http://")
    with (
        ServerClient(plain, retry_seconds=0) as client,
        pytest.raises(ConfigurationError, match=f"speaks TLS: .* use {https_server.url}$"),
    ):
        client.list_jobs(limit=1)
    # Nothing listening is an outage, as it was.
    with (
        ServerClient(f"http://127.0.0.1:{free_port()}", retry_seconds=0) as client,
        pytest.raises(ServerConnectionError, match="cannot reach"),
    ):
        client.list_jobs(limit=1)


def test_a_wrong_scheme_is_refused_at_start_not_taken_for_an_outage(
    sqlite_server: ServerProcess,
) -> None:
    """A run that falls back to the job's default while the server is away must not do so for
    a URL that can never work: it would train for good without the server learning."""
    job = JobSpec(job_id_prefix="scheme", batch_sizes=[8, 16], default_batch_size=8,
                  target_metric=0.5, max_epochs=2)  # fmt: skip
    https = sqlite_server.url.replace("http://", "https://")
    bso = BatchSizeOptimizer(https, job, energy_meter=EstimateMeter(100), retry_seconds=0)
    with pytest.raises(ConfigurationError, match="a server without TLS is reached with http://"):
        bso.get_batch_size()
    assert not bso.offline
    bare = sqlite_server.url.removeprefix("http://")
    with pytest.raises(ConfigurationError, match=f"no scheme: use 'http://{bare}'"):
        BatchSizeOptimizer(bare, job, energy_meter=EstimateMeter(100))
    with pytest.raises(ConfigurationError, match="is not an HTTP one: use 'http://"):
        BatchSizeOptimizer(f"tcp://{bare}", job, energy_meter=EstimateMeter(100))


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("missing", "no such file or directory"),
        ("not-pem", "is not a readable PEM file of CA certificates"),
    ],
)
def test_a_bad_ca_bundle_is_refused_with_what_to_give(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, words: str
) -> None:
    (tmp_path / "not-pem").write_text("hello\n")
    monkeypatch.setenv(CA_BUNDLE_VARIABLE, str(tmp_path / given))
    with pytest.raises(ConfigurationError, match=words):
        ServerClient("https://127.0.0.1:1")
    ServerClient("http://127.0.0.1:1").close()  # plain HTTP reads no bundle


def test_the_server_refuses_tls_settings_that_cannot_work(pki: Pki, tmp_path: Path) -> None:
    other = trustme.CA().issue_cert("127.0.0.1")
    wrong_key = tmp_path / "other.key"
    other.private_key_pem.write_to_path(str(wrong_key))
    # The right key, encrypted: refused, without a prompt for its password on the terminal.
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pki.key.read_bytes(), None)
    encrypted = tmp_path / "encrypted.key"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"a passphrase"),
        )
    )
    cases = [
        ({"tls_cert_file": pki.cert}, "ZEUS_BSO_TLS_CERT_FILE needs ZEUS_BSO_TLS_KEY_FILE"),
        ({"tls_key_file": pki.key}, "ZEUS_BSO_TLS_KEY_FILE needs ZEUS_BSO_TLS_CERT_FILE"),
        (
            {"tls_cert_file": tmp_path / "nope.pem", "tls_key_file": pki.key},
            "cannot read the TLS certificate file",
        ),
        ({"tls_cert_file": pki.cert, "tls_key_file": wrong_key}, "do not load together"),
        ({"tls_cert_file": pki.cert, "tls_key_file": encrypted}, "unencrypted private key"),
    ]
    for overrides, words in cases:
        with pytest.raises(SettingsError, match=words):
            load_settings(**overrides)
    assert load_settings(tls_cert_file=pki.cert, tls_key_file=pki.key).scheme == "https"
    # As a user starts it: the command's usage status, the message, nothing served.
    env = environment_without_settings()
    env["ZEUS_BSO_DATABASE_URL"] = sqlite_url(tmp_path / "bso.db")
    started = subprocess.run(
        [SERVER_BIN, "serve", "--tls-cert-file", str(pki.cert), "--tls-key-file", str(wrong_key)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert started.returncode == 2, started.stderr
    assert "do not load together" in started.stderr
    assert "Traceback" not in started.stderr
    assert not (tmp_path / "bso.db").exists()


def test_an_expired_certificate_is_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ca = trustme.CA()
    now = datetime.now(UTC)
    issued = ca.issue_cert(
        "127.0.0.1", not_before=now - timedelta(days=90), not_after=now - timedelta(days=1)
    )
    cert, key, authority = tmp_path / "old.pem", tmp_path / "old.key", tmp_path / "ca.pem"
    cert.write_bytes(b"".join(blob.bytes() for blob in issued.cert_chain_pems))
    issued.private_key_pem.write_to_path(str(key))
    ca.cert_pem.write_to_path(str(authority))
    unverified = ssl.create_default_context()  # the helper's readiness probe, nothing else
    unverified.check_hostname = False
    unverified.verify_mode = ssl.CERT_NONE
    server = ServerProcess(
        sqlite_url(tmp_path / "bso.db"),
        cwd=tmp_path,
        extra_args=["--tls-cert-file", str(cert), "--tls-key-file", str(key)],
        https_ca=unverified,
    )
    try:
        monkeypatch.setenv(CA_BUNDLE_VARIABLE, str(authority))
        with (
            ServerClient(server.url, retry_seconds=0) as client,
            pytest.raises(ServerCertificateError, match=r"certificate has expired.*: renew it"),
        ):
            client.list_jobs(limit=1)
    finally:
        server.stop()


def test_a_client_of_an_http_server_loads_no_ca(
    sqlite_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """httpx built a verifying TLS context, certifi's CAs loaded, for each client of an
    ``http://`` server (30 ms of CPU each, and again at each reconnection), which never used it:
    its clients share one context now, which trusts no CA."""
    loads: list[object] = []
    load = ssl.SSLContext.load_verify_locations

    def counted(self: ssl.SSLContext, *args: object, **kwargs: object) -> None:
        loads.append(args or kwargs)
        load(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", counted)
    for _ in range(3):
        with ServerClient(sqlite_server.url) as client:
            client.list_jobs(prefix="no-such-prefix-")
            client.close()
            client.list_jobs(prefix="no-such-prefix-")  # reconnects
    assert loads == []
    ServerClient(f"https://127.0.0.1:{free_port()}").close()  # https still verifies: the CAs
    assert loads
