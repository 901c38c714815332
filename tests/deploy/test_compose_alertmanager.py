"""compose.yaml's Alertmanager, offline (no container runs): its config passes ``amtool
check-config``; compose's Prometheus sends its alerts to the compose service, which
mounts that config where its command reads it; and a real Alertmanager (Debian's
``prometheus-alertmanager``) started on this machine with the same config groups alerts
by alert name and queue type and applies its inhibitions; and compose's Prometheus, on
its own config with the targets pointed at that Alertmanager, delivers a firing alert to
it with ``runbook_url`` rendered from ``runbook_base``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from dataplane.dev.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "compose" / "alertmanager.yml"
INSTALL = "apt-get update && apt-get install -y prometheus-alertmanager"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is missing: `{INSTALL}`")
    return found


def test_amtool_accepts_the_compose_config() -> None:
    done = subprocess.run(
        [tool("amtool"), "check-config", str(CONFIG)], capture_output=True, text=True, timeout=60
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0 and "SUCCESS" in said, said
    config = yaml.safe_load(CONFIG.read_text())
    assert config["route"]["group_by"] == ["alertname", "messaging_destination_name"]
    # Both severities the rules use reach the one receiver.
    for severity in ("page", "ticket"):
        routed = subprocess.run(
            [tool("amtool"), "config", "routes", "test", f"--config.file={CONFIG}",
             f"severity={severity}", "alertname=DataplanePoison"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert routed.stdout.split() == ["team-webhook"], routed.stdout + routed.stderr


def test_compose_prometheus_sends_its_alerts_to_the_compose_alertmanager() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    prometheus = yaml.safe_load((ROOT / "deploy" / "compose" / "prometheus.yml").read_text())
    targets = [
        target
        for manager in prometheus["alerting"]["alertmanagers"]
        for static in manager["static_configs"]
        for target in static["targets"]
    ]
    assert targets == ["alertmanager:9093"]
    service = compose["services"]["alertmanager"]
    assert "alertmanager" in service["image"] and service["read_only"] is True
    mounted = dict(volume.split(":")[1::-1] for volume in service["volumes"])
    read_from = next(a for a in service["command"] if a.startswith("--config.file="))
    target = read_from.split("=", 1)[1]
    assert mounted[target] == "./deploy/compose/alertmanager.yml"
    assert any(port.endswith(":9093") for port in service["ports"])
    assert "alertmanager" in compose["volumes"]


def _alert(name: str, **labels: str) -> dict[str, Any]:
    return {"labels": {"alertname": name, "severity": "page", **labels}, "annotations": {}}


Call = Callable[..., Any]


@contextmanager
def alertmanager(tmp_path: Path) -> Iterator[tuple[int, Call]]:
    """A real Alertmanager on compose's config (its command's flags, a free port):
    (its port, a JSON caller of its API v2)."""
    port = free_port()
    log = (tmp_path / "alertmanager.log").open("w")
    process = subprocess.Popen(
        [
            tool("prometheus-alertmanager"),
            f"--config.file={CONFIG}",
            f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}/api/v2"

    def call(path: str, body: object | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            base + path, data=data, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            text = response.read()
        return json.loads(text) if text else None

    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                call("/status")
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "alertmanager.log").read_text()
                time.sleep(0.2)
        yield port, call
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def test_a_real_alertmanager_groups_by_alert_and_type_and_inhibits(tmp_path: Path) -> None:
    with alertmanager(tmp_path) as (_, call):
        call(
            "/alerts",
            [
                _alert("DataplaneBacklogAge", messaging_destination_name="surface-users"),
                _alert("DataplaneBacklogAge", messaging_destination_name="surface-skills"),
                _alert("DataplaneNoReadyWorker", messaging_destination_name="surface-users"),
                _alert("DataplaneNoConsumer", messaging_destination_name="surface-users"),
                _alert("DataplaneNoConsumer", messaging_destination_name="surface-skills"),
                _alert("DataplaneLatencyBurnFast"),
                _alert("DataplaneLatencyBurnSlow", severity="ticket"),
            ],
        )
        groups = {
            (g["labels"]["alertname"], g["labels"].get("messaging_destination_name"))
            for g in call("/alerts/groups")
        }
        assert groups == {
            ("DataplaneBacklogAge", "surface-users"),
            ("DataplaneBacklogAge", "surface-skills"),
            ("DataplaneNoReadyWorker", "surface-users"),
            ("DataplaneNoConsumer", "surface-users"),
            ("DataplaneNoConsumer", "surface-skills"),
            ("DataplaneLatencyBurnFast", None),
            ("DataplaneLatencyBurnSlow", None),
        }, groups
        inhibited = {
            (a["labels"]["alertname"], a["labels"].get("messaging_destination_name"))
            for a in call("/alerts")
            if a["status"]["inhibitedBy"]
        }
        # Only the same type's NoConsumer, and the slow burn under the fast one.
        assert inhibited == {
            ("DataplaneNoConsumer", "surface-users"),
            ("DataplaneLatencyBurnSlow", None),
        }, inhibited


def test_compose_prometheus_delivers_a_firing_alert_to_the_alertmanager(tmp_path: Path) -> None:
    """One always-firing rule in the form of dashboards/' (severity, the runbook_url
    and trace_url templates); compose's prometheus.yml with only its Alertmanager target
    made local."""
    prometheus = yaml.safe_load((ROOT / "deploy" / "compose" / "prometheus.yml").read_text())
    base = prometheus["global"]["external_labels"]["runbook_base"]
    console = prometheus["global"]["external_labels"]["console_base"]
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "wiring",
                        "rules": [
                            {
                                "alert": "ComposeWiring",
                                # The type from the series, as dashboards/' alerts have
                                # it ($labels are the expression's, not the rule's).
                                "expr": 'label_replace(vector(1), "messaging_destination_name",'
                                ' "surface-users", "", "")',
                                "labels": {
                                    "severity": "ticket",
                                    "messaging_destination_name": "surface-users",
                                },
                                "annotations": {
                                    "runbook_url": "{{ $externalLabels.runbook_base }}"
                                    "/ComposeWiring.md",
                                    "trace_url": "{{ $externalLabels.console_base }}"
                                    "/jobs/slowest?since=1h"
                                    "&type={{ $labels.messaging_destination_name }}",
                                },
                            }
                        ],
                    }
                ]
            }
        )
    )
    with alertmanager(tmp_path) as (port, call):
        (manager,) = prometheus["alerting"]["alertmanagers"]
        manager["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
        config = {
            "global": {**prometheus["global"], "evaluation_interval": "1s"},
            "alerting": prometheus["alerting"],
            "rule_files": [str(rules)],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        log = (tmp_path / "prometheus.log").open("w")
        process = subprocess.Popen(
            [
                tool("prometheus"),
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'prom-data'}",
                f"--web.listen-address=127.0.0.1:{free_port()}",
                # Alerts of the first evaluations go before the Alertmanager targets are
                # discovered (a few seconds) and are resent only after this (1m default).
                "--rules.alert.resend-delay=2s",
            ],
            stdout=log,
            stderr=log,
        )
        try:
            deadline = time.monotonic() + 60
            while not (received := call("/alerts")):
                assert time.monotonic() < deadline, (tmp_path / "prometheus.log").read_text()
                time.sleep(0.5)
        finally:
            process.terminate()
            process.wait(timeout=30)
            log.close()
    (alert,) = received
    assert alert["annotations"]["runbook_url"] == f"{base}/ComposeWiring.md"
    trace_url = f"{console}/jobs/slowest?since=1h&type=surface-users"  # & as it is
    assert alert["annotations"]["trace_url"] == trace_url
    assert alert["labels"]["runbook_base"] == base  # an external label travels with it
    assert alert["labels"]["messaging_destination_name"] == "surface-users"
    assert [r["name"] for r in alert["receivers"]] == ["team-webhook"]
