"""compose.yaml's Prometheus loads the plane's rules (offline: no container runs).

The rule files deploy/compose/prometheus.yml names are the ones compose.yaml mounts
from dashboards/; the config, with those paths and the metrics token pointed at the
files they mount, passes ``promtool check config`` (which loads and checks every rule).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

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
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: `apt-get update && apt-get install -y prometheus`")
    done = subprocess.run(
        [promtool, "check", "config", str(here)], capture_output=True, text=True, timeout=60
    )
    said = done.stdout + done.stderr
    assert done.returncode == 0, said
    assert said.count("SUCCESS") >= 3, said  # the config and both rule files
