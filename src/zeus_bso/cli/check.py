"""``zeus-bso check``: what a training run here would find, before one runs: the frameworks
installed, the energy meter it would use (and why the others cannot measure here), whether it
could set GPU power limits, and whether the server answers and takes the token. Nothing is
changed: no job is registered and no GPU setting is touched.

The server is ``--server`` (or ``ZEUS_BSO_SERVER_URL``), its token ``ZEUS_BSO_TOKEN``, as for
the training callbacks and ``zeus-bso jobs``.
"""

from __future__ import annotations

import importlib.util
import json
import platform
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from zeus_bso.cli.server_options import DEFAULT_SERVER, Server, Token, default_server_words
from zeus_bso.energy.auto import counts_every_gpu
from zeus_bso.energy.base import EnergyMeter
from zeus_bso.energy.sharing import SHARED
from zeus_bso.errors import (
    EXIT_FAILURE,
    ConfigurationError,
    RouteMissingError,
    ServerConnectionError,
    ServerRejectedError,
    ZeusBSOError,
)
from zeus_bso.lazy import FRAMEWORK_FLOORS, older_than_supported
from zeus_bso.options import (
    LIGHTNING_JOB_VARIABLE,
    environment_setting,
    lightning_settings,
    token_from,
)

FRAMEWORKS = ("torch", "lightning", "transformers", "accelerate", "nvidia-ml-py", "zeus")
"""The packages a training run may use, by their distribution names."""
CAP_SYS_ADMIN = 21  # the capability NVML needs to set a power limit (linux/capability.h)

console = Console(soft_wrap=True, highlight=False)


@dataclass
class Finding:
    """One thing checked: ``ok`` False is a problem a run would meet; ``None``, a note."""

    what: str
    ok: bool | None
    says: str


@dataclass
class Findings:
    version: str
    python: str
    packages: dict[str, str | None]
    checks: list[Finding] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(check.ok is False for check in self.checks)


def check_command(
    server: Server = DEFAULT_SERVER,
    token: Token = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of lines")] = False,
) -> None:
    """Check what a training run here would find: the frameworks (and any older than zeus-bso
    supports), the energy meter, power-limit permission, and the server and its token. Changes
    nothing. Exit status 1 if a run would fail (the server cannot be reached or refuses the
    token, the GPUs cannot be measured)."""
    findings = Findings(
        version=_version("zeus-bso") or "unknown",
        python=platform.python_version(),
        packages={name: _version(name) for name in FRAMEWORKS},
    )
    for framework in FRAMEWORK_FLOORS:
        if (older := older_than_supported(framework)) is not None:
            findings.checks.append(Finding("frameworks", None, older))
    gpus = _energy(findings)
    busy = _unsettable_now() if gpus else []
    if shared := [b for b in busy if SHARED in b]:
        findings.checks.append(
            Finding(
                "energy",
                None,
                f"{'; '.join(shared)} now: what they compute while a run trains there is in "
                "its energy (train on GPUs of the run's own for a measurement of it alone)",
            )
        )
    _power_limits(findings, gpus, busy)
    _lightning_from_environment(findings)
    _server(findings, server, token)
    if as_json:
        typer.echo(json.dumps(asdict(findings) | {"failed": findings.failed}, indent=2))
    else:
        _print(findings)
    if findings.failed:
        raise typer.Exit(EXIT_FAILURE)


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _energy(findings: Findings) -> bool | None:
    """The meter a run would use here; returns whether it measures NVIDIA GPUs (None: the GPUs
    cannot be measured)."""
    from zeus_bso.energy.auto import choose_meter
    from zeus_bso.energy.estimate import DEFAULT_WATTS
    from zeus_bso.energy.unmeasured import gpus_here, unmeasured_gpus

    try:
        meter, reasons = choose_meter()
    except ZeusBSOError as error:  # mixed GPU models, a MIG slice: a run would stop
        findings.checks.append(Finding("energy", False, str(error)))
        return None
    if (unmeasured := unmeasured_gpus(meter, gpus_here(), reasons)) is not None:
        if meter is not None:
            meter.close()
        findings.checks.append(Finding("energy", False, unmeasured))
        return None
    if meter is None:
        findings.checks.append(
            Finding(
                "energy",
                None,
                f"no counter measures here, so a run's energy is ESTIMATED as time x "
                f"{DEFAULT_WATTS:g} W "
                f"(energy_meter=EstimateMeter(<watts>) to say otherwise): {'; '.join(reasons)}",
            )
        )
        return False
    try:
        meter.readings()
    except ZeusBSOError as error:  # a counter that fails every read: runs would estimate
        meter.close()
        findings.checks.append(Finding("energy", False, f"{meter.name} cannot read: {error}"))
        return None
    try:
        devices = ", ".join(sorted({device.model for device in meter.devices}))
        findings.checks.append(
            Finding(
                "energy",
                True,
                f"measured by {meter.name}: {meter.device_count} x {devices}, "
                f"{meter.max_power:g} W of power limits in all" + _every_gpu(meter),
            )
        )
        return meter.name == "nvml"
    finally:
        meter.close()


def _every_gpu(meter: EnergyMeter) -> str:
    """Where NVML sees several GPUs and nothing chose among them (``CUDA_VISIBLE_DEVICES``
    unset): each is counted in a run here, whether it trains on it or not (but for a Lightning
    or Fabric run on CUDA and a process of a launch of several, which measure their own GPU:
    `zeus_bso.energy.device_meter`, `zeus_bso.energy.process_meter`)."""
    if not counts_every_gpu(meter):
        return ""
    count = "both" if meter.device_count == 2 else f"all {meter.device_count}"
    return (
        f"; with CUDA_VISIBLE_DEVICES unset a run counts {count} GPUs, their energy and their "
        "number, whichever it trains on (but a Lightning or Fabric run on CUDA, and a process "
        "of torchrun or accelerate launch: the GPU each trains on): one that trains on fewer "
        "(one GPU of several) sets "
        "CUDA_VISIBLE_DEVICES to them, or passes energy_meter=NVMLMeter(gpu_indices=[...])"
    )


def _power_limits(findings: Findings, gpus: bool | None, busy: list[str]) -> None:
    """Whether ``power_limit="optimize"`` could set limits here (read, never tried; ``busy``:
    the GPUs it could not set now, `_unsettable_now`)."""
    if gpus is None:
        findings.checks.append(Finding("power limits", None, "not checked: see energy"))
    elif not gpus:
        findings.checks.append(
            Finding("power limits", None, 'power_limit="optimize" needs NVIDIA GPUs (NVML)')
        )
    elif busy:
        findings.checks.append(
            Finding(
                "power limits",
                None,
                'power_limit="optimize" would be refused on GPUs here now: '
                f"{'; '.join(busy)} (a GPU's limit would be theirs as well)",
            )
        )
    elif has_capability(CAP_SYS_ADMIN):
        findings.checks.append(
            Finding(
                "power limits",
                True,
                'power_limit="optimize" may set limits here (this process has CAP_SYS_ADMIN, '
                "which NVML asks for)",
            )
        )
    else:
        findings.checks.append(
            Finding(
                "power limits",
                None,
                'power_limit="optimize" would be advisory here: this process lacks '
                "CAP_SYS_ADMIN (run as root, or the container with --cap-add SYS_ADMIN); runs "
                "would log the recommended limit and set nothing",
            )
        )


def _unsettable_now() -> list[str]:
    """The visible GPUs whose limits a run here could not set now, and why (MIG mode, other
    processes computing there: `zeus_bso.energy.sharing.unsettable_now`); [] where NVML cannot
    say."""
    from zeus_bso.energy.nvml import nvml_started
    from zeus_bso.energy.sharing import unsettable_now

    try:
        with nvml_started() as nvml:
            try:
                return unsettable_now(nvml)
            except nvml.NVMLError:
                return []
    except ZeusBSOError:  # the energy check says why NVML cannot be read
        return []


def _lightning_from_environment(findings: Findings) -> None:
    """Where ``ZEUS_BSO_LIGHTNING_JOB`` is set (a cluster image that turns zeus-bso on for every
    Lightning Trainer): whether Lightning would find the entry point, and the settings of the
    callback it would add (read as the entry point reads them; nothing is asked of the
    server)."""
    if not environment_setting(LIGHTNING_JOB_VARIABLE):
        return
    what = f"Lightning ({LIGHTNING_JOB_VARIABLE})"
    groups = ("lightning.pytorch.callbacks_factory", "pytorch_lightning.callbacks_factory")
    hooks = [hook for group in groups for hook in metadata.entry_points(group=group)]
    if not any(hook.value.startswith("zeus_bso.") for hook in hooks):
        findings.checks.append(
            Finding(what, False, "zeus-bso's callbacks_factory entry point is not installed")
        )
        return
    try:
        settings = lightning_settings()
    except ZeusBSOError as error:
        findings.checks.append(Finding(what, False, str(error)))
        return
    assert settings is not None  # the variable is set
    if not any(importlib.util.find_spec(name) for name in ("lightning", "pytorch_lightning")):
        findings.checks.append(
            Finding(what, False, "Lightning is not installed: pip install 'zeus-bso[lightning]'")
        )
        return
    job = settings.job
    findings.checks.append(
        Finding(
            what,
            True,
            f"every Trainer gets a ZeusBSOCallback: job {job.job_id or job.job_id_prefix + '-*'}, "
            f"monitor {settings.monitor!r}, lr_rule {settings.lr_rule!r}",
        )
    )


def has_capability(bit: int, status: Path = Path("/proc/self/status")) -> bool:
    """Whether this process's effective capabilities (Linux) include ``bit``."""
    try:
        for line in status.read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> bit & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


def _server(findings: Findings, server: str, token: str | None) -> None:
    """Whether the server answers, is zeus-bso's, and takes the token (a read, nothing
    registered)."""
    from zeus_bso.client.http import ServerClient
    from zeus_bso.options import shown_url

    shown = shown_url(server)  # no password in what is printed

    upstream = False  # a server without our read API that speaks the protocol
    try:
        token = token_from(token)  # --token, ZEUS_BSO_TOKEN or ZEUS_BSO_TOKEN_FILE
        with ServerClient(server, token=token or None, timeout=10.0, retry_seconds=0.0) as client:
            try:
                client.list_jobs(limit=1)
            except RouteMissingError:
                upstream = client.speaks_protocol()
                raise
            writes = client.may_write()
    except ConfigurationError as error:  # the client's settings (ZEUS_BSO_CA_BUNDLE, the token)
        findings.checks.append(Finding("server", False, str(error)))
    except RouteMissingError as error:
        if not upstream:
            findings.checks.append(
                Finding(
                    "server",
                    False,
                    f"no batch size optimizer answers at {shown}: {error}; check the URL (and "
                    "the path prefix of a server behind a reverse proxy)",
                )
            )
            return
        findings.checks.append(
            Finding(
                "server",
                True,
                f"{shown} answers, but has no read API: upstream Zeus's server? Its protocol "
                "works; zeus-bso's additions (out-of-memory as infeasible, power limits, "
                "leases) do not",
            )
        )
    except ServerRejectedError as error:
        if error.status == 401:
            says = (
                f"{shown} refused the token: check ZEUS_BSO_TOKEN (or --token)"
                if token
                else f"{shown} wants a token: set ZEUS_BSO_TOKEN (or --token)"
            )
        else:
            says = f"{shown} answered {error.status}: {error.message}"
        findings.checks.append(Finding("server", False, says))
    except ServerConnectionError as error:
        findings.checks.append(
            Finding(
                "server",
                False,
                f"{error}{default_server_words(server)} (runs would train at the default batch"
                " size, or stop with on_server_unavailable='raise')",
            )
        )
    else:
        if not writes:
            findings.checks.append(
                Finding(
                    "server",
                    False,
                    f"{shown} takes the token, but it reads only (ZEUS_BSO_READ_TOKEN): a run "
                    "could not register, start a trial or report; use the server's token",
                )
            )
            return
        findings.checks.append(
            Finding(
                "server",
                True,
                f"{shown} answers" + (", and takes the token" if token else " (it needs no token)"),
            )
        )


def _print(findings: Findings) -> None:
    installed = ", ".join(
        f"{name} {version}" if version else f"{name} -"
        for name, version in findings.packages.items()
    )
    console.print(f"zeus-bso {findings.version}, Python {findings.python}")
    console.print(escape(f"packages: {installed} (-: not installed)"))
    marks = {True: "[green]ok[/]", None: "[yellow]note[/]", False: "[red]FAIL[/]"}
    for check in findings.checks:
        console.print(f"{marks[check.ok]} {check.what}: {escape(check.says)}")
