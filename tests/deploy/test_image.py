"""The server image (integrations/docker/Dockerfile) on a Debian bookworm base: non-root,
token required, SQLite in the /data volume kept across restarts, its healthcheck."""

from __future__ import annotations

import secrets
import uuid
from pathlib import Path

import httpx

from tests.containers import Podman, container, wait_answers
from tests.deploy.wire import job_state, run_recurrence
from tests.ports import free_port

ARBITRARY_UID = 54321
"""A user id the image's password database does not know."""


def test_the_image_declares_a_non_root_user_a_volume_and_a_healthcheck(
    podman: Podman, server_image: str
) -> None:
    image = podman.inspect(server_image)
    config, healthcheck = image["Config"], image["Healthcheck"]  # podman's layout
    assert isinstance(config, dict)
    assert isinstance(healthcheck, dict)
    assert config["User"] == "10001:10001"
    assert config["Entrypoint"] == ["zeus-bso-server"]
    assert config["Cmd"] == ["serve"]
    assert "/data" in config["Volumes"]
    assert "ZEUS_BSO_HOST=0.0.0.0" in config["Env"]
    assert "/healthz" in " ".join(healthcheck["Test"])


def test_the_image_refuses_to_listen_without_a_token(podman: Podman, server_image: str) -> None:
    refused = podman.run("run", "--rm", server_image, check=False)
    assert refused.returncode == 2
    assert "refusing to listen on 0.0.0.0 without a token" in refused.stderr


def test_the_image_serves_the_wire_protocol_and_keeps_its_jobs_across_restarts(
    podman: Podman, server_image: str, volume: str, tmp_path: Path
) -> None:
    token = secrets.token_hex(16)
    secret = tmp_path / "token"
    secret.write_text(token + "\n")
    secret.chmod(0o644)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    name = f"zeus-bso-test-image-{uuid.uuid4().hex[:8]}"
    job_id = f"image-{uuid.uuid4().hex[:8]}"
    published = ["-p", f"127.0.0.1:{port}:8000", "-v", f"{volume}:/data"]

    # First container: the token from a mounted secret file.
    with container(
        podman,
        name,
        *published,
        "-v",
        f"{secret}:/run/secrets/zeus-bso-token:ro",
        "-e",
        "ZEUS_BSO_TOKEN_FILE=/run/secrets/zeus-bso-token",
        server_image,
    ):
        wait_answers(f"{url}/healthz", logs=[podman.logs(name)])
        assert podman.run("exec", name, "id", "-u").stdout.strip() == "10001"
        assert httpx.get(f"{url}/api/jobs", timeout=10).status_code == 401
        first = run_recurrence(url, token, job_id)
        owner = podman.run("exec", name, "stat", "-c", "%u", "/data/zeus-bso.db")
        assert owner.stdout.strip() == "10001"
        # The image's own HEALTHCHECK command passes against the running server.
        assert podman.run("healthcheck", "run", name, check=False).returncode == 0
        assert podman.health(name) == "healthy"

        podman.run("restart", "-t", "10", name)
        wait_answers(f"{url}/healthz", logs=[podman.logs(name)])
        trials = job_state(url, token, job_id)["trials"]
        assert [t["trial_number"] for t in trials] == [first["trial_number"]]
        second = run_recurrence(url, token, job_id)
        assert second["trial_number"] == first["trial_number"] + 1

    # A new container on the same volume (an upgrade, say), the token from the environment.
    with container(podman, name, *published, "-e", f"ZEUS_BSO_TOKEN={token}", server_image):
        wait_answers(f"{url}/healthz", logs=[podman.logs(name)])
        state = job_state(url, token, job_id)
        assert sorted(t["trial_number"] for t in state["trials"]) == [1, 2]
        assert all(t["converged"] for t in state["trials"])


def test_the_image_serves_under_an_arbitrary_user_id_of_the_root_group(
    podman: Podman, server_image: str
) -> None:
    """As OpenShift runs an image: a user id of its choosing, with no entry in the image's
    password database, in group 0; /data (here the image's own, no volume given) is its to
    write. (OpenShift's ids are larger, 1000650000 say; this one lies within the 65536 ids a
    rootless podman maps.)"""
    token = secrets.token_hex(16)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    name = f"zeus-bso-test-image-uid-{uuid.uuid4().hex[:8]}"
    with container(
        podman,
        name,
        "--user",
        f"{ARBITRARY_UID}:0",
        "-p",
        f"127.0.0.1:{port}:8000",
        "-e",
        f"ZEUS_BSO_TOKEN={token}",
        server_image,
    ):
        wait_answers(f"{url}/healthz", logs=[podman.logs(name)])
        assert podman.run("exec", name, "id", "-u").stdout.strip() == str(ARBITRARY_UID)
        run_recurrence(url, token, f"image-uid-{uuid.uuid4().hex[:8]}")
        owner = podman.run("exec", name, "stat", "-c", "%u", "/data/zeus-bso.db")
        assert owner.stdout.strip() == str(ARBITRARY_UID)
