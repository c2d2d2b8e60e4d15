"""A server served below a path prefix (``--root-path``) by a real nginx, which strips the prefix,
as an ingress that hosts several tools under one name does: training runs, the dashboard and the
API docs through the proxy, and the health checks on the server itself as an orchestrator
probes them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.helpers import (
    SERVER_BIN,
    ServerProcess,
    environment_without_settings,
    job_body,
    sqlite_url,
    unique_id,
)
from tests.ports import free_port
from zeus_bso import BatchSizeOptimizer, JobSpec
from zeus_bso.energy import EstimateMeter
from zeus_bso_server.errors import SettingsError
from zeus_bso_server.settings import load_settings

PREFIX = "/zeus-bso"
TOKEN = "root-path-test-token"
NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)

CONFIG = """
{user}
daemon off;
worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location {prefix}/ {{
            proxy_pass http://127.0.0.1:{upstream}/;
        }}
    }}
}}
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, str]]:
    """A server with ``--root-path /zeus-bso`` and a token, and the proxy's URL of it."""
    if NGINX is None:
        pytest.skip("nginx is not installed (apt-get install nginx): the proxy of these tests")
    root = tmp_path_factory.mktemp("root-path")
    server = ServerProcess(
        sqlite_url(root / "zeus-bso.db"),
        cwd=root,
        env={"ZEUS_BSO_TOKEN": TOKEN},
        extra_args=["--root-path", PREFIX],
    )
    port = free_port()
    config = root / "nginx.conf"
    config.write_text(
        CONFIG.format(
            user="user root;" if os.geteuid() == 0 else "",
            root=root,
            port=port,
            prefix=PREFIX,
            upstream=server.port,
        )
    )
    proxy = subprocess.Popen(
        [NGINX, "-c", str(config), "-p", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}{PREFIX}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proxy.poll() is not None or time.monotonic() > deadline:
                log = root / "error.log"
                pytest.fail(f"nginx did not serve: {log.read_text() if log.exists() else ''}")
            time.sleep(0.1)
        yield server, url
    finally:
        proxy.terminate()
        proxy.wait(timeout=10)
        server.stop()


def test_a_training_run_through_the_prefix(served: tuple[ServerProcess, str]) -> None:
    _, url = served
    job = JobSpec(
        job_id_prefix=unique_id("rootpath").replace("-", ""),
        batch_sizes=[16, 32, 64],
        default_batch_size=32,
        target_metric=0.8,
        max_epochs=3,
        learning_curve_stop=False,
    )
    with BatchSizeOptimizer(url, job, energy_meter=EstimateMeter(100), token=TOKEN) as bso:
        assert bso.get_batch_size() == 32
        bso.on_train_begin()
        assert bso.on_evaluate(0.9).stop_train
    assert bso.outcome is not None
    assert bso.outcome.converged
    headers = {"Authorization": f"Bearer {TOKEN}"}
    (trial,) = httpx.get(f"{url}/api/jobs/{bso.job_id}", headers=headers).json()["trials"]
    assert (trial["status"], trial["converged"]) == ("reported", True)


def test_the_dashboard_and_the_api_docs_link_below_the_prefix(
    served: tuple[ServerProcess, str], tmp_path: Path
) -> None:
    _, url = served
    origin = url.removesuffix(PREFIX)
    with httpx.Client(base_url=origin, auth=("", TOKEN)) as browser:
        home = browser.get(f"{PREFIX}/", follow_redirects=False)
        assert home.status_code in (302, 307)
        assert home.headers["location"] == f"{PREFIX}/dashboard"
        job_id = unique_id("rootpath-page")
        body = job_body(job_id, prefix="rootpath")
        created = httpx.post(f"{url}/jobs", json=body, headers={"Authorization": f"Bearer {TOKEN}"})
        assert created.status_code == 201, created.text
        pages = [f"{PREFIX}/dashboard", f"{PREFIX}/dashboard/jobs/{job_id}", f"{PREFIX}/docs"]
        for page in pages:
            answer = browser.get(page)
            assert answer.status_code == 200, (page, answer.text)
            links = re.findall(r"""(?:href|src)=["'](/[^"']*)["']""", answer.text)
            links += re.findall(r"""url: ?["'](/[^"']*)["']""", answer.text)  # Swagger UI's
            assert links, page
            for link in links:
                assert link.startswith(f"{PREFIX}/"), (page, link)
                followed = browser.get(link.replace("&amp;", "&"))
                assert followed.status_code == 200, (page, link, followed.status_code)


def test_the_server_itself_answers_probes_and_keeps_its_token(
    served: tuple[ServerProcess, str],
) -> None:
    """An orchestrator probes the pod, not the proxy: the health checks answer without the
    token on the server's own address; everything else still needs it, through the proxy too."""
    server, url = served
    for probe in ("/healthz", "/readyz"):
        assert httpx.get(server.url + probe).status_code == 200, probe
    assert httpx.get(server.url + "/api/jobs").status_code == 401
    assert httpx.get(f"{url}/api/jobs").status_code == 401


@pytest.mark.parametrize("given", ["zeus-bso", "/zeus-bso/", "/a//b", "/zeus bso", "/a?b=1"])
def test_a_root_path_that_is_no_path_prefix_is_refused(given: str) -> None:
    with pytest.raises(SettingsError, match=r"ZEUS_BSO_ROOT_PATH: .* is not a path prefix"):
        load_settings(root_path=given)


def test_serve_refuses_it_with_a_message(tmp_path: Path) -> None:
    done = subprocess.run(
        [SERVER_BIN, "serve", "--root-path", "zeus-bso/", "--db", sqlite_url(tmp_path / "x")],
        capture_output=True,
        text=True,
        timeout=60,
        env=environment_without_settings(),
        cwd=tmp_path,
    )
    assert done.returncode != 0
    assert "is not a path prefix: give one like /zeus-bso" in done.stderr
    assert "Traceback" not in done.stderr
