"""Every multi-process test, run again and again beside a CPU-heavy process: how often each passes.

The two-process tests (Lightning DDP and two nodes, HF under torch.distributed.run, Kubeflow
under torchrun, the elastic replicas, an elastic restart, the exit checks, the power limits'
ranks and kills; most of their processes forked by `tests.preloaded_python`) once died with
SIGABRT after a successful fit, by chance, more often under load. This script runs them all, as one
pytest session per round, ``--runs`` times in a row, with a busy-looping Python process beside
them (``--no-hog`` to leave it out), and counts passes and failures per test. Each test runs
against SQLite only: the database is not what these tests stress.

    .venv/bin/python benchmarks/soak_multiprocess.py [--runs 100] [--no-hog] [--resume]

Writes benchmarks/results/soak_multiprocess.{json,md} after every round, so an interrupted soak
still leaves its figures; a failing round's pytest output is kept beside them as
soak_multiprocess.failure-<round>.log. ``--resume`` goes on from those figures, up to ``--runs``
rounds in all, when they are of the same commit and the same hog setting: a hundred rounds take
longer than one sitting, so a soak of one commit can be spread over several, in a worktree of
that commit (``git worktree add /tmp/soak <commit>``, with its results file copied in).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import _figures as figures

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).parent / "results"

TESTS = (
    "tests/integrations/test_lightning.py::test_ddp_on_two_cpu_processes[sqlite]",
    "tests/deploy/test_kubeflow.py::test_ddp_on_two_cpu_processes_one_rank_talks_every_rank_follows",
    "tests/elastic/test_replicas.py::test_replicas_recover_the_closed_form_noise_and_agree",
    "tests/elastic/test_replicas.py::"
    "test_without_no_sync_every_micro_batch_is_all_reduced_and_nothing_is_measured",
    "tests/elastic/test_replicas.py::test_lightning_ddp_two_processes_one_decision_per_epoch",
    "tests/client/test_optimizer.py::test_an_elastic_restart_continues_the_trial",
    "tests/elastic/test_exit.py::test_a_rank_that_ends_while_a_gloo_worker_holds_python_work_exits_0[hook]",
    "tests/elastic/test_exit.py::"
    "test_a_rank_that_ends_while_a_gloo_worker_holds_python_work_exits_0[collective]",
    "tests/integrations/test_topology.py",
    "tests/integrations/test_examples.py::test_example_runs_recurrences",
    "tests/integrations/test_lightning.py::test_an_error_on_rank_0_ends_every_rank[sqlite]",
    "tests/integrations/test_power_limits.py::test_two_ranks_on_one_node_set_their_gpu_once[sqlite]",
    "tests/integrations/test_power_limits.py::"
    "test_ctrl_c_on_a_lightning_ddp_fit_restores_every_ranks_gpu[sqlite]",
    "tests/integrations/test_power_limits.py::test_a_killed_run_has_its_limit_restored[sqlite-SIGTERM]",
    "tests/integrations/test_power_limits.py::test_a_killed_run_has_its_limit_restored[sqlite-SIGKILL]",
    "tests/client/test_optimizer.py::test_a_plain_loop_on_every_rank_of_torchrun_trains_one_run[sqlite]",
    "tests/client/test_sigterm.py::"
    "test_a_terminated_lightning_fit_is_released_through_lightning_s_own_handler[sqlite]",
    "tests/test_preloaded_python.py",
)


def node_id(case: ET.Element) -> str:
    """The pytest node id of a JUnit test case (``classname`` is the dotted module path)."""
    module = case.get("classname", "").replace(".", "/") + ".py"
    return f"{module}::{case.get('name')}"


def one_round(junit: Path, log: Path) -> dict[str, str]:
    """Runs every test once; returns each test's outcome (passed, failed, error, skipped), by
    node id (a module in ``TESTS`` stands for each of its tests)."""
    junit.unlink(missing_ok=True)
    with log.open("w") as out:
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
             f"--junitxml={junit}", *TESTS],
            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, check=False,
        )  # fmt: skip
    outcomes = {test: "missing" for test in TESTS if "::" in test}
    if not junit.exists():
        return outcomes
    for case in ET.parse(junit).iter("testcase"):
        verdict = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                verdict = {"failure": "failed"}.get(child.tag, child.tag)
        outcomes[node_id(case)] = verdict
    for test in [t for t, verdict in outcomes.items() if verdict == "missing"]:
        if any(other.startswith(f"{test}[") for other in outcomes):
            del outcomes[test]  # it stands for its parametrized cases, each counted
    return outcomes


def write(results: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "soak_multiprocess.json").write_text(json.dumps(results, indent=2) + "\n")
    lines = [
        "# Multi-process tests, run again and again",
        "",
        f"{results['rounds']} rounds at commit {results['commit']}, one pytest session each, on "
        f"{results['machine']}"
        f"{', beside a busy-looping Python process' if results['hog'] else ''};"
        f" {results['seconds']:.0f} s in all.",
        "",
        "| test | passed | failed | other |",
        "|---|---:|---:|---:|",
    ]
    for test, counts in results["tests"].items():
        passed, failed = counts.get("passed", 0), counts.get("failed", 0)
        other = sum(counts.values()) - passed - failed
        lines.append(f"| `{test}` | {passed} | {failed} | {other} |")
    (RESULTS / "soak_multiprocess.md").write_text("\n".join(lines) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--no-hog", dest="hog", action="store_false")
    parser.add_argument(
        "--resume", action="store_true", help="go on from the saved figures of this commit"
    )
    args = parser.parse_args()
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    commit = figures.commit()
    results: dict[str, Any] = {
        "commit": commit or "unknown", "machine": machine, "hog": args.hog, "rounds": 0,
        "seconds": 0.0,
        "tests": {test: {} for test in TESTS if "::" in test}, "failed_rounds": [],
    }  # fmt: skip
    if args.resume:
        saved = json.loads((RESULTS / "soak_multiprocess.json").read_text())
        if (saved["commit"], saved["hog"]) != (results["commit"], args.hog):
            parser.error(
                f"the saved figures are of commit {saved['commit']} (hog: {saved['hog']}), "
                f"this is {results['commit']} (hog: {args.hog}): start afresh without --resume"
            )
        results = saved
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hog else None
    start = time.monotonic() - results["seconds"]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for round_ in range(results["rounds"] + 1, args.runs + 1):
                log = Path(tmp) / "round.log"
                outcomes = one_round(Path(tmp) / "junit.xml", log)
                for test, verdict in outcomes.items():
                    counts = results["tests"].setdefault(test, {})
                    counts[verdict] = counts.get(verdict, 0) + 1
                bad = [t for t, v in outcomes.items() if v != "passed"]
                if bad:
                    results["failed_rounds"].append({"round": round_, "tests": bad})
                    kept = RESULTS / f"soak_multiprocess.failure-{round_}.log"
                    kept.write_text(log.read_text())
                results["rounds"] = round_
                results["seconds"] = time.monotonic() - start
                write(results)
                verdict = "ok" if not bad else "FAILED " + ", ".join(bad)
                print(f"round {round_}: {verdict}", flush=True)
    finally:
        if hog is not None:
            hog.kill()
    return 1 if results["failed_rounds"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
