"""compose.yaml's observability profile, offline: the collector, Jaeger and Grafana are
registry images that cannot be pulled here, so nothing runs; what their configs say is
checked instead. (otel-collector.yaml's own structure is tests/unit/test_collector_config.py;
the panels' data sources are tests/integration/test_dashboards.py.)

* ``podman-compose config`` renders the three services with the profile and none of
  them without it (a plain ``up`` pulls nothing);
* the collector reads the repo's otel-collector.yaml where its command says, every
  ``${env:X}`` without a default is set, and traces go to the Jaeger service's OTLP port;
* Grafana mounts the provisioning where Grafana reads it and the dashboards where the
  provider points; every ``${VAR}`` of the data sources is set by the service or by the
  env file init-secrets writes; both provisioning files are ``apiVersion: 1``;
* every data source a dashboard names anywhere (panels, targets, template variables,
  the Explore links' panes and queries) is provisioned, with the same type.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

from tests.fleet.test_compose import CONF, compose, secrets

ROOT = Path(__file__).resolve().parents[2]
PROVISIONING = ROOT / "dashboards" / "provisioning"
DATASOURCES = PROVISIONING / "datasources" / "datasources.yaml"
PROVIDERS = PROVISIONING / "dashboards" / "dashboards.yaml"
DASHBOARDS = sorted((ROOT / "dashboards" / "json").glob("*.json"))
PROFILED = {"collector", "jaeger", "grafana"}
ENV_REF = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}")


def services() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]


def bind_mounts(service: dict[str, Any]) -> dict[str, str]:
    """Container path -> repo path (``./...``) of a service's bind mounts."""
    out = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("./"):
            out[target] = source[2:]
    return out


def test_the_profile_holds_the_three_services_and_only_it_does(tmp_path: Path) -> None:
    declared = {name for name, s in services().items() if "observability" in s.get("profiles", [])}
    assert declared == PROFILED
    env = {**os.environ, "CONTAINERS_CONF": str(CONF), "DATAPLANE_SECRETS": str(secrets(tmp_path))}
    plain = yaml.safe_load(compose(env, "config", timeout=60).stdout)["services"]
    assert not PROFILED & set(plain), sorted(PROFILED & set(plain))
    profiled = compose(env, "--profile", "observability", "config", timeout=60).stdout
    rendered = yaml.safe_load(profiled)["services"]
    assert PROFILED <= set(rendered) and set(plain) <= set(rendered)
    # Grafana's env file is init-secrets' and holds the wallboard's login.
    assert rendered["grafana"]["env_file"] == [str(tmp_path / "grafana.env")]
    grafana_env = dict(
        line.split("=", 1) for line in (tmp_path / "grafana.env").read_text().splitlines()
    )
    assert grafana_env["QUEUE_DB_USER"] == "grafana_login"
    assert (
        grafana_env["QUEUE_DB_PASSWORD"] == (tmp_path / "grafana_db_password").read_text().strip()
    )
    assert grafana_env["QUEUE_DB_PASSWORD"] not in profiled


def test_the_collector_runs_the_repo_config_and_sends_traces_to_jaeger() -> None:
    found = services()
    collector, jaeger = found["collector"], found["jaeger"]
    config_arg = next(a for a in collector["command"] if a.startswith("--config="))
    assert bind_mounts(collector)[config_arg.split("=", 1)[1]] == "otel-collector.yaml"
    text = re.sub(r"(^|\s)#.*$", "", (ROOT / "otel-collector.yaml").read_text(), flags=re.M)
    required = {m.group(1) for m in ENV_REF.finditer(text) if m.group(2) is None}
    assert required <= set(collector["environment"]), sorted(
        required - set(collector["environment"])
    )
    assert collector["environment"]["TRACES_OTLP_ENDPOINT"] == "jaeger:4317"  # OTLP/gRPC
    assert collector["environment"]["TRACES_OTLP_INSECURE"] == "true"
    assert jaeger["environment"]["COLLECTOR_OTLP_ENABLED"] == "true"
    assert "jaeger" in collector["depends_on"]
    # The plane's processes send traces there only when told (empty: no exporter).
    config = yaml.safe_load(text)
    http = config["receivers"]["otlp"]["protocols"]["http"]["endpoint"]
    assert http.endswith(":-0.0.0.0:4318}")
    for name in ("bff1", "worker-users", "capcom"):
        value = found[name]["environment"]["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
        assert value == "${OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:-}", name


def test_grafana_mounts_the_provisioning_and_sets_every_variable_it_expands(
    tmp_path: Path,
) -> None:
    grafana = services()["grafana"]
    mounts = bind_mounts(grafana)
    assert mounts["/etc/grafana/provisioning/datasources"] == "dashboards/provisioning/datasources"
    assert mounts["/etc/grafana/provisioning/dashboards"] == "dashboards/provisioning/dashboards"
    for path in (DATASOURCES, PROVIDERS):
        assert yaml.safe_load(path.read_text())["apiVersion"] == 1, path.name
    (provider,) = yaml.safe_load(PROVIDERS.read_text())["providers"]
    assert mounts[provider["options"]["path"]] == "dashboards/json"
    text = re.sub(r"(^|\s)#.*$", "", DATASOURCES.read_text(), flags=re.M)  # not comments
    variables = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)\}", text))
    written = (secrets(tmp_path) / "grafana.env").read_text()  # what init-secrets writes
    written_names = {line.split("=", 1)[0] for line in written.splitlines()}
    unset = variables - set(grafana["environment"]) - written_names
    assert not unset, f"data source variables compose does not set: {sorted(unset)}"
    assert grafana["environment"]["PROMETHEUS_URL"] == "http://prometheus:9090"
    assert grafana["environment"]["JAEGER_URL"] == "http://jaeger:16686"
    assert grafana["environment"]["QUEUE_DB_HOST"] == "postgres:5432"


def _datasource_refs(node: Any) -> list[Any]:
    """Every value of a ``datasource`` key, at any depth, and those of the Explore links'
    panes (a link's ``panes`` parameter is JSON, URL-encoded)."""
    refs: list[Any] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                refs.append(value)
            if key == "url" and isinstance(value, str) and "panes=" in value:
                for pane in json.loads(
                    unquote(parse_qs(urlsplit(value).query)["panes"][0])
                ).values():
                    refs += _datasource_refs({"datasource": pane["datasource"]})
                    refs += _datasource_refs(pane["queries"])
            refs += _datasource_refs(value)
    elif isinstance(node, list):
        for item in node:
            refs += _datasource_refs(item)
    return refs


def test_every_data_source_a_dashboard_names_is_provisioned() -> None:
    provisioned = {
        ds["uid"]: ds["type"] for ds in yaml.safe_load(DATASOURCES.read_text())["datasources"]
    }
    assert DASHBOARDS
    for path in DASHBOARDS:
        refs = _datasource_refs(json.loads(path.read_text()))
        assert refs, path.name
        for ref in refs:
            uid = ref if isinstance(ref, str) else ref["uid"]
            assert uid in provisioned, f"{path.name}: data source {uid!r} is not provisioned"
            if isinstance(ref, dict) and "type" in ref:
                assert ref["type"] == provisioned[uid], (path.name, ref)
