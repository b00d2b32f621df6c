"""Faults the emulator injects: rate limits, gateway errors, a create that fails after it happened, a wrong key."""

from __future__ import annotations

import pytest
from runpod_integration_helpers import live_pods, load_collection, recorded, run_playbook


@pytest.mark.slow
def test_five_pods_through_429_503_and_a_500_after_create(emulator):
    # 20% of API requests fail with 429 or 503 (seeded, so the run is reproducible), and the first create
    # answers 500 although the pod was made.
    emulator.admin("POST", "/_emulator/faults", {"kind": "429", "rate": 0.1, "seed": 7, "path_prefix": "/v2/"})
    emulator.admin("POST", "/_emulator/faults", {"kind": "503", "rate": 0.1, "seed": 11, "path_prefix": "/v2/"})
    emulator.admin("POST", "/_emulator/faults", {"kind": "500_after_create", "count": 1})

    run = run_playbook(emulator, "five_pods.yml")
    assert run.rc == 0, run.explain()
    pods = live_pods(emulator)
    assert sorted(p["name"] for p in pods) == [f"trainops-faults-w{i}" for i in range(5)]
    statuses = [r["status"] for r in recorded(emulator)]
    # The faults really happened: otherwise this test proves nothing.
    assert statuses.count(500) == 1
    assert statuses.count(429) >= 1 and statuses.count(503) >= 1, statuses
    reconciled = [r for r in run.task("Create the workers")["results"] if r.get("reconciled")]
    assert len(reconciled) == 1
    creates = [r for r in recorded(emulator) if r["method"] == "POST" and r["path"] == "/v2/pods"]
    assert [r["status"] for r in creates].count(201) == 4  # the fifth pod came from the 500 that had created it


def test_wrong_key_fails_once_clearly_without_retries(emulator):
    run = run_playbook(emulator, "apply.yml", api_key="wrong-key-0000")
    assert run.rc != 0
    message = run.task("Register the controller key")["msg"]
    assert message.startswith("RunPod API call getSshKeys (GET /v2/account/ssh-keys) failed: HTTP 401"), message
    assert "attempts" not in message and "wrong-key-0000" not in run.stdout + run.stderr
    sent = recorded(emulator)
    assert [(r["method"], r["path"], r["status"]) for r in sent] == [("GET", "/v2/account/ssh-keys", 401)]
    assert live_pods(emulator) == []


def test_dropped_create_is_resent_only_after_looking_the_name_up(emulator):
    # The connection drops before the emulator handles the create: no pod exists, so the module may send it again.
    emulator.admin(
        "POST", "/_emulator/faults", {"kind": "drop", "count": 1, "method": "POST", "path_prefix": "/v2/pods"}
    )
    run = run_playbook(emulator, "five_pods.yml", {"pod_count": 1, "run_id": "drop", "reconcile_window": 2})
    assert run.rc == 0, run.explain()
    assert [p["name"] for p in live_pods(emulator)] == ["trainops-drop-w0"]
    calls = [(r["method"], r["path"]) for r in recorded(emulator) if r["path"] == "/v2/pods"]
    dropped = calls.index(("POST", "/v2/pods"))
    # No answer: the server may still be making the pod, so it is looked for a second apart over the whole
    # reconcile_window (2 s: three reads), then the one create that succeeded, then its read back.
    lookups = [("GET", "/v2/pods")] * 3
    assert calls[dropped + 1 : dropped + 6] == [*lookups, ("POST", "/v2/pods"), ("GET", "/v2/pods")]
    assert calls.count(("POST", "/v2/pods")) == 2


@pytest.mark.slow
def test_volume_create_answered_503_is_resent_only_after_looking_the_name_up(emulator):
    emulator.admin(
        "POST", "/_emulator/faults", {"kind": "503", "count": 1, "method": "POST", "path_prefix": "/v2/network-volumes"}
    )
    run = run_playbook(emulator, "volume.yml")
    assert run.rc == 0, run.explain()  # the playbook asserts one volume was listed, then deleted
    calls = [(r["method"], r["status"]) for r in recorded(emulator) if r["path"] == "/v2/network-volumes"]
    failed = calls.index(("POST", 503))
    assert calls[failed + 1 : failed + 4] == [("GET", 200), ("GET", 200), ("POST", 201)]
    assert [c for c in calls if c[0] == "POST"] == [("POST", 503), ("POST", 201)]


@pytest.mark.slow
def test_wait_timeout_reports_the_created_pod(emulator):
    run = run_playbook(emulator, "wait_timeout.yml")
    assert run.rc == 0, run.explain()
    pod_id = run.task("Create a pod and wait for SSH that never answers")["pod_id"]
    assert [p["id"] for p in live_pods(emulator)] == [pod_id]


@pytest.mark.slow
def test_creates_slower_than_api_timeout_make_one_resource_each(emulator):
    # Every create answers 3 s late with api_timeout 1: the module gets no answer, must find what the create
    # made by its token (pods) or name in the data center (volumes), and must never send it again.
    for prefix in ("/v2/pods", "/v2/network-volumes"):
        emulator.admin(
            "POST",
            "/_emulator/faults",
            {"kind": "latency", "latency_ms": 3000, "rate": 1.0, "method": "POST", "path_prefix": prefix},
        )
    run = run_playbook(emulator, "slow_creates.yml")
    assert run.rc == 0, run.explain()
    pods = live_pods(emulator)
    assert sorted(p["name"] for p in pods) == [f"trainops-slow-w{i}" for i in range(5)]
    tokens = [p["env"]["TRAINOPS_CREATE_TOKEN"] for p in pods]
    assert len(set(tokens)) == 5 and all(tokens)
    volumes = emulator.api("GET", "/v2/network-volumes")[2]["networkVolumes"]
    assert sorted(v["name"] for v in volumes) == [f"trainops-slow-v{i}" for i in range(5)]
    posts = [r["path"] for r in recorded(emulator) if r["method"] == "POST"]
    assert sorted(posts) == ["/v2/network-volumes"] * 5 + ["/v2/pods"] * 5
    for task in ("Create the workers", "Create the volumes"):
        results = run.task(task)["results"]
        assert [(r["created"], r["reconciled"], r["changed"]) for r in results] == [(True, True, True)] * 5
    # The token is not a change: the same playbook again changes nothing.
    emulator.admin("DELETE", "/_emulator/faults")
    again = run_playbook(emulator, "slow_creates.yml")
    assert again.rc == 0 and again.stats["changed"] == 0, again.explain()


def _create_and_delete(client, cycle):
    """One cycle: every fourth a network volume, the others pods. Returns what carried the create, and the
    failure the create was settled from (None when it was answered 201)."""
    from ansible_collections.trainops.gpu.plugins.module_utils._runpod_base import new_create_token, settle_create
    from ansible_collections.trainops.gpu.plugins.module_utils._runpod_resources import (
        CREATE_TOKEN_ENV,
        pods_of_create,
        volumes_named,
    )

    if cycle % 4 == 3:
        name = f"trainops-cycle-v{cycle}"
        body = {"name": name, "size": 10, "dataCenter": "EU-RO-1"}
        send, delete = client.create_network_volume, client.delete_network_volume

        def find():
            return volumes_named(client.list_network_volumes(), name, "EU-RO-1")

    else:
        name, token = f"trainops-cycle-w{cycle}", new_create_token()
        body = {
            "name": name,
            "image": "img",
            "gpu": {"id": "NVIDIA GeForce RTX 4090"},
            "env": {CREATE_TOKEN_ENV: token},
        }
        send, delete = client.create_pod, client.delete_pod

        def find():
            return pods_of_create(client.list_pods(), name, token)

    result, failure = settle_create(client, lambda: send(body), find, window_s=2, recheck_s=0.05)
    made = find()
    delete((result[0] if isinstance(result, list) else result)["id"])
    return made, failure


@pytest.mark.slow
def test_100_create_delete_cycles_through_faults_leave_no_duplicate_and_no_orphan(emulator):
    """The module code (settle_create, pods_of_create) driven directly: 20 % of requests fail with 429 or 503,
    20 % of the pod creates that succeed answer 500; 100 cycles, each one create and one delete."""
    import time

    load_collection()  # _create_and_delete imports from it too
    from ansible_collections.trainops.gpu.plugins.module_utils._runpod import RunPodClient

    for kind, seed in (("429", 3), ("503", 5)):
        emulator.admin(
            "POST",
            "/_emulator/faults",
            {"kind": kind, "rate": 0.1, "seed": seed, "path_prefix": "/v2/", "retry_after_s": 0},
        )
    emulator.admin("POST", "/_emulator/faults", {"kind": "500_after_create", "rate": 0.2, "seed": 9})
    client = RunPodClient(
        emulator.api_key, emulator.url, timeout=5, max_retries=8, sleep=lambda s: time.sleep(min(s, 0.02))
    )
    started, duplicates, reconciled = time.monotonic(), [], 0
    for cycle in range(100):
        made, failure = _create_and_delete(client, cycle)
        reconciled += failure is not None
        if len(made) != 1:
            duplicates.append((cycle, [m["id"] for m in made]))
    elapsed = time.monotonic() - started
    emulator.admin("DELETE", "/_emulator/faults")
    assert duplicates == []
    assert live_pods(emulator) == [] and emulator.api("GET", "/v2/network-volumes")[2]["networkVolumes"] == []
    statuses = [r["status"] for r in recorded(emulator)]
    assert reconciled >= 5 and statuses.count(429) >= 5 and statuses.count(503) >= 5 and statuses.count(500) >= 5
    assert elapsed < 60, elapsed
