#!/usr/bin/env python
"""Benchmark of the trainops.gpu.runpod inventory over many pods (emulator, memory backend).

Not a test: it prints figures. For N pods (default 1,000) it measures, in one run:

* API calls the inventory makes without a cache and from a warm cache (from the emulator's request log);
* parse time (InventoryManager over the *.runpod.yml source, in-process, median of repeats) uncached and cached;
* a baseline measured in the same run: a static YAML inventory with the same hosts and variables, so the
  ratios say what the plugin costs over reading the same inventory from a file.

Usage: .venv/bin/python benchmarks/inventory_bench.py [--pods 1000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("ANSIBLE_COLLECTIONS_PATH", str(ROOT / "collections"))
os.environ.setdefault("ANSIBLE_CONFIG", str(ROOT / "ansible.cfg"))

from ansible.plugins.loader import init_plugin_loader  # noqa: E402

# What the ansible CLIs do first: make collections (trainops.gpu among them) importable.
init_plugin_loader([os.environ["ANSIBLE_COLLECTIONS_PATH"]])

import yaml  # noqa: E402
from ansible.inventory.manager import InventoryManager  # noqa: E402
from ansible.parsing.dataloader import DataLoader  # noqa: E402
from ansible_collections.trainops.gpu.plugins.module_utils._runpod import RunPodClient  # noqa: E402
from runpod_emulator.testing import EmulatorProcess  # noqa: E402

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBenchmarkKeyBenchmarkKeyBenchmarkKey0001 bench@local"
DATA_CENTERS = ("EU-RO-1", "EU-SE-1")


def create_pods(emulator: EmulatorProcess, count: int) -> None:
    def create(index: int) -> None:
        body = {
            "name": f"trainops-run{index % 50:02d}-worker{index:04d}",
            "image": "localhost/trainops-pod",
            "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
            "dataCenterIds": [DATA_CENTERS[index % 2]],
            "ports": ["22/tcp"],
            "startSsh": True,
        }
        status, _headers, answer = emulator.api("POST", "/v2/pods", body)
        if status != 201:
            raise RuntimeError(f"create {index}: {status} {answer}")

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, range(count)))


def wait_for_endpoints(emulator: EmulatorProcess, count: int, timeout_s: float = 120.0) -> int:
    deadline = time.monotonic() + timeout_s
    ready = 0
    while time.monotonic() < deadline:
        pods = emulator.api("GET", "/v2/pods")[2]["pods"]
        ready = sum(1 for p in pods if (p.get("ssh") or {}).get("direct"))
        if ready >= count:
            break
        time.sleep(0.5)
    return ready


def parse_seconds(source: Path) -> tuple[float, int]:
    started = time.perf_counter()
    inventory = InventoryManager(loader=DataLoader(), sources=[str(source)])
    elapsed = time.perf_counter() - started
    return elapsed, len(inventory.hosts)


def api_calls(emulator: EmulatorProcess) -> int:
    return len(emulator.admin("GET", "/_emulator/requests")["requests"])


def static_copy(source: Path, target: Path) -> None:
    """The same hosts, groups and variables as a static YAML inventory: the baseline."""
    inventory = InventoryManager(loader=DataLoader(), sources=[str(source)])
    groups: dict = {}
    for group in inventory.groups.values():
        if group.name in ("all", "ungrouped"):
            continue
        groups[group.name] = {"hosts": {host.name: None for host in group.hosts}}
    hosts = {host.name: dict(host.vars) for host in inventory.hosts.values()}
    for values in hosts.values():
        values.pop("inventory_file", None)
        values.pop("inventory_dir", None)
    document = {"all": {"hosts": hosts, "children": groups}}
    target.write_text(yaml.safe_dump(json.loads(json.dumps(document, default=str))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory(prefix="inventory-bench-") as tmp,
        EmulatorProcess(backend="memory", state_dir=Path(tmp) / "emulator") as emulator,
    ):
        work = Path(tmp)
        emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [KEY]})
        started = time.perf_counter()
        create_pods(emulator, args.pods)
        ready = wait_for_endpoints(emulator, args.pods)
        setup_s = time.perf_counter() - started

        os.environ["BENCH_RUNPOD_URL"] = emulator.url
        os.environ["BENCH_RUNPOD_KEY"] = emulator.api_key
        cache_dir = work / "cache"
        source = work / "bench.runpod.yml"
        source.write_text(
            "plugin: trainops.gpu.runpod\n"
            "api_url: \"{{ lookup('ansible.builtin.env', 'BENCH_RUNPOD_URL') }}\"\n"
            "api_key: \"{{ lookup('ansible.builtin.env', 'BENCH_RUNPOD_KEY') }}\"\n"
            "cache: true\ncache_plugin: ansible.builtin.jsonfile\n"
            f"cache_connection: {cache_dir}\ncache_timeout: 3600\n"
        )

        uncached, cached, uncached_calls, cached_calls = [], [], [], []
        hosts = 0
        for _repeat in range(args.repeats):
            for item in cache_dir.glob("*"):
                item.unlink()
            emulator.admin("DELETE", "/_emulator/requests")
            seconds, hosts = parse_seconds(source)
            uncached.append(seconds)
            uncached_calls.append(api_calls(emulator))
            emulator.admin("DELETE", "/_emulator/requests")
            seconds, cached_hosts = parse_seconds(source)
            cached.append(seconds)
            cached_calls.append(api_calls(emulator))
            if hosts != ready or cached_hosts != hosts:
                raise SystemExit(f"inventory gave {hosts} hosts ({cached_hosts} cached) for {ready} pods with SSH")
            if uncached_calls[-1] != 1:
                raise SystemExit(f"an uncached run made {uncached_calls[-1]} API calls; it must make exactly 1")
            if cached_calls[-1] != 0:
                raise SystemExit(f"a run served from the cache made {cached_calls[-1]} API calls; it must make none")

        client = RunPodClient(api_key=emulator.api_key, api_url=emulator.url)
        fetch = []
        for _repeat in range(args.repeats):
            started = time.perf_counter()
            client.list_pods()
            fetch.append(time.perf_counter() - started)

        static = work / "static.yml"
        static_copy(source, static)
        baseline = [parse_seconds(static)[0] for _repeat in range(args.repeats)]

    figures = {
        "pods": args.pods,
        "pods_with_ssh_endpoint": ready,
        "hosts": hosts,
        "setup_s": round(setup_s, 2),
        "api_calls_uncached": uncached_calls,
        "api_calls_cached": cached_calls,
        "parse_s_uncached_median": round(statistics.median(uncached), 3),
        "parse_s_cached_median": round(statistics.median(cached), 3),
        "parse_s_static_yaml_baseline_median": round(statistics.median(baseline), 3),
        "list_pods_call_s_median": round(statistics.median(fetch), 3),
    }
    figures["ratio_uncached_to_static"] = round(
        figures["parse_s_uncached_median"] / figures["parse_s_static_yaml_baseline_median"], 2
    )
    figures["ratio_cached_to_static"] = round(
        figures["parse_s_cached_median"] / figures["parse_s_static_yaml_baseline_median"], 2
    )
    print(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
