"""The RunPod modules against the emulator's memory backend, through real ansible-playbook runs."""

from __future__ import annotations

from runpod_integration_helpers import MUTATING, live_pods, recorded, run_playbook, spec_violations


def test_check_mode_apply_and_idempotence(emulator, openapi):
    check = run_playbook(emulator, "apply.yml", check=True, diff=True)
    assert check.rc == 0, check.explain()
    assert check.stats["changed"] == 4
    assert check.task("Trainer pod on the volume")["pod"] == {}
    assert check.task("Trainer pod on the volume")["diff"]["after"]["name"] == "trainops-r1-trainer"
    sent = recorded(emulator)
    assert sent and all(r["method"] == "GET" for r in sent), [(r["method"], r["path"]) for r in sent]
    assert live_pods(emulator) == []

    applied = run_playbook(emulator, "apply.yml")
    assert applied.rc == 0, applied.explain()
    assert applied.stats["changed"] == 4
    pods = live_pods(emulator)
    assert sorted(p["name"] for p in pods) == ["trainops-r1-eval", "trainops-r1-trainer"]
    # The secret reached the pod but not the playbook output; nor did the API key.
    assert "hf_integration_secret_value" not in applied.stdout
    assert emulator.api_key not in applied.stdout + applied.stderr
    trainer = next(p for p in pods if p["name"] == "trainops-r1-trainer")
    assert trainer["env"]["HF_TOKEN"] == "hf_integration_secret_value"

    emulator.admin("DELETE", "/_emulator/requests")
    again = run_playbook(emulator, "apply.yml")
    assert again.rc == 0, again.explain()
    assert again.stats["changed"] == 0, [t["name"] for t in again.tasks if t.get("changed")]
    assert [r for r in recorded(emulator) if r["method"] in MUTATING] == []
    assert len(live_pods(emulator)) == 2

    check_again = run_playbook(emulator, "apply.yml", check=True)
    assert check_again.rc == 0 and check_again.stats["changed"] == 0, check_again.explain()
    assert spec_violations(openapi, recorded(emulator)) == []


def test_pod_lifecycle(emulator, openapi):
    run = run_playbook(emulator, "lifecycle.yml")
    assert run.rc == 0, run.explain()
    # Check-mode tasks sent nothing that mutates: the only actions are the real ones.
    actions = [r["body"]["action"] for r in recorded(emulator) if r["path"].endswith("/action")]
    assert actions == ["stop", "start", "restart"]
    deletes = [r for r in recorded(emulator) if r["method"] == "DELETE"]
    assert len(deletes) == 1
    assert live_pods(emulator) == []
    assert spec_violations(openapi, recorded(emulator)) == []


def test_volume(emulator, openapi):
    run = run_playbook(emulator, "volume.yml")
    assert run.rc == 0, run.explain()
    patches = [r["body"] for r in recorded(emulator) if r["method"] == "PATCH"]
    assert patches == [{"size": 30}]
    assert spec_violations(openapi, recorded(emulator)) == []


def test_ssh_keys_keep_the_others(emulator, openapi):
    alice = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAliceAliceAliceAliceAliceAliceAliceAli alice@laptop"
    bob = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABgQBobBobBobBobBobBobBobBobBob bob@desk"
    status, _headers, body = emulator.api("PUT", "/v2/account/ssh-keys", {"keys": [alice, bob]})
    assert status == 200, body
    run = run_playbook(emulator, "ssh_keys.yml")
    assert run.rc == 0, run.explain()
    puts = [r for r in recorded(emulator) if r["method"] == "PUT"]
    assert len(puts) == 3  # the seed above, add Carol, remove Bob
    assert emulator.api("GET", "/v2/account/ssh-keys")[2]["keys"][0] == alice
    assert spec_violations(openapi, recorded(emulator)) == []


def create_pod_directly(emulator, name, **extra):
    body = {"name": name, "image": "localhost/trainops-pod", "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1}}
    body.update(extra)
    status, _headers, pod = emulator.api("POST", "/v2/pods", body)
    assert status == 201, pod
    return pod


def test_errors_name_the_problem_and_create_nothing(emulator):
    status, _headers, volume = emulator.api(
        "POST", "/v2/network-volumes", {"name": "tx-data", "size": 10, "dataCenter": "US-TX-3"}
    )
    assert status == 201, volume
    for name in ("trainops-dup-worker", "trainops-dup-worker", "trainops-imm-trainer"):
        create_pod_directly(emulator, name)
    create_pod_directly(emulator, "trainops-imm-eval", mounts={"persistent": {"size": 20, "path": "/workspace"}})
    emulator.admin("DELETE", "/_emulator/requests")

    run = run_playbook(emulator, "errors.yml", {"tx_volume_id": volume["id"]})
    assert run.rc == 0, run.explain()
    mutating = [(r["method"], r["path"]) for r in recorded(emulator) if r["method"] in MUTATING]
    assert mutating == []
    assert len(live_pods(emulator)) == 4
    dup_ids = sorted(p["id"] for p in live_pods(emulator) if p["name"] == "trainops-dup-worker")
    duplicate = run.task("Pod requests that cannot succeed")["results"][8]
    assert sorted(duplicate["pod_ids"]) == dup_ids and all(i in duplicate["msg"] for i in dup_ids)


def test_info_modules_and_request_conformance(emulator, openapi):
    create_pod_directly(emulator, "trainops-info-trainer")
    run = run_playbook(emulator, "info.yml")
    assert run.rc == 0, run.explain()
    sent = recorded(emulator)
    paths = {r["path"] for r in sent}
    assert {"/v2/catalog/gpus", "/v2/catalog/datacenters", "/v2/billing/pods", "/v2/billing/network-volumes"} <= paths
    assert spec_violations(openapi, sent) == []


def test_spec_check_catches_a_bad_request(openapi):
    # The conformance check must be able to fail: an unknown field and a bad action are both violations.
    bad = [
        {"method": "POST", "path": "/v2/pods", "query_string": "", "body": {"name": "x", "bogus": 1}},
        {"method": "POST", "path": "/v2/pods/p1/action", "query_string": "", "body": {"action": "explode"}},
        {"method": "GET", "path": "/v2/catalog/gpus", "query_string": "include=EVERYTHING", "body": None},
    ]
    assert len(spec_violations(openapi, bad)) == 3
