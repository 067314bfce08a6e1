"""The monitoring role's alert rules under promtool test rules (every alert fires in its test, and a broken
expression fails it), and the generated prometheus.yml under promtool check config."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

from ansible_collections.llamarpc.cluster.plugins.filter.monitoring import prometheus_config

ROLE = Path(__file__).resolve().parents[3] / "roles/monitoring"
TESTS = Path(__file__).resolve().parent / "monitoring" / "rules_test.yml"
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None and not os.environ.get("CI"),
    reason="promtool not installed (tools/setup.sh installs Debian's prometheus for it)",
)


def render_rules(**overrides):
    """The rule file as the role writes it, with its defaults (the template module: Jinja2, trim_blocks)."""
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined, autoescape=False)  # noqa: S701
    env.filters["comment"] = lambda text: "#\n# " + text + "\n#"
    values = {**DEFAULTS, "ansible_managed": "Ansible managed", **overrides}
    values.setdefault("_monitoring_alert_for", values["monitoring_alert_for"])
    return env.from_string((ROLE / "templates/llamarpc.rules.yml.j2").read_text()).render(values)


def promtool(*args, cwd=None):
    done = subprocess.run(["promtool", *args], capture_output=True, text=True, check=False, cwd=cwd)
    return done.returncode, done.stdout + done.stderr


def run_rule_tests(tmp_path, rules_text):
    (tmp_path / "llamarpc.rules.yml").write_text(rules_text)
    shutil.copy(TESTS, tmp_path / "rules_test.yml")
    return promtool("test", "rules", "rules_test.yml", cwd=tmp_path)


def alerts(rules_text):
    return [rule for group in yaml.safe_load(rules_text)["groups"] for rule in group["rules"]]


def test_the_rules_pass_promtools_checks_and_tests(tmp_path):
    rules = render_rules()
    (tmp_path / "r.yml").write_text(rules)
    assert promtool("check", "rules", str(tmp_path / "r.yml"))[0] == 0
    rc, out = run_rule_tests(tmp_path, rules)
    assert rc == 0, out


def test_every_alert_fires_in_a_test_case():
    """A rule that never fires would pass a test that only expects silence: each alert needs a firing case."""
    firing = {
        case["alertname"]
        for test in yaml.safe_load(TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    names = [rule["alert"] for rule in alerts(render_rules())]
    assert names == ["WorkerDown", "NotServing", "ShardCorrupt", "SshfsHung", "TensorCacheOverCap",
                     "ModelDiskAlmostFull", "MemoryHeadroomLow"]  # fmt: skip
    assert set(names) <= firing, sorted(set(names) - firing)


@pytest.mark.parametrize("name", [rule["alert"] for rule in alerts(render_rules())])
def test_a_broken_expression_fails_its_test(tmp_path, name):
    """Each rule's expression replaced by one that never fires (the metric's name misspelt): promtool's tests fail."""
    rules = yaml.safe_load(render_rules())
    for rule in rules["groups"][0]["rules"]:
        if rule["alert"] == name:
            rule["expr"] = re.sub(r"\b(llamarpc_|node_|up\b)", r"broken_\1", rule["expr"])
    rc, out = run_rule_tests(tmp_path, yaml.safe_dump(rules))
    assert rc != 0 and name in out, out


def test_the_inventorys_for_durations_reach_the_rules():
    short = {**DEFAULTS["monitoring_alert_for"], "WorkerDown": "15s"}
    found = {rule["alert"]: rule["for"] for rule in alerts(render_rules(_monitoring_alert_for=short))}
    assert found["WorkerDown"] == "15s" and found["NotServing"] == "2m"


HOSTVARS = {
    "node1": {"llamarpc_mesh_address": "10.0.0.1"},
    "node2": {"llamarpc_mesh_address": "10.0.0.2"},
    "node3": {"ansible_host": "192.168.1.3"},
}


def test_the_generated_configuration_passes_promtool_check_config(tmp_path):
    rules, token = tmp_path / "llamarpc.rules.yml", tmp_path / "llama-server.token"
    rules.write_text(render_rules())
    token.write_text("secret")
    config = prometheus_config(
        ["node1", "node2", "node3"],
        HOSTVARS,
        llama_server={"host": "node1", "port": 8080, "token_file": str(token)},
        rule_files=[str(rules)],
        alertmanagers=["10.0.0.9:9093"],
    )
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config, sort_keys=False))
    rc, out = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert rc == 0, out
    node, server = config["scrape_configs"]
    assert [item["targets"] for item in node["static_configs"]] == [
        ["10.0.0.1:9100"],
        ["10.0.0.2:9100"],
        ["192.168.1.3:9100"],
    ]
    assert [item["labels"]["host"] for item in node["static_configs"]] == ["node1", "node2", "node3"]
    assert server["authorization"] == {"type": "Bearer", "credentials_file": str(token)}
    assert "secret" not in yaml.safe_dump(config)
    # promtool reads the files it names: a rule file that is not there fails the check.
    rules.unlink()
    assert promtool("check", "config", str(tmp_path / "prometheus.yml"))[0] != 0


def test_a_cluster_without_api_key_or_coordinator_gets_no_authorization_or_server_job():
    bare = prometheus_config(["node1"], HOSTVARS, llama_server={"host": "node1", "port": 8080, "token_file": ""})
    assert "authorization" not in bare["scrape_configs"][1]
    assert [job["job_name"] for job in prometheus_config(["node1"], HOSTVARS)["scrape_configs"]] == ["node"]


DASHBOARD = ROLE / "files/grafana/llamarpc-cluster.json"


def test_every_dashboard_query_parses_and_names_known_metrics(tmp_path):
    """Each panel's PromQL as a recording rule under promtool check rules (a query that does not parse fails), and
    each llamarpc_* metric it names is one docs/monitoring.md lists (a renamed metric leaves no panel behind)."""
    import json  # noqa: PLC0415 - this test only

    panels = json.loads(DASHBOARD.read_text())["panels"]
    exprs = [target["expr"] for panel in panels for target in panel["targets"]]
    rules = {
        "groups": [{"name": "dashboard", "rules": [{"record": f"panel:q{i}", "expr": e} for i, e in enumerate(exprs)]}]
    }
    (tmp_path / "dashboard.yml").write_text(yaml.safe_dump(rules))
    rc, out = promtool("check", "rules", str(tmp_path / "dashboard.yml"))
    assert rc == 0, out
    documented = set(re.findall(r"`(llamarpc_[a-z_]+)`", (ROLE.parents[1] / "docs/monitoring.md").read_text()))
    used = set(re.findall(r"\bllamarpc_[a-z_]+", " ".join(exprs)))
    assert used and used <= documented, sorted(used - documented)
    titles = " ".join(panel["title"] for panel in panels).lower()
    for topic in ("serving", "prompt", "generation", "requests", "worker", "memory", "load", "cache", "disk"):
        assert topic in titles, topic


def test_every_metric_the_collection_writes_is_in_the_metrics_table():
    root = ROLE.parents[1]
    writers = [
        root / "roles/llama_coordinator/files/llamarpc_supervisor.py",
        root / "roles/llama_rpc_worker/files/llamarpc_cache_prune.py",
        root / "plugins/module_utils/metrics/_shard_metrics.py",
        root / "plugins/module_utils/metrics/_seed_metrics.py",
    ]
    written = {name for path in writers for name in re.findall(r'"(llamarpc_[a-z_]+)"', path.read_text())}
    table = (root / "docs/monitoring.md").read_text()
    documented = set(re.findall(r"^\| `(llamarpc_[a-z_]+)` \|", table, flags=re.MULTILINE))
    assert len(written) >= 20 and written == documented, (sorted(written - documented), sorted(documented - written))
