"""``integrations/monitoring``: the alert rules pass promtool's checks and their own tests, and a
real Prometheus, configured from the shipped ``prometheus.yml``, scrapes a real server with its
read-only token and evaluates the alerts; every query of the rules and of the Grafana dashboard
evaluates there over series the server exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.helpers import ServerProcess, job_body, run_recurrences, sqlite_url, unique_id
from tests.ports import free_port

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="no Prometheus: apt-get install prometheus (.ci/run does)",
)

MONITORING = Path(__file__).resolve().parents[2] / "integrations" / "monitoring"
RULES = MONITORING / "zeus-bso.rules.yaml"
DASHBOARD = MONITORING / "grafana-dashboard.json"
TOKEN, READ_TOKEN = "monitoring-token-value", "monitoring-read-token"
SCRAPE_JOB = "zeus-bso"
NO_DATA_HERE = re.compile(r'status=~"5\.\."')
"""Queries of 5xx answers: this server answers none, so they have no data (still valid)."""


def test_the_rules_pass_promtool_and_their_own_tests() -> None:
    assert PROMTOOL is not None
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", RULES.name],
        cwd=MONITORING,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alerts())} rules found" in checked.stdout
    tested = subprocess.run(
        [PROMTOOL, "test", "rules", "zeus-bso.rules.test.yaml"],
        cwd=MONITORING,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    # Every alert has a test that expects it to fire.
    tests = yaml.safe_load((MONITORING / "zeus-bso.rules.test.yaml").read_text())["tests"]
    fired = {
        case["alertname"]
        for test in tests
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    assert fired == {rule["alert"] for rule in alerts()}


def test_the_dashboard_is_laid_out_and_every_panel_queries_prometheus() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = dashboard["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        box = panel["gridPos"]
        assert box["x"] + box["w"] <= 24, panel["title"]
        here = {(x, y) for x in range(box["x"], box["x"] + box["w"])
                for y in range(box["y"], box["y"] + box["h"])}  # fmt: skip
        assert not here & cells, f"{panel['title']} overlaps another panel"
        cells |= here
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
        assert panel["targets"], panel["title"]
        assert all(t["expr"] for t in panel["targets"]), panel["title"]
    assert [i["name"] for i in dashboard["__inputs"]] == ["DS_PROMETHEUS"]


def alerts() -> list[dict[str, Any]]:
    return [
        rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]
    ]


def dashboard_queries() -> list[tuple[str, str]]:
    """Each panel's queries, with Grafana's variables as a Prometheus of the test reads them."""
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], t["expr"].replace("$job", SCRAPE_JOB).replace("$__rate_interval", "1m"))
        for panel in dashboard["panels"]
        for t in panel.get("targets", [])
    ]


class Prometheus:
    def __init__(self, url: str, process: subprocess.Popen[str], log: Path) -> None:
        self.url, self.process, self.log = url, process, log

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = httpx.get(self.url + "/api/v1/query", params={"query": expr}, timeout=10)
        assert answer.status_code == 200, f"{expr}: {answer.text}"
        body = answer.json()
        assert body["status"] == "success", f"{expr}: {body}"
        return list(body["data"]["result"])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    tmp = tmp_path_factory.mktemp("monitoring")
    server = ServerProcess(
        sqlite_url(tmp / "bso.db"),
        cwd=tmp,
        env={"ZEUS_BSO_TOKEN": TOKEN, "ZEUS_BSO_READ_TOKEN": READ_TOKEN},
    )
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as api:
        job_id = unique_id("mon")
        body = job_body(job_id, batch_sizes=[32, 64, 128], default_batch_size=64, max_epochs=3)
        assert api.post("/jobs", json=body).status_code == 201
        run_recurrences(api, job_id, 3)
        api.get("/dashboard")
    # The shipped configuration, pointed at this server, its files here, and quick.
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(RULES)]
    (scrape,) = config["scrape_configs"]
    assert scrape["job_name"] == SCRAPE_JOB
    token_file = tmp / "read-token"
    token_file.write_text(READ_TOKEN + "\n")
    scrape["authorization"]["credentials_file"] = str(token_file)
    scrape["static_configs"] = [{"targets": [f"127.0.0.1:{server.port}"]}]
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = tmp / "prometheus.log"
    assert PROMETHEUS is not None
    with log.open("w") as out:
        process = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
    running = Prometheus(f"http://127.0.0.1:{port}", process, log)
    try:
        deadline = time.monotonic() + 60
        while True:  # ready, and two scrapes in (a rate needs two samples)
            try:
                scrapes = running.query(f'count_over_time(up{{job="{SCRAPE_JOB}"}}[1m])')
            except (httpx.HTTPError, AssertionError):
                scrapes = []
            if scrapes and float(scrapes[0]["value"][1]) >= 3:
                break
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        yield running
    finally:
        process.terminate()
        process.wait(timeout=30)
        server.stop()


def test_prometheus_scrapes_the_server_with_the_read_token(prometheus: Prometheus) -> None:
    (up,) = prometheus.query(f'up{{job="{SCRAPE_JOB}"}}')
    assert up["value"][1] == "1", prometheus.log.read_text()
    (fleet_up,) = prometheus.query(f'zeus_bso_fleet_up{{job="{SCRAPE_JOB}"}}')
    assert fleet_up["value"][1] == "1"
    (jobs,) = prometheus.query("zeus_bso_jobs")
    assert jobs["value"][1] == "1"


def test_every_query_evaluates_over_series_the_server_exports(prometheus: Prometheus) -> None:
    queries = dashboard_queries() + [(rule["alert"], rule["expr"]) for rule in alerts()]
    for where, expr in queries:
        prometheus.query(expr)  # valid PromQL
        for name in set(re.findall(r"\b(zeus_bso_\w+|up)\{", expr)):
            assert prometheus.query(f'{name}{{job="{SCRAPE_JOB}"}}'), f"{where}: no {name}"
    # The dashboard's panels show data (the 5xx share aside: no request failed here).
    for title, expr in dashboard_queries():
        if not NO_DATA_HERE.search(expr):
            assert prometheus.query(expr), f"{title}: {expr} has no data"
    # The dashboard's variable lists the scrape job.
    values = httpx.get(
        prometheus.url + "/api/v1/label/job/values", params={"match[]": "zeus_bso_fleet_up"}
    ).json()["data"]
    assert values == [SCRAPE_JOB]


def test_prometheus_loads_and_evaluates_every_alert(prometheus: Prometheus) -> None:
    deadline = time.monotonic() + 30
    while True:
        groups = httpx.get(prometheus.url + "/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        if rules and all(rule["lastEvaluation"] > "0001-01-01T00:00:00Z" for rule in rules):
            break
        assert time.monotonic() < deadline, rules
        time.sleep(0.5)
    assert sorted(rule["name"] for rule in rules) == sorted(rule["alert"] for rule in alerts())
    for rule in rules:
        assert rule["health"] == "ok", rule
        assert rule["state"] == "inactive", rule  # a healthy server raises none
