"""compose.yaml's Prometheus loads the plane's rules (offline: no container runs).

The rule files deploy/compose/prometheus.yml names are the ones compose.yaml mounts
from dashboards/; the config, with those paths and the metrics token pointed at the
files they mount, passes ``promtool check config`` (which loads and checks every rule).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from dataplane.dev.embedded import free_port

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "deploy" / "compose" / "prometheus.yml"


def mounts() -> dict[str, Path]:
    """Container path -> host file, of the Prometheus service's bind mounts."""
    service = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["prometheus"]
    out = {}
    for volume in service["volumes"]:
        source, target, *_ = volume.split(":")
        if source.startswith("./"):
            out[target] = ROOT / source
    return out


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: `apt-get update && apt-get install -y prometheus`")
    return found


def test_compose_prometheus_loads_every_rule_file_of_dashboards(tmp_path: Path) -> None:
    config = yaml.safe_load(CONFIG.read_text())
    mounted = mounts()
    assert mounted["/etc/prometheus/prometheus.yml"] == ROOT / "deploy/compose/prometheus.yml"
    rule_files = config["rule_files"]
    assert {mounted[path] for path in rule_files} == {
        ROOT / "dashboards" / "alerts.yaml",
        ROOT / "dashboards" / "slo.yaml",
    }
    # The same config as the container sees it, paths on this machine.
    token = tmp_path / "metrics_token"
    token.write_text("x" * 32)
    config["rule_files"] = [str(mounted[path]) for path in rule_files]
    for job in config["scrape_configs"]:
        assert job["authorization"]["credentials_file"] == "/run/secrets/metrics_token"
        job["authorization"]["credentials_file"] = str(token)
    here = tmp_path / "prometheus.yml"
    here.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [promtool(), "check", "config", str(here)], capture_output=True, text=True, timeout=60
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert said.count("SUCCESS") >= 3, said  # the config and both rule files


def test_compose_prometheus_renders_runbook_url_from_its_runbook_base(tmp_path: Path) -> None:
    """DataplaneQueueNotSampled is pending at the first evaluation of a Prometheus
    that scrapes nothing (``absent(dataplane_queue_depth)``), with its annotations
    rendered: ``runbook_url`` is compose's runbook_base and the alert's page."""
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.fail("prometheus is missing: `apt-get update && apt-get install -y prometheus`")
    config = yaml.safe_load(CONFIG.read_text())
    base = config["global"]["external_labels"]["runbook_base"]
    mounted = mounts()
    here = {
        "global": {**config["global"], "evaluation_interval": "1s"},
        "rule_files": [str(mounted[path]) for path in config["rule_files"]],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(here))
    port = free_port()
    process = subprocess.Popen(
        [
            prometheus,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp_path / "prometheus.log").open("w"),
    )
    try:
        deadline = time.monotonic() + 30
        urls: dict[str, str] = {}
        while time.monotonic() < deadline and "DataplaneQueueNotSampled" not in urls:
            time.sleep(0.2)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/alerts") as r:
                    alerts = json.load(r)["data"]["alerts"]
            except OSError:
                continue
            urls = {a["labels"]["alertname"]: a["annotations"]["runbook_url"] for a in alerts}
        log = (tmp_path / "prometheus.log").read_text()
        want = f"{base}/DataplaneQueueNotSampled.md"
        assert urls.get("DataplaneQueueNotSampled") == want, (urls, log[-2000:])
    finally:
        process.terminate()
        process.wait(timeout=30)
