"""The provision scenario's verifier: what the role recorded in state.json matches what the emulator's API holds, and
the pod it waited for answers SSH on loopback. Reads only."""

from __future__ import annotations

import json
import os
import socket
import urllib.request
from pathlib import Path

import pytest

RUN_ID = "molecule-prov"
VOLUME = "trainops-molecule-prov-vol"
EPHEMERAL = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))


@pytest.fixture(scope="module")
def api():
    emulator = json.loads((EPHEMERAL / "emulator" / "emulator.json").read_text())
    key = (EPHEMERAL / "emulator" / "api-key").read_text().strip()

    def get(path: str):
        request = urllib.request.Request(emulator["url"] + path, headers={"Authorization": f"Bearer {key}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.load(response)

    return get


@pytest.fixture(scope="module")
def state():
    return json.loads((EPHEMERAL / "runs" / RUN_ID / "state.json").read_text())


def records(state, kind):
    return [r for r in state["resources"] if r["kind"] == kind]


def test_one_pod_one_volume_one_key_recorded_once_each(state):
    assert state["run_id"] == RUN_ID
    assert [len(records(state, kind)) for kind in ("pod", "network_volume", "ssh_key")] == [1, 1, 1], state
    assert {r.get("role") for r in state["resources"]} == {"molecule"}


def test_the_recorded_pod_runs_on_the_recorded_volume(api, state):
    pod_record, volume_record = records(state, "pod")[0], records(state, "network_volume")[0]
    pods = [p for p in api("/v2/pods")["pods"] if p["name"] == f"trainops-{RUN_ID}"]
    assert [p["id"] for p in pods] == [pod_record["id"]]  # the idempotence converge made no second pod
    assert pods[0]["status"] == "RUNNING"
    assert [m["volumeId"] for m in pods[0]["mounts"]["network"]] == [volume_record["id"]]
    volumes = [v for v in api("/v2/network-volumes")["networkVolumes"] if v["name"] == VOLUME]
    assert [v["id"] for v in volumes] == [volume_record["id"]]


def test_the_pod_answers_ssh_on_loopback(api, state):
    pod = api(f"/v2/pods/{records(state, 'pod')[0]['id']}")
    direct = pod["ssh"]["direct"]
    assert direct["host"] == "127.0.0.1", pod
    with socket.create_connection((direct["host"], direct["port"]), timeout=10) as sock:
        assert sock.recv(64).startswith(b"SSH-2.0-")
