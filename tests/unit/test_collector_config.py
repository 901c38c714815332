"""``otel-collector.yaml``: every component a pipeline names is defined, every
defined one is used, and every ``${env:X}`` is documented for the SRE."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "otel-collector.yaml"
README = ROOT / "dashboards" / "README.md"
KINDS = ("receivers", "processors", "exporters", "connectors")
ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    loaded = yaml.safe_load(CONFIG.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _pipelines(config: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    pipelines = config["service"]["pipelines"]
    assert isinstance(pipelines, dict) and pipelines
    return pipelines


def test_every_component_a_pipeline_names_is_defined(config: dict[str, Any]) -> None:
    for name, pipeline in _pipelines(config).items():
        assert set(pipeline) <= {"receivers", "processors", "exporters"}, name
        assert pipeline.get("receivers") and pipeline.get("exporters"), name
        for kind, ids in pipeline.items():
            defined = config.get(kind) or {}
            for component in ids:
                assert component in defined, f"pipeline {name}: {kind} {component} is not defined"
    for extension in config["service"].get("extensions", []):
        assert extension in (config.get("extensions") or {}), f"extension {extension} undefined"


def test_every_defined_component_is_used(config: dict[str, Any]) -> None:
    used: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for pipeline in _pipelines(config).values():
        for kind, ids in pipeline.items():
            used[kind] |= set(ids)
    for kind in KINDS:
        unused = set(config.get(kind) or {}) - used[kind]
        assert not unused, f"{kind} defined but in no pipeline: {sorted(unused)}"
    unused_ext = set(config.get("extensions") or {}) - set(config["service"].get("extensions", []))
    assert not unused_ext, f"extensions defined but not enabled: {sorted(unused_ext)}"


def test_the_pipelines_are_the_ones_the_design_asks_for(config: dict[str, Any]) -> None:
    pipelines = _pipelines(config)
    assert set(pipelines) >= {"traces", "metrics"}
    assert config["receivers"]["otlp"]["protocols"].keys() >= {"grpc", "http"}
    for name, pipeline in pipelines.items():
        processors = pipeline.get("processors", [])
        # memory_limiter first (refuse before it is too late), batch in every pipeline.
        assert processors and processors[0] == "memory_limiter", name
        assert "batch" in processors, name
        assert pipeline["receivers"] == ["otlp"], name
    assert all(e.split("/")[0] == "otlp" for e in pipelines["traces"]["exporters"])
    assert pipelines["metrics"]["exporters"] in (["prometheus"], ["prometheusremotewrite"])
    traces_endpoint = config["exporters"][pipelines["traces"]["exporters"][0]]["endpoint"]
    assert traces_endpoint == "${env:TRACES_OTLP_ENDPOINT}"
    assert config["exporters"]["prometheus"]["endpoint"] == "${env:PROMETHEUS_EXPORTER_ENDPOINT}"


def test_every_environment_variable_is_documented() -> None:
    text = re.sub(r"(^|\s)#.*$", "", CONFIG.read_text(), flags=re.MULTILINE)  # not comments
    names = {m.group(1) for m in ENV_REF.finditer(text)}
    assert {"TRACES_OTLP_ENDPOINT", "PROMETHEUS_EXPORTER_ENDPOINT"} <= names
    readme = README.read_text()
    undocumented = sorted(n for n in names if f"`{n}`" not in readme)
    assert not undocumented, f"not described in dashboards/README.md: {undocumented}"
    # No bare $VAR or ${VAR}: the collector's syntax is ${env:VAR}.
    assert not re.search(r"\$\{(?!env:)", text) and not re.search(r"\$[A-Za-z_]", text)
