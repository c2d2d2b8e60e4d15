"""Which servers' TLS certificates the client trusts, and what to say when it trusts none.

An ``https://`` server is trusted when a CA among these signed its certificate: certifi's
(what httpx trusts alone), the system's (its default paths, where ``update-ca-certificates``
puts a company's CA, and ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), and ``ZEUS_BSO_CA_BUNDLE``, a
PEM file or a directory of them, for a CA of one's own that the machine does not trust."""

from __future__ import annotations

import functools
import os
import socket
import ssl
from pathlib import Path
from urllib.parse import urlsplit

import certifi

from zeus_bso.errors import ConfigurationError

CA_BUNDLE_VARIABLE = "ZEUS_BSO_CA_BUNDLE"
"""A PEM file of CA certificates, or a directory of them, trusted besides the usual ones."""


@functools.cache
def plain_http_context() -> ssl.SSLContext:
    """The TLS context of a client of an ``http://`` server, one for the process: never used,
    since no request leaves the server's URL, and it trusts no CA, so that it could only refuse.
    Without it httpx builds a verifying context for each client it makes, loading certifi's CAs
    (30 ms of CPU a client)."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def trusted_context(ca_bundle: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """A client context that verifies servers against certifi's CAs, the system's, and
    ``ca_bundle`` or ``$ZEUS_BSO_CA_BUNDLE``.

    Raises:
        ConfigurationError: the bundle is neither a file nor a directory, or holds no
            certificate that can be read.
    """
    context = ssl.create_default_context(cafile=certifi.where())
    context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    given = str(ca_bundle) if ca_bundle is not None else os.environ.get(CA_BUNDLE_VARIABLE, "")
    if not given.strip():
        return context
    path = Path(given.strip()).expanduser()
    try:
        if path.is_dir():
            context.load_verify_locations(capath=str(path))
        else:
            context.load_verify_locations(cafile=str(path))
    except FileNotFoundError:
        raise ConfigurationError(
            f"{CA_BUNDLE_VARIABLE}={given!r}: no such file or directory; give the PEM file of "
            "the CA that signed the server's certificate"
        ) from None
    except (ssl.SSLError, OSError, ValueError) as error:
        raise ConfigurationError(
            f"{CA_BUNDLE_VARIABLE}={given!r} is not a readable PEM file of CA certificates "
            f"({error})"
        ) from None
    return context


def certificate_problem(error: BaseException, server_url: str) -> str | None:
    """What to change, where ``error`` (a connection's, with its causes) is a TLS failure:
    a certificate not trusted, one for another name, or a server that does not speak TLS.
    None for any other error."""
    seen: BaseException | None = error
    for _ in range(16):  # the chain of causes, as far as it goes (a cycle cannot hold it)
        if seen is None:
            return None
        if isinstance(seen, ssl.SSLCertVerificationError):
            reason = seen.verify_message or str(seen)
            if seen.verify_code == 62:  # X509_V_ERR_HOSTNAME_MISMATCH
                return (
                    f"the server's TLS certificate is not for the name in {server_url} "
                    f"({reason}): use a name the certificate was issued for"
                )
            if seen.verify_code == 10:  # X509_V_ERR_CERT_HAS_EXPIRED
                return f"the server's TLS certificate has expired ({reason}): renew it"
            return (
                f"the server's TLS certificate is not trusted here ({reason}): set "
                f"{CA_BUNDLE_VARIABLE} to the PEM file of the CA that signed it (trusted now: "
                "certifi's CAs and this system's)"
            )
        if no_tls(seen):
            return no_tls_words(server_url, seen)
        seen = seen.__cause__ or seen.__context__
    return None


def no_tls(error: BaseException | None) -> bool:
    """Whether ``error``, or one of its causes, says the server does not speak TLS (an
    ``https://`` URL for a plain-HTTP server)."""
    for _ in range(16):
        if error is None:
            return False
        if isinstance(error, ssl.SSLError) and error.reason in (
            "WRONG_VERSION_NUMBER",
            "RECORD_LAYER_FAILURE",
            "PACKET_LENGTH_TOO_LONG",
        ):
            return True
        error = error.__cause__ or error.__context__
    return False


def no_tls_words(server_url: str, error: BaseException) -> str:
    """What to change where ``server_url`` is ``https://`` and the server speaks plain HTTP."""
    reason = getattr(error, "reason", None) or type(error).__name__
    plain = "http://" + server_url.split("://", 1)[-1]
    return (
        f"no TLS at {server_url} ({reason}): a server without TLS is reached with http://: "
        f"use {plain}"
    )


def speaks_tls(server_url: str, timeout: float = 2.0) -> bool:
    """Whether the server an ``http://`` URL names completes a TLS handshake: it wants
    ``https://`` (a plain request to it is dropped, which reads like an outage). No
    certificate is checked: only whether TLS is spoken."""
    parts = urlsplit(server_url)
    if parts.hostname is None:
        return False
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with (
            socket.create_connection((parts.hostname, parts.port or 80), timeout=timeout) as raw,
            context.wrap_socket(raw, server_hostname=parts.hostname),
        ):
            return True
    except (OSError, ValueError):  # ssl.SSLError is an OSError
        return False


def https_words(server_url: str) -> str:
    """What to change where ``server_url`` is ``http://`` and the server speaks TLS."""
    secure = "https://" + server_url.split("://", 1)[-1]
    return (
        f"the server at {server_url} speaks TLS: a server with TLS is reached with https://: "
        f"use {secure}"
    )
