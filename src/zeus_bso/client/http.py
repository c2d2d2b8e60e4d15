"""``ServerClient``: the batch size optimizer protocol over HTTP, one method per route.

A thin, typed layer: it sends the wire models of `zeus_bso.spec`, parses the answers, and turns
transport failures and error statuses into `zeus_bso.errors` exceptions. Measuring energy,
heartbeats and retries belong to the layers built on it. The routes that read and administer
jobs are `zeus_bso.client.read_api.ReadApi`'s, which it has too.
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

import httpx
from tenacity import Retrying, retry_if_result, stop_after_delay, wait_random_exponential

from zeus_bso.client.proxy import through_proxy
from zeus_bso.client.read_api import ReadApi, read_answer
from zeus_bso.client.server_away import NOT_TAKEN_NOW
from zeus_bso.client.tls import (
    certificate_problem,
    https_words,
    no_tls,
    no_tls_words,
    plain_http_context,
    speaks_tls,
    trusted_context,
)
from zeus_bso.errors import (
    ConfigurationError,
    RouteMissingError,
    ServerCertificateError,
    ServerConnectionError,
    ServerRejectedError,
    ZeusBSOError,
)
from zeus_bso.options import TOKEN_FILE_VARIABLE, TOKEN_VARIABLE, shown_url
from zeus_bso.spec import (
    EXTENSIONS_HEADER,
    MAX_ENDING_LENGTH,
    CreatedJob,
    DispatchedTrial,
    EndedTrial,
    GpuConfig,
    JobSpecFromClient,
    PowerProfileReport,
    PowerProfileView,
    ReportResponse,
    TrainingResult,
    TrialId,
    declared_extensions,
)

if TYPE_CHECKING:  # the read models load with the first read, not with every training script
    from zeus_bso.wire.reads import TrialView

DEFAULT_TIMEOUT = 30.0
CONNECT_TIMEOUT = 10.0
"""The most seconds a connection to the server may take to open (within `DEFAULT_TIMEOUT`, or
the client's own): one opens in milliseconds, so one that has not in 10 s will not (the
server's host is down, or a network drops its packets), and a run starts without the server
that much sooner."""
DEFAULT_RETRY_SECONDS = 30.0
"""How long a request answered 503 (server busy, nothing written), or a proxy's 429 or 408, is
retried (`NOT_TAKEN_NOW`)."""


_IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
"""Methods whose request may be sent again (RFC 9110, section 9.2.2)."""


def _gpu_params(gpu: GpuConfig | None) -> dict[str, str]:
    return {} if gpu is None else {k: str(v) for k, v in gpu.model_dump().items()}


# httpx logs every request at INFO with its URL, credentials included: quiet unless the user
# sets the "httpx" logger's level (after importing this).
if logging.getLogger("httpx").level == logging.NOTSET:
    logging.getLogger("httpx").setLevel(logging.WARNING)


def not_ours(response: httpx.Response) -> str:
    """An answer that is not a zeus-bso server's JSON, in a line: an HTML page's title, or a
    text's first line (a reverse proxy's or another server's error page, whole, said nothing
    more)."""
    text = response.text.strip()
    kind = response.headers.get("content-type", "")
    if "html" in kind or text.startswith("<"):
        title = _TITLE.search(text)
        words = " ".join(title.group(1).split()) if title else ""
        return f"an HTML page{f' ({words})' if words else ''}, not a zeus-bso server's answer"
    first = text.splitlines()[0][:200] if text else ""
    return f"{first!r}, not a zeus-bso server's answer" if first else "an empty answer"


_TITLE = re.compile(r"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


def ended_trial(trial: TrialId, why: str | None) -> EndedTrial:
    """``trial`` with ``why`` it ended as its message (`ending_words`)."""
    return EndedTrial(**trial.model_dump(), message=ending_words(why))


def ending_words(why: str | None) -> str | None:
    """``why`` a run ended, as a trial's message: on one line, its unprintable characters left
    out, shortened to `MAX_ENDING_LENGTH` (None: no message)."""
    words = " ".join("".join(c if c.isprintable() else " " for c in why or "").split())
    if len(words) > MAX_ENDING_LENGTH:
        words = words[: MAX_ENDING_LENGTH - 3] + "..."
    return words or None


def sendable_token(token: str | None) -> str | None:
    """``token`` without the white space around it (a secret written with ``echo`` ends in a
    line break, which no HTTP header may carry: the request failed with the token in its
    error); None where nothing is left.

    Raises:
        ConfigurationError: a control character is left inside it (the token is not shown).
    """
    token = (token or "").strip()
    if any(not char.isprintable() for char in token):
        raise ConfigurationError(
            "the server token has a line break or another control character inside it: give "
            "the token alone (it is not shown here)"
        )
    return token or None


class ServerClient(ReadApi):
    """Talks to one zeus-bso (or upstream Zeus BSO) server over one keep-alive HTTP session."""

    def __init__(
        self,
        server_url: str,
        *,
        token: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
        transport: httpx.BaseTransport | None = None,
        ca_bundle: str | os.PathLike[str] | None = None,
    ) -> None:
        """``ca_bundle`` (else ``$ZEUS_BSO_CA_BUNDLE``): CA certificates trusted for an
        ``https://`` server besides certifi's and the system's (`zeus_bso.client.tls`).

        Raises:
            ConfigurationError: the CA bundle cannot be read.
        """
        self.retry_seconds = retry_seconds
        self.timeout = timeout
        headers = {"Content-Type": "application/json"}
        token = sendable_token(token)
        self._sends_token = bool(token)
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.server_url = server_url.rstrip("/")
        self.shown_url = shown_url(self.server_url)
        """The URL as messages show it (no password)."""
        self.extensions: frozenset[str] = frozenset()
        """The protocol extensions the server declared in its latest dispatch answer
        (`zeus_bso.spec.Extension`; none: upstream Zeus's server, or a zeus-bso server from
        before they were declared)."""
        secure = httpx.URL(self.server_url).scheme == "https"
        self._env_proxies = transport is None
        self._connect: Callable[[], httpx.Client] = functools.partial(
            httpx.Client,
            base_url=self.server_url,
            timeout=httpx.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT)),
            headers=headers,
            transport=transport,
            verify=trusted_context(ca_bundle) if secure else plain_http_context(),
        )
        self._http = self._connect()

    def _proxy_words(self) -> str:
        """The proxy this client's requests go through, as `through_proxy` says it ('' where
        a transport was given: httpx then reads no proxy from the environment)."""
        return through_proxy(self.server_url) if self._env_proxies else ""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP session (a later request opens a new one)."""
        self._http.close()

    def _send(self, method: str, path: str, idempotent: bool, **kwargs: Any) -> httpx.Response:
        """One request; an idempotent one is sent once more when its connection is reset or
        closed before any answer (a kept-alive connection the server had just closed)."""
        if self._http.is_closed:
            self._http = self._connect()
        try:
            return self._http.request(method, path, **kwargs)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            if not idempotent:
                raise
            return self._http.request(method, path, **kwargs)

    def _request(
        self,
        method: str,
        path: str,
        *,
        idempotent: bool | None = None,
        patience: float | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        if idempotent is None:
            idempotent = method in _IDEMPOTENT
        retry_seconds = self.retry_seconds
        if patience is not None:  # each wait, and the retries together, no longer than that
            retry_seconds = min(retry_seconds, patience)
            waits = min(patience, self.timeout)
            kwargs["timeout"] = httpx.Timeout(waits, connect=min(waits, CONNECT_TIMEOUT))
        # A zeus-bso server answers 503 only when it wrote nothing (database busy or away), and a
        # proxy's 408 and 429 say that the request did not reach it, so every request may be
        # repeated then, with backoff, for a bounded time.
        retrying = Retrying(
            retry=retry_if_result(lambda r: r.status_code in NOT_TAKEN_NOW),
            wait=wait_random_exponential(multiplier=0.2, max=2.0),
            stop=stop_after_delay(retry_seconds),
            retry_error_callback=lambda state: state.outcome.result(),  # type: ignore[union-attr]
            reraise=True,
        )
        try:
            response: httpx.Response = retrying(self._send, method, path, idempotent, **kwargs)
        except httpx.TransportError as err:
            # A URL of the wrong scheme is no outage but a misconfiguration.
            if no_tls(err):
                raise ConfigurationError(no_tls_words(self.shown_url, err)) from err
            if self.server_url.startswith("http://") and speaks_tls(self.server_url):
                raise ConfigurationError(https_words(self.shown_url)) from err
            problem = certificate_problem(err, self.shown_url)
            if problem is not None:
                raise ServerCertificateError(problem) from err
            raise ServerConnectionError(
                f"cannot reach the batch size optimizer at {self.shown_url} ({err}); "
                "check the URL and that `zeus-bso-server serve` runs there" + self._proxy_words()
            ) from err
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = None
            ours = isinstance(body, dict) and "message" in body
            message = str(body["message"]) if ours else not_ours(response)
            root = httpx.URL(self.server_url)
            if response.status_code in (404, 405) and root.path not in ("", "/"):
                message += (
                    f" (the server URL has a path, {root.path!r}: give the server's root, "
                    f"{root.scheme}://{root.netloc.decode()}, or the path prefix a reverse proxy "
                    "serves it below)"
                )
            elif not ours and (response.status_code < 500 or response.status_code == 501):
                message += f" (is {self.shown_url} the zeus-bso server's address?)"
            elif response.status_code == 401:
                message += (
                    " (the token sent was refused" if self._sends_token else " (no token was sent"
                ) + (
                    f": give the server's token as token=..., or in {TOKEN_VARIABLE} or "
                    f"{TOKEN_FILE_VARIABLE}; zeus-bso commands take --token)"
                )
            if not ours:  # a proxy's page, perhaps
                message += self._proxy_words()
            if response.status_code in (404, 405) and not ours:
                raise RouteMissingError(response.status_code, message, method, path, ours=False)
            raise ServerRejectedError(response.status_code, message, method, path, ours=ours)
        return response

    def speaks_protocol(self) -> bool:
        """Whether the server describes the batch size optimizer's protocol (``GET /jobs/
        batch_size`` in its OpenAPI schema, which upstream Zeus's server publishes too): how a
        server without zeus-bso's read API is told from no batch size optimizer at all."""
        try:
            schema = self._request("GET", "/openapi.json").json()
        except (ZeusBSOError, ValueError):
            return False
        return isinstance(schema, dict) and "/jobs/batch_size" in (schema.get("paths") or {})

    def may_write(self) -> bool:
        """Whether the token lets a run register and report, found without changing anything:
        an empty registration, which the server refuses as invalid (422) after the token let
        it through, and with 403 when the token reads only (``ZEUS_BSO_READ_TOKEN``).

        Raises:
            ServerRejectedError: the token was refused (401), or another answer came.
        """
        try:
            self._request("POST", "/jobs", json={}, idempotent=True)
        except ServerRejectedError as err:
            if err.status == 422:
                return True
            if err.status == 403:
                return False
            raise
        raise ServerRejectedError(200, "an empty job was accepted", "POST", "/jobs")

    def register_job(self, job: JobSpecFromClient) -> tuple[CreatedJob, bool]:
        """Register ``job``; returns the registered job and whether it was newly created."""
        response = self._request("POST", "/jobs", content=job.model_dump_json())
        return CreatedJob.model_validate(response.json()), response.status_code == 201

    def dispatch(
        self,
        job_id: str,
        gpu: GpuConfig | None = None,
        run_key: str | None = None,
        accumulate: bool = False,
        power_limits: bool = False,
        deliver: bool = False,
    ) -> DispatchedTrial:
        """Start a trial of the job: its batch size and trial number. With ``gpu`` the run
        trains on those GPUs; with ``run_key`` (a run's name, the same across its restarts) a
        restarted run gets its open trial back, with what it reported (``resumed``); with
        ``accumulate`` the run accumulates gradients, and may get a batch size at or above its
        GPUs' memory cap; with ``power_limits`` the run opted into GPU power limits, and is
        told the limit to train at or to profile them; with ``deliver`` the run must deliver a
        model (it stops only at the target or ``max_epochs``). All are zeus-bso server
        extensions that other servers ignore."""
        params = {"job_id": job_id, **_gpu_params(gpu)}
        if run_key is not None:
            params["run_key"] = run_key
        if accumulate:
            params["accumulate"] = "true"
        if power_limits:
            params["power_limits"] = "true"
        if deliver:
            params["deliver"] = "true"
        # Without a run key each request starts a trial: it is not sent twice. With one, asking
        # again answers the same trial.
        response = self._request(
            "GET", "/jobs/batch_size", params=params, idempotent=run_key is not None
        )
        self.extensions = declared_extensions(response.headers.get(EXTENSIONS_HEADER))
        return DispatchedTrial.model_validate(response.json())

    def report(self, result: TrainingResult, patience: float | None = None) -> ReportResponse:
        """Report an epoch's cumulative time, energy and metric (``patience``: the most seconds
        to wait for an answer and to retry 503s, where less than the client's own)."""
        # An unset extension stays off the wire: the report is upstream's exactly.
        response = self._request(
            "POST",
            "/report",
            content=result.model_dump_json(exclude_none=True),
            patience=patience,
        )
        return ReportResponse.model_validate(response.json())

    def end_trial(
        self, trial: TrialId, why: str | None = None, patience: float | None = None
    ) -> None:
        """End a trial (``why`` it ended, for the server to keep with a trial that did not
        report it; upstream's server ignores it; ``patience``: the most seconds to wait, where
        less than the client's own)."""
        ended = ended_trial(trial, why)
        content = ended.model_dump_json(exclude_none=True)
        self._request("PATCH", "/trials", content=content, patience=patience)

    def release(
        self,
        trial: TrialId,
        why: str | None = None,
        patience: float | None = None,
        *,
        out_of_memory: bool = False,
    ) -> TrialView:
        """Release a trial whose run never trained (it counts nothing against its batch size;
        ``why``: for the server to keep with it; ``patience``: the most seconds to wait, where
        less than the client's own; ``out_of_memory``: `ReleasedTrial.out_of_memory`).

        Raises:
            RouteMissingError: the server has no release route (upstream Zeus's server).
            UnexpectedAnswerError: the answer is not a trial's view.
        """
        ended = ended_trial(trial, why)
        body = ended.model_dump(exclude_none=True)
        if out_of_memory:  # an extension: sent only where it says something
            body["out_of_memory"] = True
        return self._trial_request("/api/trials/release", body, patience=patience)

    def infeasible(
        self,
        trial: TrialId,
        micro_batch_size: int | None = None,
        patience: float | None = None,
    ) -> TrialView:
        """Mark a trial whose run ran out of memory at its batch size (``infeasible``), or, for a
        run that accumulates gradients, at ``micro_batch_size`` (the trial goes on);
        ``patience``: the most seconds to wait for the answer and to retry 503s, where less than
        the client's own.

        Raises:
            RouteMissingError: the server has no such route (upstream Zeus's server).
            UnexpectedAnswerError: the answer is not a trial's view.
        """
        body = trial.model_dump(mode="json")
        if micro_batch_size is not None:
            body["micro_batch_size"] = micro_batch_size
        return self._trial_request("/api/trials/infeasible", body, patience=patience)

    def power_profile(
        self, report: PowerProfileReport, patience: float | None = None
    ) -> PowerProfileView:
        """Send a batch size's power profile; the answer says the limit to train at
        (``patience``: the most seconds to wait for it and to retry 503s, where less than the
        client's own).

        Raises:
            RouteMissingError: the server has no such route (upstream Zeus's server).
        """
        response = self._request(
            "POST",
            "/api/trials/power_profile",
            content=report.model_dump_json(),
            patience=patience,
        )
        return PowerProfileView.model_validate(response.json())

    def heartbeat(self, trial: TrialId, *, resumed: bool = False) -> TrialView:
        """Renew a running trial's lease (``resumed``: its run resumes from a checkpoint); the
        answer is the trial as the server has it.

        Raises:
            RouteMissingError: the server has no heartbeat route (upstream Zeus's server).
            UnexpectedAnswerError: the answer is not a trial's view.
        """
        params = {"resumed": "true"} if resumed else None
        return self._trial_request("/api/trials/heartbeat", trial.model_dump(mode="json"), params)

    def _trial_request(
        self,
        path: str,
        body: dict[str, Any],
        params: dict[str, str] | None = None,
        patience: float | None = None,
    ) -> TrialView:
        """POST ``body`` to one of the routes that answer the trial as it is now."""
        from zeus_bso.wire.reads import TrialView

        answer = self._request("POST", path, json=body, params=params, patience=patience).json()
        trial: TrialView = read_answer(TrialView, answer, f"POST {path}")
        return trial
