"""A run's power-limit watchdog: a small process that outlives its trainer by a moment.

`GpuPowerLimits` starts one (``python -m zeus_bso.power.watchdog --pid PID --records DIR``)
before it first changes a limit. It waits for the trainer to end, without polling where Linux
gives a process's exit as a file descriptor (``pidfd``), and then puts back every GPU whose
record the trainer still owns: a trainer killed by SIGKILL, the out-of-memory killer, or a
signal whose handler never ran (SIGABRT from NCCL's watchdog) restores within a second, not at
the node's next run. It runs in a session of its own and ignores the signals a scheduler sends
a job's processes (SIGTERM, SIGINT, SIGHUP, SIGQUIT): the trainer restores on those itself, and
the watchdog must still be there if it cannot. The trainer tells it ``done`` on its standard
input when it has restored everything, and it exits; it never outlives the trainer otherwise.
What a container's or a cgroup's kill takes down with the trainer is for the node's
``zeus-bso power restore`` (a preStop hook, a Slurm epilog).
"""

from __future__ import annotations

import argparse
import logging
import os
import select
import signal
import sys
import time
from pathlib import Path

IGNORED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
READY = "ready"
"""What the watchdog says on its standard output once it watches."""
POLL_S = 0.25
"""How often the trainer is looked for where no ``pidfd`` tells its end."""


def wait_for_end(pid: int, told: int | None) -> bool:
    """Wait until process ``pid`` (this one's parent) ends, or says ``done`` on ``told``.
    Returns whether it ended."""
    pidfd: int | None = None
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except (AttributeError, OSError):  # no pidfd: an older kernel, or not Linux
        pidfd = None
    while True:
        if os.getppid() != pid:  # adopted by another process: the parent is gone
            return True
        watched = [fd for fd in (pidfd, told) if fd is not None]
        if not watched:
            time.sleep(POLL_S)
            continue
        ready, _, _ = select.select(watched, [], [], None if pidfd is not None else POLL_S)
        if pidfd is not None and pidfd in ready:
            return True
        if told is not None and told in ready:
            said = os.read(told, 64)
            if said.startswith(b"done"):
                return False
            if not said:  # closed: the parent ended (seen above), or closed it
                told = None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zeus_bso.power.watchdog")
    parser.add_argument("--pid", type=int, required=True, help="the trainer")
    parser.add_argument("--records", type=Path, required=True, help="the node's records")
    args = parser.parse_args(argv)
    for signum in IGNORED:
        signal.signal(signum, signal.SIG_IGN)
    logging.basicConfig(format="%(message)s", level=logging.INFO, stream=sys.stderr)
    print(READY, flush=True)  # the trainer goes on once it reads this
    if not wait_for_end(args.pid, sys.stdin.fileno()):
        return 0
    from zeus_bso.power.limits import restore_orphaned

    restore_orphaned(args.records, owner=args.pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
