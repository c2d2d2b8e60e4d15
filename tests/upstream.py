"""Upstream Zeus 0.16's own batch size server, for the tests of our client against it.

scripts/test installs it into ``.upstream`` (its own virtual environment: upstream pins other
versions of our dependencies); ``ZEUS_BSO_UPSTREAM_PYTHON`` names another interpreter.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM_PYTHON = os.environ.get("ZEUS_BSO_UPSTREAM_PYTHON") or str(ROOT / ".upstream/bin/python")
INSTALL = (
    "python3 -m venv .upstream && .upstream/bin/pip install torch==2.13.0 && "
    ".upstream/bin/pip install 'zeus[bso-server]==0.16.0' aiosqlite greenlet"
)

_SCHEMA = """
import sys
from sqlalchemy import create_engine
from zeus.optimizer.batch_size.server.database.schema import Base
Base.metadata.create_all(create_engine("sqlite:///" + sys.argv[1]))
"""


def upstream_missing() -> str | None:
    """Why upstream's server cannot run here, or None."""
    if not Path(UPSTREAM_PYTHON).exists():
        return f"upstream Zeus's server is not installed ({UPSTREAM_PYTHON}): {INSTALL}"
    found = subprocess.run(
        [UPSTREAM_PYTHON, "-c", "import zeus.optimizer.batch_size.server.router"],
        capture_output=True,
        text=True,
        env={**os.environ, "ZEUS_BSO_DATABASE_URL": "sqlite+aiosqlite:///:memory:"},
    )
    if found.returncode != 0:
        return f"upstream Zeus's server does not import: {found.stderr[-500:]}; {INSTALL}"
    return None


@contextmanager
def upstream_server(tmp: Path, python: str = UPSTREAM_PYTHON, workers: int = 1) -> Iterator[str]:
    """Upstream's server (``python`` has ``zeus[bso-server]==0.16.0``) with ``workers``
    workers on a fresh SQLite file in ``tmp``; yields its base URL. The tests and the
    benchmarks start it with this."""
    db = tmp / "upstream.db"
    subprocess.run([python, "-c", _SCHEMA, str(db)], check=True)
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ZEUS_BSO_")},
        "ZEUS_BSO_DATABASE_URL": f"sqlite+aiosqlite:///{db}",
        "ZEUS_BSO_LOG_LEVEL": "WARN",
    }
    app = "zeus.optimizer.batch_size.server.router:app"
    log = (tmp / "upstream.log").open("w")
    proc = subprocess.Popen(
        [python, "-m", "uvicorn", app, "--port", str(port), "--workers", str(workers)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own group: stopping it takes uvicorn's workers along
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"upstream's server exited: {(tmp / 'upstream.log').read_text()}"
                )
            try:
                if httpx.get(url + "/docs", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("upstream's server did not start in 60 s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=15)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
