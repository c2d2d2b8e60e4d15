"""Fixtures of the deployment tests: podman, and the server image built from the Dockerfile
on a Debian bookworm base made here."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.containers import BASE_IMAGE, REPO, Podman

SERVER_IMAGE = "localhost/zeus-bso-test/server:dev"


@pytest.fixture(scope="session")
def podman() -> Podman:
    try:
        return Podman()
    except FileNotFoundError as err:
        pytest.skip(f"containers cannot run here: {err}")


@pytest.fixture(scope="session")
def server_image(podman: Podman) -> str:
    """integrations/docker/Dockerfile built from the repository root, as the README says."""
    podman.build(
        SERVER_IMAGE,
        REPO,
        containerfile=REPO / "integrations/docker/Dockerfile",
        PYTHON_IMAGE=BASE_IMAGE,
    )
    return SERVER_IMAGE


@pytest.fixture
def volume(podman: Podman) -> Iterator[str]:
    name = f"zeus-bso-test-{uuid.uuid4().hex[:8]}"
    podman.run("volume", "create", name)
    yield name
    podman.run("volume", "rm", "-f", name, check=False)
