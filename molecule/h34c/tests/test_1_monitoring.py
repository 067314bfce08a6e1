"""Monitoring against the lab's real Prometheus (node1, group monitoring): every target scraped at its mesh address,
llama-server's token counters after a completion, a stopped worker down and its alert firing, every dashboard panel
with data, a shard corrupted so that only verify: full finds it shown in its metric, and node exporter's port refused
from any host but Prometheus'."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

from clusterlib import API_KEY, api, greedy, model_dir, playbook, supervisor, wait_serving
from labtest import EVENTUALLY, INVENTORY, address, inventory_hosts, lab, wait_for

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "roles/monitoring/files/grafana/llamarpc-cluster.json"
PROMETHEUS_PORT = 9090
EXPORTER_PORT = 9100
WORKER = "llamarpc-rpc-worker.service"


def prometheus(path, **params):
    """The JSON of a GET to node1's Prometheus API (a lab host: allowed)."""
    url = f"http://{address('node1')}:{PROMETHEUS_PORT}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - http to a lab host
        return json.loads(response.read().decode())


def query(expr):
    """The instant vector (or scalar) ``expr`` gives now: [(labels, value)]."""
    data = prometheus("/api/v1/query", query=expr)["data"]
    if data["resultType"] == "scalar":
        return [({}, float(data["result"][1]))]
    return [(item["metric"], float(item["value"][1])) for item in data["result"]]


def firing(alert):
    """The labels of each firing instance of ``alert``."""
    alerts = prometheus("/api/v1/alerts")["data"]["alerts"]
    return [item["labels"] for item in alerts if item["labels"].get("alertname") == alert and item["state"] == "firing"]


def tcp(source, target, port):
    """'connected', 'refused' or what bash said, for a TCP connect from lab host ``source`` to ``target``:``port``."""
    done = lab(source).run(f"timeout 5 bash -c 'exec 3<>/dev/tcp/{address(target)}/{port}'")
    if done.rc == 0:
        return "connected"
    return "refused" if "refused" in done.stderr.lower() else done.stderr.strip() or f"rc {done.rc}"


def test_prometheus_scrapes_every_host_and_llama_server_on_the_mesh_addresses():
    def targets():
        active = prometheus("/api/v1/targets")["data"]["activeTargets"]
        return {(item["labels"]["job"], item["labels"]["host"]): item["health"] for item in active}

    hosts = sorted(inventory_hosts())
    want = {("node", host): "up" for host in hosts} | {("llama_server", "node1"): "up"}
    assert wait_for(lambda: targets() == want, interval=2), targets()
    node1 = lab("node1")
    listening = node1.check_output("ss -Hltn")
    assert f"{address('node1')}:{PROMETHEUS_PORT} " in listening and f"{address('node1')}:{EXPORTER_PORT} " in listening
    assert f"0.0.0.0:{PROMETHEUS_PORT} " not in listening and f"*:{EXPORTER_PORT} " not in listening, listening
    for unit in ("prometheus.service", "prometheus-node-exporter.service"):  # Debian's: every address
        assert node1.run(f"systemctl is-active {unit}").stdout.strip() != "active", unit
    # The coordinator's SSHFS mounts are watched (Debian's node exporter leaves /mnt out by default).
    sshfs = 'node_filesystem_device_error{host="node1", fstype="fuse.sshfs"}'
    assert query(sshfs + " == 0"), query("node_filesystem_device_error")
    key_file = node1.file("/etc/llamarpc/prometheus/llama-server.token")
    assert (key_file.user, key_file.mode) == ("prometheus", 0o400)
    assert API_KEY not in node1.check_output("cat /etc/llamarpc/prometheus/prometheus.yml")
    # What Prometheus and node exporter cost on node1, for the role's README (printed with pytest -s).
    for unit in ("llamarpc-prometheus.service", "llamarpc-node-exporter.service"):
        pid = node1.check_output(f"systemctl show -p MainPID --value {unit}")
        rss = node1.check_output(f"awk '/^VmRSS/ {{print $2}}' /proc/{pid}/status")
        ticks = node1.check_output(f"awk '{{print $14 + $15, $22}}' /proc/{pid}/stat").split()
        uptime = float(node1.check_output("cut -d' ' -f1 /proc/uptime"))
        hertz = 100
        age = uptime - int(ticks[1]) / hertz
        print(f"\n{unit}: RSS {int(rss) / 1024:.1f} MiB, CPU {int(ticks[0]) / hertz:.1f} s in {age:.0f} s "
              f"({100 * int(ticks[0]) / hertz / age:.2f}% of a core)")  # fmt: skip


def test_llama_servers_token_counters_increase_after_a_completion():
    def predicted():
        found = query('sum(llamacpp:tokens_predicted_total{job="llama_server"})')
        return found[0][1] if found else None

    assert wait_for(lambda: predicted() is not None, interval=2), "llama-server's /metrics not scraped"
    before, prompt_before = predicted(), query("sum(llamacpp:prompt_tokens_total)")[0][1]
    status, body = api("/completion", greedy("Monitoring counts tokens:", 8))
    assert status == 200 and body["tokens_predicted"] == 8, body
    assert wait_for(lambda: predicted() >= before + 8, interval=2), (before, predicted())
    assert query("sum(llamacpp:prompt_tokens_total)")[0][1] > prompt_before


def test_a_stopped_worker_shows_down_and_its_alert_fires():
    """node5 stopped: llamarpc_worker_up{worker="node5"} 0 and WorkerDown firing (the scenario's for: is short); then
    started again, up and no alert. What the supervisor does meanwhile is test_2_heal's to test."""
    node5 = lab("node5")
    node5.run_expect([0], f"systemctl stop {WORKER}")
    try:
        assert wait_for(lambda: query('llamarpc_worker_up{worker="node5"} == 0'), interval=2), query(
            "llamarpc_worker_up"
        )
        fired = wait_for(lambda: [a for a in firing("WorkerDown") if a.get("worker") == "node5"], interval=2)
        assert fired and fired[0]["host"] == "node1", prometheus("/api/v1/alerts")
        assert query('llamarpc_worker_down_since_timestamp_seconds{worker="node5"}')
    finally:
        node5.run_expect([0], f"systemctl start {WORKER}")
    assert wait_for(lambda: query('llamarpc_worker_up{worker="node5"} == 1'), interval=2), supervisor()
    assert wait_for(lambda: not [a for a in firing("WorkerDown") if a.get("worker") == "node5"], interval=2)
    assert wait_serving(EVENTUALLY) is not None
    # The supervisor restarted llama-server under its own eyes (a re-plan and its restore, or a reconnect when node5
    # came back first): it measured that load.
    assert wait_for(lambda: query("llamarpc_server_load_seconds"), interval=2), supervisor()


def test_each_workers_seeding_and_the_last_loads_kind_are_in_prometheus():
    """The converge seeded every planned worker's tensor cache before the first load: each worker's seeding is in its
    textfile (bytes and files by source, tensors by state, when), as the coordinator's seeded.json has it. The tiny
    model has no tensor over 10 MiB: nothing to seed, so the seeding is no reason for a fast load and the loads the
    supervisor measured (the first, and those around node5's stop) are cold."""
    seeded = json.loads(lab("node1").check_output("cat /etc/llamarpc/coordinator/seeded.json"))
    assert sorted(seeded["workers"]) == sorted(inventory_hosts()), seeded  # strategy all: every host a worker
    for host, summary in sorted(seeded["workers"].items()):
        selector = f'{{host="{host}"}}'
        sources = wait_for(lambda s=selector: query(f"llamarpc_tensor_cache_seeded_bytes{s}"), interval=2)
        assert sorted(labels["source"] for labels, _value in sources) == ["local", "peer", "url"], sources
        assert sum(value for _labels, value in sources) == summary["bytes_written"], (host, sources, summary)
        states = {labels["state"]: value for labels, value in query(f"llamarpc_tensor_cache_seed_tensors{selector}")}
        assert (states["present"], states["unavailable"]) == (summary["present"], summary["unavailable"]), states
        when = query(f"llamarpc_tensor_cache_seed_timestamp_seconds{selector}")
        assert when and abs(when[0][1] - summary["finished_at"]) < 0.01, (when, summary)
    cached = sum(summary["written"] + summary["present"] for summary in seeded["workers"].values())
    assert cached == 0, seeded  # the scenario's tiny model; a bigger one would make the first load seeded
    kinds = wait_for(lambda: query("llamarpc_server_load_info == 1"), interval=2)
    assert [labels["kind"] for labels, _value in kinds] == ["cold"], (kinds, supervisor())
    assert query("llamarpc_server_load_seconds"), supervisor()


def test_every_dashboard_panel_has_data():
    """Each panel's queries, sent to the real Prometheus: a query that returns nothing fails (rate() needs two
    samples in its window, so the first minutes may pass before each has data)."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    queries = [(panel["title"], target["expr"]) for panel in panels for target in panel["targets"]]
    assert len(queries) >= 15
    wait_for(lambda: all(query(expr) for _title, expr in queries), interval=5)
    empty = [(title, expr) for title, expr in queries if not query(expr)]
    assert not empty, f"panels without data: {empty}"


def test_a_shard_corrupted_where_only_verify_full_looks_shows_in_its_metric():
    """Bytes of a shard on a host overwritten with its size and mtime kept: a quick verification passes it, verify:
    full finds it, repairs it, and llamarpc_shard_verify_ok says 0 (ShardCorrupt fires)."""
    placed = {}
    for name in sorted(inventory_hosts()):
        found = query(f'llamarpc_shard_verify_ok{{host="{name}"}}')
        if found:
            placed = {"host": name, "shard": found[0][0]["shard"]}
            break
    assert placed, query("llamarpc_shard_verify_ok")
    host = lab(placed["host"])
    path = f"{model_dir()}/{placed['shard']}"
    assert host.file(path).is_file and not host.file(path).is_symlink, path
    host.run_expect(
        [0],
        f"touch -r {path} /tmp/stamp && chmod 0644 {path} && printf 'flipped' | dd of={path} bs=1 seek=8192 "
        f"conv=notrunc status=none && chmod 0444 {path} && touch -r /tmp/stamp {path}",
    )
    selector = f'llamarpc_shard_verify_ok{{host="{placed["host"]}", shard="{placed["shard"]}"}}'
    start = time.monotonic()
    result = playbook(INVENTORY, "--tags", "llama_model", "-e", "llama_model_verify=full")
    print(f"\nsite.yml --tags llama_model with verify full: {time.monotonic() - start:.0f} s")
    assert result.returncode == 0, result.stdout[-3000:]
    assert wait_for(lambda: query(selector + " == 0"), interval=2), query(selector)
    assert wait_for(lambda: [a for a in firing("ShardCorrupt") if a.get("shard") == placed["shard"]], interval=2)
    assert query(f'llamarpc_shard_corrupt_found_total{{shard="{placed["shard"]}"}}')[0][1] >= 1
    # Repaired: the next full verification records 1 (test_gguf_shard_place shows it; one playbook run is enough here).
    assert host.file(path).mode == 0o444


def test_node_exporter_refuses_every_host_but_prometheus():
    assert tcp("node1", "node3", EXPORTER_PORT) == "connected"  # node1 runs Prometheus
    assert tcp("node2", "node3", EXPORTER_PORT) == "refused"
    assert tcp("node4", "node1", EXPORTER_PORT) == "refused"
    # Without its table node3's exporter would answer node2: the refusal is the firewall's (then put back).
    node3 = lab("node3")
    node3.run_expect([0], "nft delete table inet llamarpc_node_exporter")
    try:
        assert tcp("node2", "node3", EXPORTER_PORT) == "connected"
    finally:
        # The unit's own ExecReload, without systemd (a reload right after another unit's start can fail with
        # 219/CGROUP on a loaded lab host).
        node3.run_expect([0], "nft --file /etc/llamarpc/node-exporter.nft")
    assert tcp("node2", "node3", EXPORTER_PORT) == "refused"
