"""The README's dashboard screenshot: a server on a throwaway SQLite file, one job replayed from
the Zeus trace through HTTP (40 recurrences of CIFAR-100 on a V100), its page shot in Chromium.

    .venv/bin/python scripts/dashboard_screenshot.py [--out docs/dashboard.png]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from zeus_bso.client import ServerClient
from zeus_bso.sim import ServerBackend, job_spec, load_trace_job, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/dashboard.png"))
    parser.add_argument("--recurrences", type=int, default=40)
    args = parser.parse_args()
    chromium = os.environ.get("ZEUS_BSO_CHROMIUM") or shutil.which("chromium")
    if chromium is None:
        sys.exit("no Chromium: apt-get install chromium, or set ZEUS_BSO_CHROMIUM")
    with tempfile.TemporaryDirectory() as tmp:
        port = 8765
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen(
            [str(Path(sys.executable).parent / "zeus-bso-server"), "serve", "--port", str(port),
             "--db", f"sqlite:///{tmp}/bso.db", "--log-level", "warning"],
        )  # fmt: skip
        try:
            for _ in range(100):
                try:
                    if httpx.get(url + "/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(0.1)
            trace = load_trace_job("cifar100", "v100")
            spec = job_spec(trace, "cifar100-resnet-nightly", mab_seed=1)
            with ServerClient(url) as client:
                backend = ServerBackend(client, spec)
                simulate(trace, backend, recurrences=args.recurrences, seed=1, eta_knob=0.5)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=chromium)
                page = browser.new_page(viewport={"width": 1280, "height": 1000})
                page.goto(f"{url}/dashboard/jobs/{spec.job_id}")
                page.screenshot(path=str(args.out), full_page=False)
                browser.close()
            print(f"wrote {args.out}")
        finally:
            server.terminate()
            server.wait(timeout=15)


if __name__ == "__main__":
    main()
