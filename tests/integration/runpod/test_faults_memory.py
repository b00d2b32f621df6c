"""Faults the emulator injects: rate limits, gateway errors, a create that fails after it happened, a wrong key."""

from __future__ import annotations

from runpod_integration_helpers import live_pods, recorded, run_playbook


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
    run = run_playbook(emulator, "five_pods.yml", {"pod_count": 1, "run_id": "drop"})
    assert run.rc == 0, run.explain()
    assert [p["name"] for p in live_pods(emulator)] == ["trainops-drop-w0"]
    calls = [(r["method"], r["path"]) for r in recorded(emulator) if r["path"] == "/v2/pods"]
    dropped = calls.index(("POST", "/v2/pods"))
    # After the dropped POST: two lookups by name a moment apart, then the one create that succeeded.
    assert calls[dropped + 1 : dropped + 4] == [("GET", "/v2/pods"), ("GET", "/v2/pods"), ("POST", "/v2/pods")]
    assert calls.count(("POST", "/v2/pods")) == 2


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


def test_wait_timeout_reports_the_created_pod(emulator):
    run = run_playbook(emulator, "wait_timeout.yml")
    assert run.rc == 0, run.explain()
    pod_id = run.task("Create a pod and wait for SSH that never answers")["pod_id"]
    assert [p["id"] for p in live_pods(emulator)] == [pod_id]
