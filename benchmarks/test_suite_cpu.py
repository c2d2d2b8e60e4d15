"""Where the test suite's CPU time goes: every process's CPU seconds, by kind, over one run.

The suite is CPU-bound on two cores (the contributing page's "Workers and timings"), so what it
costs is the CPU its processes use: the pytest workers, the servers, the training scripts and
the rest that the tests start. This runs a command (by default the suite as ``scripts/test``
runs it, without mypy and the docs build) and reads ``/proc`` every half second meanwhile: each
process's user and system time (a process already running at the start counts from there on,
so the kernel's threads and other tenants count what they took during the run), and how busy
the machine was (``/proc/stat``). A process that lives less than half a second can be missed
whole; such processes are a few percent of the total. Linux only.

Prints a table and writes benchmarks/results/test_suite_cpu.{json,md}.

    .venv/bin/python benchmarks/test_suite_cpu.py [-- COMMAND ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from _figures import commit

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
SUITE = [sys.executable, "-m", "pytest", "-n", "auto", "--dist", "loadgroup", "-q"]
TICK = os.sysconf("SC_CLK_TCK")
KERNEL_THREAD = 0x00200000
"""``PF_KTHREAD``, the flag of a kernel thread in ``/proc/PID/stat``."""
COMMANDS = (
    ("pytest workers", "sys.stdin.readline()"),  # pytest-xdist's workers (execnet)
    ("pytest (the main process, nested runs)", "-m pytest"),
    ("server processes", "zeus-bso-server serve"),
    ("`zeus-bso-server db` commands", "zeus-bso-server db"),
    ("`zeus-bso` commands", "bin/zeus-bso "),
    ("Schemathesis", "bin/schemathesis "),
)
"""Kinds of process known by a part of their command line, the first that matches."""
NAMES = (
    ("databases, nginx, Prometheus", ("postgres", "mariadbd", "mysqld", "nginx", "prometheus")),
    ("podman and its containers", ("podman", "conmon", "buildah", "crun", "runc", "pasta")),
    ("the browser", ("chromium", "chrome")),
    ("training scripts and other Python", ("python",)),
)
"""Kinds of process known by the start of their name, where no command line matched."""


def kind_of(name: str, argv: list[str]) -> str:
    """The kind of the process named ``name`` with command line ``argv`` (`COMMANDS`,
    `NAMES`)."""
    if not argv:
        return "kernel threads"
    line = " ".join(argv)
    for kind, part in COMMANDS:
        if part in line:
            return kind
    for kind, starts in NAMES:
        if name.startswith(starts):
            return kind
    return "other processes"


def cpu_seconds() -> dict[tuple[int, str], tuple[str, list[str], float]]:
    """Every process now: (pid, start time) -> its name, command line (empty: a kernel
    thread) and CPU seconds."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:  # it ended meanwhile
            continue
        name, fields = stat[stat.find("(") + 1 : stat.rfind(")")], stat[stat.rfind(")") + 2 :]
        values = fields.split()
        seconds = (int(values[11]) + int(values[12])) / TICK  # utime + stime
        command = [part.decode(errors="replace") for part in argv if part]
        if not int(values[6]) & KERNEL_THREAD and not command:
            command = [name]  # a process that ended and awaits its parent: no command line
        found[(int(entry), values[19])] = (name, command, seconds)
    return found


def busy() -> tuple[int, int]:
    """The machine's (busy, total) clock ticks since boot (``/proc/stat``)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    return sum(ticks) - idle, sum(ticks)


def watch(command: list[str]) -> tuple[dict[str, tuple[int, float]], float, float, int]:
    """Run ``command`` and sample ``/proc`` meanwhile: CPU seconds and processes by kind, the
    wall time, the busy fraction of the machine, and the command's exit status."""
    start = cpu_seconds()
    seen = dict(start)
    busy_0, total_0 = busy()
    began = time.monotonic()
    process = subprocess.Popen(command, cwd=ROOT)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            record(cpu_seconds())

    def record(now: dict[tuple[int, str], tuple[str, list[str], float]]) -> None:
        for key, (name, argv, seconds) in now.items():  # the command line seen first stays
            seen[key] = (*seen[key][:2], seconds) if key in seen else (name, argv, seconds)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    status = process.wait()
    done.set()
    sampler.join()
    record(cpu_seconds())
    wall = time.monotonic() - began
    busy_1, total_1 = busy()
    by_kind: Counter[str] = Counter()
    count: Counter[str] = Counter()
    for key, (name, argv, seconds) in seen.items():
        used = seconds - (start[key][2] if key in start else 0.0)
        if key[0] == os.getpid() or used <= 0.0:
            continue  # this script, or a process that used nothing
        kind = kind_of(name, argv)
        by_kind[kind] += used
        count[kind] += 1
    kinds = {kind: (count[kind], seconds) for kind, seconds in by_kind.most_common()}
    return kinds, wall, (busy_1 - busy_0) / max(total_1 - total_0, 1), status


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="*", help="what to run (default: the suite)")
    args = parser.parse_args()
    command = args.command or SUITE
    kinds, wall, busy_fraction, status = watch(command)
    at = commit()
    total = sum(seconds for _, seconds in kinds.values())
    lines = [
        f"Test suite CPU at {at}: `{' '.join(command)}` ({platform.machine()}, "
        f"{os.cpu_count()} cores): {wall / 60:.1f} min, exit status {status}, the machine "
        f"{100 * busy_fraction:.0f}% busy, {total:,.0f} CPU-seconds sampled.",
        "",
        "| kind | processes | CPU-seconds | share |",
        "|---|---:|---:|---:|",
    ]
    for kind, (processes, seconds) in kinds.items():
        lines.append(f"| {kind} | {processes} | {seconds:,.0f} | {100 * seconds / total:.0f}% |")
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "test_suite_cpu.md").write_text(text)
    figures = {
        "commit": at,
        "command": command,
        "cores": os.cpu_count(),
        "wall_seconds": round(wall, 1),
        "busy_fraction": round(busy_fraction, 3),
        "exit_status": status,
        "kinds": {k: {"processes": n, "cpu_seconds": round(s, 1)} for k, (n, s) in kinds.items()},
    }
    (RESULTS / "test_suite_cpu.json").write_text(json.dumps(figures, indent=2) + "\n")
    sys.exit(status)


if __name__ == "__main__":
    main()
