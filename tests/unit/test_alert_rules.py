"""Every rule of dashboards/alerts.yaml and dashboards/slo.yaml is unit-tested by
``promtool test rules`` (dashboards/tests/*.yaml: series in, alerts out): every alert
has a case where it is silent, a case where it fires, and a later case where it has
resolved; every recording rule is evaluated by a ``promql_expr_test``.

Deleting a rule fails promtool (its test expects an alert no rule makes) and the
coverage check below; breaking an expression fails promtool's own result.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = [ROOT / "dashboards" / "alerts.yaml", ROOT / "dashboards" / "slo.yaml"]
RULE_TESTS = sorted((ROOT / "dashboards" / "tests").glob("*.yaml"))
INSTALL = "apt-get update && apt-get install -y prometheus"


def promtool() -> str:
    path = shutil.which("promtool") or "/usr/bin/promtool"
    if not Path(path).exists():
        pytest.fail(f"promtool is missing: `{INSTALL}`")
    return path


def rules() -> list[dict[str, Any]]:
    out = []
    for path in RULE_FILES:
        out += [
            rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]
        ]
    return out


def alert_names() -> set[str]:
    return {rule["alert"] for rule in rules() if "alert" in rule}


def expr_cases() -> list[str]:
    exprs = []
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            exprs += [case["expr"] for case in test.get("promql_expr_test", [])]
    return exprs


def alert_cases() -> list[dict[str, Any]]:
    cases = []
    for path in RULE_TESTS:
        for test in yaml.safe_load(path.read_text())["tests"]:
            cases += test.get("alert_rule_test", [])
    return cases


def duration(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]]


def test_promtool_checks_and_passes_every_rule_test() -> None:
    checked = subprocess.run(
        [promtool(), "check", "rules", *map(str, RULE_FILES)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert RULE_TESTS, "no promtool rule tests under dashboards/tests"
    done = subprocess.run(
        [promtool(), "test", "rules", *map(str, RULE_TESTS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT / "dashboards" / "tests",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout + done.stderr


def test_every_alert_is_silent_then_fires_then_resolves() -> None:
    by_alert: dict[str, list[tuple[float, bool]]] = {}
    for case in alert_cases():
        fired = bool(case.get("exp_alerts"))
        by_alert.setdefault(case["alertname"], []).append((duration(case["eval_time"]), fired))
    missing = sorted(alert_names() - set(by_alert))
    assert not missing, f"alerts without a promtool test: {missing}"
    unknown = sorted(set(by_alert) - alert_names())
    assert not unknown, f"promtool tests of alerts that do not exist: {unknown}"
    for name, seen in by_alert.items():
        fires = [t for t, fired in seen if fired]
        assert fires, f"{name}: no case where it fires"
        assert any(t < min(fires) and not f for t, f in seen), f"{name}: never silent before"
        assert any(t > max(fires) and not f for t, f in seen), f"{name}: never resolves"


def test_every_recording_rule_is_evaluated_by_a_test() -> None:
    records = {rule["record"] for rule in rules() if "record" in rule}
    assert records, "no recording rules"
    exprs = expr_cases()
    untested = sorted(r for r in records if not any(r in e for e in exprs))
    assert not untested, f"recording rules no promql_expr_test evaluates: {untested}"
