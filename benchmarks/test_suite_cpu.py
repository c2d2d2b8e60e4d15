"""Where the test suite's CPU time goes: every process's CPU seconds, by kind, over one run.

The suite is CPU-bound on two cores (the contributing page's "Workers and timings"), so what it
costs is the CPU its processes use: the pytest workers, the servers, the training scripts and
the rest that the tests start. This runs a command (by default the suite as ``scripts/test``
runs it, without mypy and the docs build) and reads ``/proc`` every half second meanwhile: each
process's user and system time (a process already running at the start counts from there on,
so the kernel's threads and other tenants count what they took during the run), and how busy
the machine was (``/proc/stat``). A process that lives less than half a second can be missed
whole; such processes are a few percent of the total. Linux only.

A second table puts the processes the tests started under the test module that started them:
a process inherits the ``PYTEST_CURRENT_TEST`` of the test running in its pytest worker, which
its ``/proc/PID/environ`` keeps (a session's shared servers go to the test whose setup started
them). A process forked from one of the suite's forkservers (servers, commands and the preloaded
training processes: ``tests/forkserver.py``) has its forkserver's environment there, so it notes
its test in a folder this script names (`STARTED_BY`). What the workers do in-process is theirs,
not a module's.

Prints the tables and writes benchmarks/results/test_suite_cpu.{json,md}.

    .venv/bin/python benchmarks/test_suite_cpu.py [-- COMMAND ...]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from _figures import commit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.forkserver import STARTED_BY  # the folder where forks note their test

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).parent / "results"
WORKERS = str((os.cpu_count() or 1) + 1)
"""As ``scripts/test`` chooses them: one more than the cores."""
SUITE = [sys.executable, "-m", "pytest", "-n", WORKERS, "--dist", "loadgroup", "-q"]
TICK = os.sysconf("SC_CLK_TCK")
KERNEL_THREAD = 0x00200000
"""``PF_KTHREAD``, the flag of a kernel thread in ``/proc/PID/stat``."""
COMMANDS = (
    ("pytest workers", "sys.stdin.readline()"),  # pytest-xdist's workers (execnet)
    ("pytest (the main process, nested runs)", "-m pytest"),
    ("server processes", "zeus-bso-server serve"),
    ("server processes", "tests/forkserver.py"),  # forked servers have their parent's command line
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


COMMANDS_SHOWN = 25
"""The commands whose processes took most, shown one a row (`command_of`)."""
MODULES_SHOWN = 15
"""The test modules whose processes took most, shown one a row; the rest in one row."""
NO_MODULE = "(started by no test: the workers, the sampled machine's own)"


def command_of(argv: list[str]) -> str:
    """A short name for a command line: its words with paths cut to their last part, a ``-c``
    program to its first 30 characters, at most five words."""
    words: list[str] = []
    for index, word in enumerate(argv[:5]):
        if index and argv[index - 1] == "-c":
            word = " ".join(word.split())[:30]
        elif "/" in word and not word.startswith("-"):
            word = word.rstrip("/").rsplit("/", 1)[-1]
        words.append(word)
    return " ".join(words)


def started_by(pid: int) -> str:
    """The test module whose test started process ``pid``, from its environment as it was
    started (`NO_MODULE`: none, or it cannot be read)."""
    try:
        environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return NO_MODULE
    for entry in environment:
        if entry.startswith(b"PYTEST_CURRENT_TEST="):
            return entry.split(b"=", 1)[1].decode(errors="replace").split("::", 1)[0]
    return NO_MODULE


def forked(folder: Path) -> dict[tuple[int, str], str]:
    """The test module of each process forked from the suite's forkservers (servers, commands,
    preloaded training processes), by (pid, start time), from the notes they left in ``folder``
    (`tests.forkserver.STARTED_BY`): their own environment names their forkserver's test."""
    found = {}
    for note in folder.iterdir():
        pid, start = note.name.split("-", 1)
        found[(int(pid), start)] = note.read_text().split("::", 1)[0]
    return found


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


Tally = dict[str, tuple[int, float]]
"""Processes and CPU seconds, by kind or by test module, most CPU first."""


def watch(command: list[str]) -> tuple[Tally, Tally, Tally, float, float, int]:
    """Run ``command`` and sample ``/proc`` meanwhile: CPU seconds and processes by kind, by
    the test module that started them and by that module and their command (`command_of`),
    the wall time, the busy fraction of the machine, and the command's exit status."""
    start = cpu_seconds()
    seen = dict(start)
    module_of = dict.fromkeys(start, NO_MODULE)
    busy_0, total_0 = busy()
    began = time.monotonic()
    forks = tempfile.TemporaryDirectory(prefix="test-suite-cpu-")
    env = {**os.environ, STARTED_BY: forks.name}
    # As scripts/test: bytecode written, so each module is compiled once, not in every process.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    process = subprocess.Popen(command, cwd=ROOT, env=env)
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            record(cpu_seconds())

    def record(now: dict[tuple[int, str], tuple[str, list[str], float]]) -> None:
        for key, (name, argv, seconds) in now.items():  # the command line seen first stays
            seen[key] = (*seen[key][:2], seconds) if key in seen else (name, argv, seconds)
            if key not in module_of:
                module_of[key] = started_by(key[0])

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    status = process.wait()
    done.set()
    sampler.join()
    record(cpu_seconds())
    module_of.update(forked(Path(forks.name)))
    forks.cleanup()
    wall = time.monotonic() - began
    busy_1, total_1 = busy()
    by_kind: defaultdict[str, float] = defaultdict(float)
    by_module: defaultdict[str, float] = defaultdict(float)
    by_command: defaultdict[str, float] = defaultdict(float)
    of_kind: Counter[str] = Counter()
    of_module: Counter[str] = Counter()
    of_command: Counter[str] = Counter()
    for key, (name, argv, seconds) in seen.items():
        used = seconds - (start[key][2] if key in start else 0.0)
        if key[0] == os.getpid() or used <= 0.0:
            continue  # this script, or a process that used nothing
        kind, module = kind_of(name, argv), module_of.get(key, NO_MODULE)
        by_kind[kind] += used
        by_module[module] += used
        of_kind[kind] += 1
        of_module[module] += 1
        run = f"{module}: `{command_of(argv) or name}`"
        by_command[run] += used
        of_command[run] += 1
    kinds = {kind: (of_kind[kind], seconds) for kind, seconds in most_first(by_kind)}
    modules = {module: (of_module[module], seconds) for module, seconds in most_first(by_module)}
    commands = {run: (of_command[run], seconds) for run, seconds in most_first(by_command)}
    busy_fraction = (busy_1 - busy_0) / max(total_1 - total_0, 1)
    return kinds, modules, commands, wall, busy_fraction, status


def most_first(seconds: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(seconds.items(), key=lambda item: -item[1])


def shown(modules: Tally) -> Tally:
    """The `MODULES_SHOWN` modules whose processes took most, then the rest together, then the
    processes no test started."""
    started = [(m, tally) for m, tally in modules.items() if m != NO_MODULE]
    rows = dict(started[:MODULES_SHOWN])
    rest = started[MODULES_SHOWN:]
    if rest:
        rows[f"the other {len(rest)} modules"] = (
            sum(n for _, (n, _) in rest),
            sum(seconds for _, (_, seconds) in rest),
        )
    if NO_MODULE in modules:
        rows[NO_MODULE] = modules[NO_MODULE]
    return rows


def table(title: str, rows: Tally, total: float) -> list[str]:
    lines = [f"| {title} | processes | CPU-seconds | share |", "|---|---:|---:|---:|"]
    for name, (processes, seconds) in rows.items():
        lines.append(f"| {name} | {processes} | {seconds:,.0f} | {100 * seconds / total:.0f}% |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", nargs="*", help="what to run (default: the suite)")
    args = parser.parse_args()
    command = args.command or SUITE
    kinds, modules, commands, wall, busy_fraction, status = watch(command)
    at = commit()
    total = sum(seconds for _, seconds in kinds.values())
    lines = [
        f"Test suite CPU at {at}: `{' '.join(command)}` ({platform.machine()}, "
        f"{os.cpu_count()} cores): {wall / 60:.1f} min, exit status {status}, the machine "
        f"{100 * busy_fraction:.0f}% busy, {total:,.0f} CPU-seconds sampled.",
        "",
        *table("kind", kinds, total),
        "",
        "The same processes by the test module that started them:",
        "",
        *table("test module", shown(modules), total),
        "",
        f"The {COMMANDS_SHOWN} commands that took most, by the test module that started them:",
        "",
        *table("test module: command", dict(list(commands.items())[:COMMANDS_SHOWN]), total),
    ]
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
        "test_modules": {
            m: {"processes": n, "cpu_seconds": round(s, 1)} for m, (n, s) in modules.items()
        },
        "commands": {
            c: {"processes": n, "cpu_seconds": round(s, 1)} for c, (n, s) in commands.items()
        },
    }
    (RESULTS / "test_suite_cpu.json").write_text(json.dumps(figures, indent=2) + "\n")
    sys.exit(status)


if __name__ == "__main__":
    main()
