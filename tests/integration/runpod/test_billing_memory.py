"""runpod_billing_info against the emulator's ledger: exact amounts for a known pod and volume over known windows.

The emulator's clock is advanced (POST /_emulator/clock) so that whole hours pass in a second. Expected amounts
are computed here from the published rates (docs/emulator.md, emulator/runpod_emulator/pricing.py), not read
from the emulator's code.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from runpod_integration_helpers import run_playbook

HOUR = 3600
HOURS_PER_MONTH = 730.0
GPU_PRICE_SECURE_4090 = 0.69  # USD per hour, one RTX 4090 on the secure cloud
CONTAINER_DISK_GB, PERSISTENT_GB, VOLUME_GB = 20, 30, 50
# USD per GB-month: container and volume disk while running, volume disk while stopped, STANDARD network volume.
RUNNING_DISK, STOPPED_DISK, STANDARD_VOLUME = 0.10, 0.20, 0.07

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    group/trainops.gpu.runpod:
      api_url: "{{ lookup('ansible.builtin.env', 'RUNPOD_API_URL') }}"
      api_key: "{{ lookup('ansible.builtin.env', 'RUNPOD_API_KEY') }}"
  tasks:
    - name: Billing of the window
      trainops.gpu.runpod_billing_info:
        start_time: "{{ start_time }}"
        end_time: "{{ end_time }}"
        bucket_size: hour
        pod_id: "{{ pod_id }}"
        network_volume_id: "{{ volume_id }}"
"""


def emulator_now(emulator, advance_s: float = 0) -> float:
    now = emulator.admin("POST", "/_emulator/clock", {"advance_s": advance_s})["now"]
    return dt.datetime.fromisoformat(now.replace("Z", "+00:00")).timestamp()


def rfc3339(epoch: float) -> str:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def first_whole_hour_after(epoch: float) -> float:
    """The start of the first hour that begins at least a minute after `epoch` (the creates take a moment)."""
    return (int(epoch + 60) // HOUR + 1) * HOUR


def billing(emulator, tmp_path, start: float, pod_id: str, volume_id: str) -> dict:
    playbook = tmp_path / "billing.yml"
    playbook.write_text(PLAYBOOK)
    variables = {"start_time": rfc3339(start), "end_time": rfc3339(start + 2 * HOUR), "pod_id": pod_id}
    run = run_playbook(emulator, str(playbook), {**variables, "volume_id": volume_id})
    assert run.rc == 0, run.explain()
    return run.task("Billing of the window")


def check_window(result: dict, start: float, pod_id: str, volume_id: str, gpu: float, disk: float, volume: float):
    """Two hourly records per family, each with the hour's exact amounts; totals and total_amount add up."""
    hours = [rfc3339(start), rfc3339(start + HOUR)]
    pods = result["pods"]["records"]
    assert [(r["pod_id"], r["start_time"][:19] + "Z") for r in pods] == [(pod_id, h) for h in hours], pods
    for record in pods:
        assert record["gpu_amount"] == pytest.approx(gpu, abs=1e-9)
        assert record["cpu_amount"] == 0
        assert record["disk_amount"] == pytest.approx(disk, abs=1e-9)
        assert record["total_amount"] == pytest.approx(gpu + disk, abs=1e-9)
    volumes = result["network_volumes"]["records"]
    assert [(r["network_volume_id"], r["start_time"][:19] + "Z") for r in volumes] == [(volume_id, h) for h in hours]
    for record in volumes:
        assert record["standard_amount"] == pytest.approx(volume, abs=1e-9)
        assert record["high_performance_amount"] == 0
    assert result["pods"]["metadata"]["totals"]["total_amount"] == pytest.approx(2 * (gpu + disk), abs=1e-8)
    assert result["network_volumes"]["metadata"]["totals"]["total_amount"] == pytest.approx(2 * volume, abs=1e-8)
    assert result["total_amount"] == round(2 * (gpu + disk + volume), 6)


def test_billing_amounts_match_the_rates_of_a_running_then_stopped_pod_and_a_volume(emulator, tmp_path):
    created_after = emulator_now(emulator)
    body = {
        "name": "trainops-bill-trainer",
        "image": "localhost/trainops-pod",
        "cloud": "SECURE",
        "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
        "dataCenterIds": ["EU-RO-1"],
        "disk": CONTAINER_DISK_GB,
        "mounts": {"persistent": {"size": PERSISTENT_GB, "path": "/workspace"}},
    }
    status, _headers, pod = emulator.api("POST", "/v2/pods", body)
    assert status == 201, pod
    volume_body = {"name": "bill-data", "size": VOLUME_GB, "dataCenter": "EU-RO-1", "type": "STANDARD"}
    status, _headers, volume = emulator.api("POST", "/v2/network-volumes", volume_body)
    assert status == 201, volume
    emulator.wait_for(pod["id"], lambda p: p["status"] == "RUNNING", 30)

    volume_per_hour = VOLUME_GB * STANDARD_VOLUME / HOURS_PER_MONTH
    # Running: the GPU, the container disk and the persistent volume at the running rate.
    emulator_now(emulator, 4 * HOUR)
    running_start = first_whole_hour_after(created_after)
    running = billing(emulator, tmp_path, running_start, pod["id"], volume["id"])
    running_disk = (CONTAINER_DISK_GB + PERSISTENT_GB) * RUNNING_DISK / HOURS_PER_MONTH
    check_window(running, running_start, pod["id"], volume["id"], GPU_PRICE_SECURE_4090, running_disk, volume_per_hour)
    assert running["total_amount"] == round(2 * (0.69 + 50 * 0.10 / 730 + 50 * 0.07 / 730), 6) == 1.403288

    # Stopped: no GPU, no container disk, the persistent volume at twice the running rate.
    assert emulator.api("POST", f"/v2/pods/{pod['id']}/action", {"action": "stop"})[0] == 200
    emulator.wait_for(pod["id"], lambda p: p["status"] == "EXITED", 30)
    stopped_after = emulator_now(emulator)
    emulator_now(emulator, 4 * HOUR)
    stopped_start = first_whole_hour_after(stopped_after)
    stopped = billing(emulator, tmp_path, stopped_start, pod["id"], volume["id"])
    stopped_disk = PERSISTENT_GB * STOPPED_DISK / HOURS_PER_MONTH
    check_window(stopped, stopped_start, pod["id"], volume["id"], 0.0, stopped_disk, volume_per_hour)
    assert stopped["total_amount"] == round(2 * (30 * 0.20 + 50 * 0.07) / 730, 6) == 0.026027
    assert json.dumps(stopped["pods"]["metadata"]["query"]).count(pod["id"]) == 1
