"""The systemd unit (integrations/systemd) on a machine booted with systemd (in a podman
container): installed by the steps its header gives, it serves as its own user, keeps its
SQLite database in its state directory and comes back after a crash."""

from __future__ import annotations

import os
import re
import time
import uuid

import httpx
import pytest

from tests.containers import BASE_IMAGE, REPO, Podman, container, wait_answers
from tests.deploy.wire import job_state, run_recurrence
from tests.ports import free_port

UNIT_DIR = REPO / "integrations/systemd"
UNIT = UNIT_DIR / "zeus-bso-server.service"
IMAGE = "localhost/zeus-bso-test/systemd:dev"


def install_steps() -> list[str]:
    """The commands of the unit's 'Install (as root):' comment, but pip's (the image holds
    the install: see systemd-image/Containerfile)."""
    header = UNIT.read_text().split("[Unit]")[0]
    steps = re.findall(r"^#   (.+)$", header.split("Install (as root):")[1], re.MULTILINE)
    assert steps[0].startswith("python3 -m venv /opt/zeus-bso")
    return steps[1:]


@pytest.mark.skipif(
    os.geteuid() != 0,
    reason="systemd as PID 1 runs in a container of root's podman here (rootless, it did not boot "
    "under cgroupfs): run the suite as root to include it",
)
def test_the_unit_installs_as_documented_and_serves_as_its_own_user(
    podman: Podman, server_image: str
) -> None:
    podman.build(
        IMAGE,
        REPO / "tests/deploy/systemd-image",
        BASE_IMAGE=BASE_IMAGE,
        SERVER_IMAGE=server_image,
    )
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    name = f"zeus-bso-test-systemd-{uuid.uuid4().hex[:8]}"
    # systemd as PID 1 needs to mount; the service's sandboxing needs namespaces.
    with container(
        podman, name, "--privileged", "--systemd=always", "-p", f"127.0.0.1:{port}:8000",
        "-v", f"{UNIT_DIR}:/src:ro", IMAGE,
    ):  # fmt: skip
        _wait_booted(podman, name)
        verify = podman.run(
            "exec", "-w", "/src", name, "systemd-analyze", "verify", "./" + UNIT.name, check=False
        )
        assert verify.returncode == 0, verify.stdout + verify.stderr
        for step in install_steps():
            podman.run("exec", "-w", "/src", name, "sh", "-c", step)
        wait_answers(f"{url}/healthz", logs=[_journal(podman, name)])
        token = podman.run("exec", name, "cat", "/etc/zeus-bso/token").stdout.strip()
        assert httpx.get(f"{url}/api/jobs", timeout=10).status_code == 401
        job_id = f"systemd-{uuid.uuid4().hex[:8]}"
        run_recurrence(url, token, job_id)

        pid = _main_pid(podman, name)
        user = podman.run("exec", name, "ps", "-o", "user=", "-p", str(pid)).stdout.strip()
        assert user == "zeus-bso"
        owner = podman.run("exec", name, "stat", "-c", "%U", "/var/lib/zeus-bso/zeus-bso.db")
        assert owner.stdout.strip() == "zeus-bso"
        token_mode = podman.run("exec", name, "stat", "-c", "%a %U:%G", "/etc/zeus-bso/token")
        assert token_mode.stdout.strip() == "640 root:zeus-bso"

        # A crash: Restart=on-failure brings it back, with its jobs.
        podman.run("exec", name, "kill", "-9", str(pid))
        deadline = time.monotonic() + 60
        while _main_pid(podman, name) in (0, pid):
            assert time.monotonic() < deadline, _journal(podman, name)
            time.sleep(0.5)
        wait_answers(f"{url}/healthz", logs=[_journal(podman, name)])
        assert len(job_state(url, token, job_id)["trials"]) == 1
        assert run_recurrence(url, token, job_id)["trial_number"] == 2


def _wait_booted(podman: Podman, name: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        state = podman.run("exec", name, "systemctl", "is-system-running", check=False)
        if state.stdout.strip() in ("running", "degraded"):
            return
        assert time.monotonic() < deadline, state.stdout + podman.logs(name)
        time.sleep(0.5)


def _main_pid(podman: Podman, name: str) -> int:
    shown = podman.run(
        "exec", name, "systemctl", "show", "-p", "MainPID", "--value", "zeus-bso-server"
    )
    return int(shown.stdout.strip() or 0)


def _journal(podman: Podman, name: str) -> str:
    journal = podman.run(
        "exec", name, "journalctl", "-u", "zeus-bso-server", "--no-pager", check=False
    )
    return journal.stdout[-3000:]
