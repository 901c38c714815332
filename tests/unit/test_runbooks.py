"""Every alert links its runbook, and the runbook is there (offline: files only).

Each alert of dashboards/alerts.yaml and dashboards/slo.yaml carries the annotation
``runbook_url: "{{ $externalLabels.runbook_base }}/<AlertName>.md"``; every Prometheus
config the repo ships sets ``runbook_base``; ``docs/runbooks/<AlertName>.md`` exists
with the four sections an on-call engineer reads, and the index links it. Deleting a
runbook, renaming an alert without its runbook, or a runbook for no alert fails here.
(``promtool test rules`` checks the rendered annotation: tests/unit/test_alert_rules.py.)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = [ROOT / "dashboards" / "alerts.yaml", ROOT / "dashboards" / "slo.yaml"]
RUNBOOKS = ROOT / "docs" / "runbooks"
PROMETHEUS_CONFIGS = [ROOT / "deploy" / "compose" / "prometheus.yml"]
SECTIONS = ("## What it means", "## First look", "## Usual causes", "## Fix")


def alerts() -> list[dict[str, Any]]:
    out = []
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            out += [rule for rule in group["rules"] if "alert" in rule]
    return out


def test_every_alert_has_a_runbook_url_of_the_one_form() -> None:
    found = alerts()
    assert len(found) >= 17, [a["alert"] for a in found]
    for rule in found:
        name = rule["alert"]
        url = rule["annotations"].get("runbook_url")
        assert url == "{{ $externalLabels.runbook_base }}/" + name + ".md", (name, url)


def test_every_runbook_exists_with_its_sections_and_no_runbook_is_orphaned() -> None:
    names = {rule["alert"] for rule in alerts()}
    for name in sorted(names):
        path = RUNBOOKS / f"{name}.md"
        assert path.is_file(), f"{name}: no runbook at {path.relative_to(ROOT)}"
        text = path.read_text()
        assert text.startswith(f"# {name}\n"), f"{path.name}: its title is not the alert's name"
        at = [text.find(f"\n{section}\n") for section in SECTIONS]
        assert all(i >= 0 for i in at), f"{path.name}: lacks one of {SECTIONS}"
        assert at == sorted(at), f"{path.name}: sections out of order {SECTIONS}"
        lines = len(text.splitlines())
        assert lines <= 70, f"{path.name}: {lines} lines; keep a runbook short"
    pages = {p.stem for p in RUNBOOKS.glob("*.md")} - {"README"}
    assert not pages - names, f"runbooks of no alert: {sorted(pages - names)}"
    index = (RUNBOOKS / "README.md").read_text()
    linked = set(re.findall(r"\]\((\w+)\.md\)", index))
    assert not names - linked, f"the index does not link {sorted(names - linked)}"
    assert not linked - names, f"the index links runbooks of no alert: {sorted(linked - names)}"


def test_every_shipped_prometheus_config_sets_runbook_base() -> None:
    for path in PROMETHEUS_CONFIGS:
        config = yaml.safe_load(path.read_text())
        base = config["global"]["external_labels"]["runbook_base"]
        assert re.fullmatch(r"https://\S+/docs/runbooks", base), (path, base)
    # No other Prometheus config with rules in the repo goes without it.
    shipped = {
        path
        for path in ROOT.glob("deploy/**/*.y*ml")
        if "rule_files" in path.read_text() and "scrape_configs" in path.read_text()
    }
    assert shipped <= set(PROMETHEUS_CONFIGS), sorted(map(str, shipped))
