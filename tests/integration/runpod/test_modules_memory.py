"""The RunPod modules against the emulator's memory backend, through real ansible-playbook runs."""

from __future__ import annotations

import pytest
from runpod_integration_helpers import MUTATING, create_pod_directly, live_pods, recorded, run_playbook, spec_violations


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# Inputs that used to report a change in check mode and fail for real: each case is the task's loop item
# (``case`` its id, ``expect`` a part of the message). The volume delete is its own task.
PREDICT_CASES = [
    {"case": "port-without-protocol", "ports": ["22"], "expect": "port '22' is not port/protocol"},
    {"case": "port-unknown-protocol", "ports": ["22/xyz"], "expect": "port '22/xyz' is not port/protocol"},
    {"case": "port-trailing-newline", "ports": ["22/tcp\n"], "expect": "is not port/protocol"},
    {"case": "port-out-of-range", "ports": ["70000/tcp"], "expect": "out of range: 1..65535"},
    {"case": "env-name-digit", "env": {"1BAD": "x"}, "expect": "env name '1BAD' is not a valid"},
    {"case": "env-name-dash", "env": {"BAD-KEY": "x"}, "expect": "env name 'BAD-KEY' is not a valid"},
    {"case": "env-value-nul", "env": {"GOOD": "a\u0000b"}, "expect": "holds a NUL byte"},
    {"case": "env-reserved", "env": {"TRAINOPS_CREATE_TOKEN": "x"}, "expect": "TRAINOPS_CREATE_TOKEN is reserved"},
    {
        "case": "persistent-relative",
        "persistent_volume_size": 20,
        "persistent_volume_path": "workspace",
        "expect": "persistent_volume_path 'workspace' is not an absolute path",
    },
    {
        "case": "persistent-colon",
        "persistent_volume_size": 20,
        "persistent_volume_path": "/data:rw",
        "expect": "must not contain ':'",
    },
    {
        "case": "network-relative",
        "network_volume_path": "data",
        "expect": "network_volume_path 'data' is not an absolute",
    },
    {"case": "network-colon", "network_volume_path": "/data:ro", "expect": "network_volume_path '/data:ro' must not"},
    {
        # RunPod's Mounts takes one kind; the module used to send the network volume and drop the persistent one.
        "case": "persistent-and-network",
        "persistent_volume_size": 20,
        "network_volume_path": "/data",
        "expect": "persistent_volume_size (20 GB) and network_volume_id (",
    },
    {"case": "unknown-cpu-flavor", "cpu_flavor": "cpu9x", "vcpu_count": 4, "expect": "unknown cpu_flavor 'cpu9x'"},
    {
        "case": "vcpu-1024",
        "cpu_flavor": "cpu3c",
        "vcpu_count": 1024,
        "expect": "vcpu_count must be a power of two from 2 to 32 for cpu3c, got 1024",
    },
    {"case": "cuda-99.9", "min_cuda_version": "99.9", "expect": "no host offers CUDA 99.9 or newer"},
    {
        "case": "gpu-not-in-dc",
        "gpu_type": "NVIDIA A100 80GB PCIe",
        "data_center_ids": ["EU-RO-1"],
        "expect": "is not offered in data center EU-RO-1; it is offered in: US-TX-3",
    },
    {"case": "gpu-count-bool", "gpu_count": True, "expect": "gpu_count must be an integer, got true"},
    {"case": "vcpu-with-gpu", "vcpu_count": 4, "expect": "vcpu_count applies to CPU pods"},
    {"case": "wait-timeout-over-6h", "wait_timeout": 21601, "expect": "wait_timeout must be from 1 to 21600 seconds"},
    {"case": "rename-to-taken", "rename": True, "name": "trainops-pred-other", "expect": "already have that name"},
    # Check mode only warns here: an earlier task of the same check run may only have pretended to register a key.
    {"case": "ssh-wait-without-keys", "wait": True, "expect": "the account has no registered SSH keys"},
]
CHECK_MODE_WARNS = ("ssh-wait-without-keys",)


@pytest.fixture(scope="module")
def predicted(memory_emulator):
    """The predict playbook in check mode, then for real, on an emulator emptied first; and what was left."""
    memory_emulator.admin("POST", "/_emulator/reset")
    memory_emulator.admin("DELETE", "/_emulator/faults")
    runs = {}
    for mode in ("check", "real"):
        run = run_playbook(memory_emulator, "predict.yml", {"cases": PREDICT_CASES}, check=mode == "check")
        assert run.rc == 0, run.explain()
        runs[mode] = run
    left = sorted(p["name"] for p in live_pods(memory_emulator))
    volumes = memory_emulator.api("GET", "/v2/network-volumes")[2]["networkVolumes"]
    return runs, left, [v["name"] for v in volumes]


def _case_result(run, case):
    if case == "attached-volume-delete":
        return run.task("Delete the attached volume")
    results = run.task("Pod inputs that cannot succeed")["results"]
    return next(r for r in results if r["item"]["case"] == case)


@pytest.mark.slow  # its fixture runs the predict playbook twice (about 27 s on 2 cores): make test, not make check
@pytest.mark.parametrize("case", [c["case"] for c in PREDICT_CASES] + ["attached-volume-delete"])
def test_check_mode_fails_as_the_real_run_does(predicted, case):
    runs, left, volumes = predicted
    expect = next((c["expect"] for c in PREDICT_CASES if c["case"] == case), "is attached to pod(s)")
    check, real = _case_result(runs["check"], case), _case_result(runs["real"], case)
    assert real.get("failed") and expect in real["msg"], real
    assert not real.get("changed") and not real.get("created")
    if case not in CHECK_MODE_WARNS:
        assert check.get("failed") and check["msg"] == real["msg"], (check, real)
        assert not check.get("changed")
    assert left == ["trainops-pred-other", "trainops-pred-user"] and volumes == ["trainops-pred-vol"]
