"""The dashboard imports anywhere: grafana.com's data-source contract, checked on its JSON.

Grafana itself is not packaged for Debian or PyPI, so the JSON is validated against what an
import needs (as grafana.com dashboards do it): one `__inputs` entry of type datasource for
Prometheus, a `datasource` template variable of type datasource, and every data source
reference in panels, targets, variables and annotations going through that variable, never
a fixed uid. Any Prometheus data source, whatever its uid, then serves every panel. An import
is replayed as Grafana's importer does it (pkg/services/dashboardimport: each `${INPUT}` in any
string becomes the data source chosen for that input, `__inputs` is dropped) with a uid that
is neither the default data source's nor `prometheus`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import yaml

from tests.daemon.conftest import ROOT

DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "ktuned.json"
RULES = ROOT / "deploy" / "prometheus" / "ktuned-alerts.yml"


def _refs(node: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """Every `datasource` value in the JSON, with where it is."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield where, value
            yield from _refs(value, f"{where}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _refs(value, f"{where}[{i}]")


def test_every_data_source_goes_through_the_variable() -> None:
    dash = json.loads(DASHBOARD.read_text())
    [source] = dash["__inputs"]
    assert source["type"] == "datasource" and source["pluginId"] == "prometheus"
    assert any(r["type"] == "datasource" and r["id"] == "prometheus" for r in dash["__requires"])
    panel_types = {p["type"] for p in dash["panels"]}
    assert panel_types <= {r["id"] for r in dash["__requires"] if r["type"] == "panel"}
    variables = dash["templating"]["list"]
    assert variables[0]["name"] == "datasource" and variables[0]["type"] == "datasource"
    assert variables[0]["query"] == "prometheus"
    refs = list(_refs(dash))
    assert len(refs) > 2 * len(dash["panels"])  # panels and their targets, at least
    for where, ref in refs:
        if ref == {"type": "grafana", "uid": "-- Grafana --"}:  # Grafana's own annotations
            continue
        assert ref == {"type": "prometheus", "uid": "${datasource}"}, where
    for panel in dash["panels"]:
        assert panel["targets"], panel["title"]
        assert all("datasource" in t for t in panel["targets"]), panel["title"]
    for variable in variables[1:]:
        assert variable["datasource"]["uid"] == "${datasource}", variable["name"]
    # No fixed data source uid hides anywhere in the text (e.g. in a library panel).
    text = DASHBOARD.read_text()
    assert not re.search(r'"uid":\s*"(?!\$\{datasource\}|ktuned-overview|-- Grafana --)', text)


def _imported(dash: Any, inputs: dict[str, str]) -> Any:
    """``dash`` as Grafana's importer leaves it: every ``${NAME}`` of an input replaced."""
    names = {i["name"] for i in dash["__inputs"]}
    assert names <= set(inputs), f"the import form asks for {sorted(names)}"

    def evaluate(node: Any) -> Any:
        if isinstance(node, str):
            return re.sub(
                r"\$\{(.+?)\}", lambda m: inputs.get(m[1], m[0]) if m[1] in names else m[0], node
            )
        if isinstance(node, list):
            return [evaluate(v) for v in node]
        if isinstance(node, dict):
            return {k: evaluate(v) for k, v in node.items() if k != "__inputs"}
        return node

    return evaluate(dash)


def test_an_import_uses_the_data_source_chosen_for_it() -> None:
    dash = json.loads(DASHBOARD.read_text())
    chosen = "ops-prom-7"  # neither `prometheus` nor the default data source
    imported = _imported(dash, {"DS_PROMETHEUS": chosen})
    assert "DS_PROMETHEUS" not in json.dumps(imported)
    [variable] = [v for v in imported["templating"]["list"] if v["type"] == "datasource"]
    # The variable starts on the chosen data source (not on Grafana's default one) ...
    assert variable["current"]["value"] == chosen, variable
    # ... and every query of the dashboard goes through it.
    resolved = {
        json.dumps(ref).replace("${" + variable["name"] + "}", variable["current"]["value"])
        for _, ref in _refs(imported)
        if ref != {"type": "grafana", "uid": "-- Grafana --"}
    }
    assert resolved == {json.dumps({"type": "prometheus", "uid": chosen})}


def test_new_bests_are_annotated_and_recording_rules_are_used() -> None:
    dash = json.loads(DASHBOARD.read_text())
    notes = [a for a in dash["annotations"]["list"] if a.get("name") == "New best"]
    assert notes and notes[0]["enable"]
    assert "ktuned_kernel_last_improvement_timestamp_seconds" in notes[0]["expr"]
    assert "{{kernel}}" in notes[0]["textFormat"]
    recorded = {
        r["record"]
        for g in yaml.safe_load(RULES.read_text())["groups"]
        for r in g["rules"]
        if "record" in r
    }
    exprs = " ".join(t["expr"] for p in dash["panels"] for t in p["targets"])
    assert recorded == {name for name in recorded if name in exprs}, "unused recording rules"
    assert "exp(avg(ln(" not in exprs  # the geometric mean comes from its recording rule
