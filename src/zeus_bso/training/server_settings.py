"""`ServerSettings`: how the main process of a run talks to the server, kept until the run
starts; `ServerSettings.run` then builds the run's `ServerRun` (no network yet), so that a
mistake there (no server URL, say) reaches every process through the start's collective."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from zeus_bso.client.conversation import JobConversation
from zeus_bso.client.failure import SigtermExceptions
from zeus_bso.client.http import ServerClient
from zeus_bso.client.job_ids import run_key_from_environment, stable_job_id
from zeus_bso.client.progress import TrialProgress
from zeus_bso.options import heartbeat_seconds_from, server_url_from, token_from
from zeus_bso.scaling.lr import LrRule
from zeus_bso.spec import GpuConfig, JobSpec, JobSpecFromClient
from zeus_bso.training.server_run import ServerRun


@dataclass(frozen=True)
class ServerSettings:
    """What the main process needs to talk to the server (see `TrialSession`'s arguments)."""

    server_url: str | None
    token: str | None
    rule: LrRule
    run_key: str | None
    on_server_unavailable: str
    heartbeat_seconds: float | None
    retry_seconds: float
    show: Callable[[str], None] | None
    handle_sigterm: bool
    sigterm_exceptions: SigtermExceptions = ()

    def client(self, retry_seconds: float | None = None) -> ServerClient:
        """A client of the server (``retry_seconds``: how long it retries, if not
        `retry_seconds`)."""
        return ServerClient(
            server_url_from(self.server_url),
            token=token_from(self.token),
            retry_seconds=self.retry_seconds if retry_seconds is None else retry_seconds,
        )

    def run(
        self,
        job: JobSpec,
        gpus: GpuConfig,
        progress: TrialProgress,
        *,
        max_micro_batch_size: int | None,
        power_limits: bool,
        trains_on: str,
        on_end: Callable[[], None],
    ) -> ServerRun:
        """The main process's side of a run of ``job`` on ``gpus`` (its job id hashed from its
        settings where it has none; ``on_end`` also runs when the trial's lease is lost)."""
        spec = JobSpecFromClient(
            **job.model_dump(exclude={"job_id", "lr_rule"}),
            job_id=job.job_id,
            lr_rule=None if self.rule == "none" else self.rule,  # part of the job's history
            **gpus.model_dump(),
        )
        id_from_settings = spec.job_id is None
        if spec.job_id is None:
            spec = spec.model_copy(update={"job_id": stable_job_id(spec)})
        link = JobConversation(
            self.client(),
            spec,
            run_key=self.run_key if self.run_key is not None else run_key_from_environment(),
            on_server_unavailable=self.on_server_unavailable,
            id_from_settings=id_from_settings,
            heartbeat_seconds=heartbeat_seconds_from(self.heartbeat_seconds),
        )
        link.heartbeat.on_lost = on_end
        return ServerRun(
            link,
            progress,
            max_micro_batch_size=max_micro_batch_size,
            power_limits=power_limits,
            show=self.show,
            handle_sigterm=self.handle_sigterm,
            sigterm_exceptions=self.sigterm_exceptions,
            trains_on=trains_on,
            on_end=on_end,
        )
