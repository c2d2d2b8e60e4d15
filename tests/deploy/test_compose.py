"""The compose files (integrations/compose) brought up with podman-compose: PostgreSQL, the
one-shot migration and the server with two workers; the SQLite single-container file."""

from __future__ import annotations

import re
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.containers import (
    POSTGRES_IMAGE,
    REPO,
    HealthTicker,
    Podman,
    dev_tool,
    wait_answers,
    wait_healthy,
)
from tests.deploy.wire import job_state, run_recurrence
from tests.ports import free_port

COMPOSE = REPO / "integrations/compose/compose.yaml"
COMPOSE_SQLITE = REPO / "integrations/compose/compose.sqlite.yaml"
PODMAN_COMPOSE = dev_tool("podman-compose")


def _services(path: Path) -> dict[str, Any]:
    services = yaml.safe_load(path.read_text())["services"]
    assert isinstance(services, dict)
    return services


class ComposeProject:
    """One project of a compose file, run with podman-compose under a unique name."""

    def __init__(self, podman: Podman, path: Path, env: dict[str, str]) -> None:
        self.podman, self.path = podman, path
        self.name = f"zbt{uuid.uuid4().hex[:8]}"
        self.env = {**podman.env, **env}
        self.services = _services(path)

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [PODMAN_COMPOSE, "-f", str(self.path), "-p", self.name, *args]
        result = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=600)
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(args)}: {result.stdout[-3000:]}{result.stderr[-3000:]}"
            )
        return result

    def container(self, service: str) -> str:
        return f"{self.name}_{service}_1"

    def up(self) -> None:
        """``up -d``. podman-compose waits for ``service_healthy`` only on podman >= 4.6, and
        podman 4.3 cannot start a container whose dependency has exited (the migration): there
        the services start one by one in ``depends_on`` order, each condition awaited here."""
        if _podman_version(self.podman) >= (4, 6):
            self("up", "-d", "--no-build")
            return
        for service in self._start_order():
            self("up", "-d", "--no-build", "--no-deps", service)
            wanted = {
                condition["condition"]
                for other in self.services.values()
                for name, condition in _depends_on(other).items()
                if name == service
            }
            if "service_healthy" in wanted:
                wait_healthy(self.podman, self.container(service))
            if "service_completed_successfully" in wanted:
                code = self.podman.run("wait", self.container(service)).stdout.strip()
                assert code == "0", self.podman.logs(self.container(service))

    def _start_order(self) -> list[str]:
        order: list[str] = []
        while len(order) < len(self.services):
            for name, service in self.services.items():
                if name not in order and all(dep in order for dep in _depends_on(service)):
                    order.append(name)
        return order

    def down(self) -> None:
        """Remove the project: its containers with their anonymous volumes (the server image
        declares /data, which the PostgreSQL setup does not mount, and podman-compose's ``down
        -v`` leaves such volumes behind), then its named volumes and network."""
        listed = self.podman.run(
            "ps", "-a", "-q", "--filter", f"label=io.podman.compose.project={self.name}"
        )
        if containers := listed.stdout.split():
            self.podman.run("rm", "-f", "-v", "-t", "5", *containers, check=False)
        self("down", "-v", "-t", "5", check=False)


def _depends_on(service: dict[str, Any]) -> dict[str, dict[str, str]]:
    depends = service.get("depends_on", {})
    assert isinstance(depends, dict), "depends_on with conditions"
    return depends


def _podman_version(podman: Podman) -> tuple[int, ...]:
    out = podman.run("version", "--format", "{{.Client.Version}}").stdout
    return tuple(int(part) for part in re.findall(r"\d+", out)[:2])


def test_the_stack_starts_in_order_and_keeps_the_schema_to_its_migration() -> None:
    services = _services(COMPOSE)
    assert _depends_on(services["migrate"]) == {"postgres": {"condition": "service_healthy"}}
    assert _depends_on(services["server"]) == {
        "postgres": {"condition": "service_healthy"},
        "migrate": {"condition": "service_completed_successfully"},
    }
    assert services["migrate"]["command"][:2] == ["db", "upgrade"]
    assert services["server"]["command"] == ["serve", "--no-upgrade"]
    assert services["postgres"]["image"].startswith("${POSTGRES_IMAGE:-")
    for name in ("postgres", "server"):
        assert "healthcheck" in services[name]


@pytest.fixture
def stack(podman: Podman, server_image: str) -> Iterator[tuple[ComposeProject, str, str]]:
    podman.ensure_postgres_image()
    token, port = secrets.token_hex(16), free_port()
    env = {
        "POSTGRES_IMAGE": POSTGRES_IMAGE,
        "ZEUS_BSO_IMAGE": server_image,
        "ZEUS_BSO_TOKEN": token,
        # A password a URL would have to escape: the server takes it separately.
        "POSTGRES_PASSWORD": "p@ss:w/rd#" + secrets.token_hex(4),
        "ZEUS_BSO_PUBLISH": f"127.0.0.1:{port}",
    }
    project = ComposeProject(podman, COMPOSE, env)
    try:
        yield project, f"http://127.0.0.1:{port}", token
    finally:
        project.down()


def test_compose_with_postgresql_migrates_once_and_loses_nothing_when_the_server_dies(
    podman: Podman, stack: tuple[ComposeProject, str, str]
) -> None:
    project, url, token = stack
    server = project.container("server")
    with HealthTicker(podman, project.name):
        project.up()
        wait_healthy(podman, server)
        wait_answers(f"{url}/readyz", logs=[podman.logs(server)])

        migration = podman.logs(project.container("migrate"))
        assert re.search(r"empty -> \w+", migration), migration
        assert "2 worker(s)" in podman.logs(server)
        assert "postgresql" in podman.logs(server)
        job_id = f"compose-{uuid.uuid4().hex[:8]}"
        first = run_recurrence(url, token, job_id)
        second = run_recurrence(url, token, job_id)
        assert second["trial_number"] == first["trial_number"] + 1

        podman.run("kill", "-s", "KILL", server)
        project("up", "-d", "--no-build", "--no-deps", "server")
        wait_answers(f"{url}/readyz", logs=[podman.logs(server)])
        state = job_state(url, token, job_id)
        assert sorted(t["trial_number"] for t in state["trials"]) == [1, 2]
        assert run_recurrence(url, token, job_id)["trial_number"] == 3
        # The migration ran once: the restarted server found the schema current.
        exit_code = podman.run(
            "inspect", "--format", "{{.State.ExitCode}}", project.container("migrate")
        )
        assert exit_code.stdout.strip() == "0"


def test_compose_with_sqlite_keeps_its_jobs_in_the_volume(
    podman: Podman, server_image: str
) -> None:
    token, port = secrets.token_hex(16), free_port()
    env = {"ZEUS_BSO_IMAGE": server_image, "ZEUS_BSO_TOKEN": token}
    env["ZEUS_BSO_PUBLISH"] = f"127.0.0.1:{port}"
    project = ComposeProject(podman, COMPOSE_SQLITE, env)
    url = f"http://127.0.0.1:{port}"
    job_id = f"sqlite-{uuid.uuid4().hex[:8]}"
    try:
        project("up", "-d", "--no-build")
        wait_answers(f"{url}/healthz", logs=[podman.logs(project.container("server"))])
        run_recurrence(url, token, job_id)
        project("down", "-t", "5")  # the volume stays
        project("up", "-d", "--no-build")
        wait_answers(f"{url}/healthz", logs=[podman.logs(project.container("server"))])
        assert [t["trial_number"] for t in job_state(url, token, job_id)["trials"]] == [1]
    finally:
        project.down()


def test_the_compose_env_example_names_every_required_variable() -> None:
    required = set(re.findall(r"\$\{(\w+):\?", COMPOSE.read_text()))
    example = (REPO / "integrations/compose/env.example").read_text()
    assert required == {"POSTGRES_PASSWORD", "ZEUS_BSO_TOKEN"}
    for name in required:
        assert re.search(rf"^{name}=", example, re.MULTILINE), name
