# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The teardown gate: every refusal names what is missing; a pod passes only with its newest checkpoint safe."""

from __future__ import annotations

from ansible_collections.trainops.gpu.plugins.module_utils._teardown_gate import judge, would_lose

POD = {"id": "p1", "name": "trainops-r1-train", "status": "RUNNING", "network_volume": None}
NEWEST = {"path": "/workspace/trainops/r1/ckpt/step-00000020", "step": 20, "valid": True, "manifest_sha256": "aa"}
CHECKS = {"root": "/workspace/trainops/r1/ckpt", "exists": True, "error": None, "checkpoints": [NEWEST],
          "loaded": None}  # fmt: skip
COPY = "/runs/r1/ckpt/step-00000020"


def pulled(exists=True, valid=True, sha="aa", errors=()):
    verify = {
        "valid": valid,
        "loaded": {"ok": valid},
        "checkpoints": [{"manifest_sha256": sha, "errors": list(errors)}],
    }
    return {"path": COPY, "exists": exists, "verify": verify, "controller_has": ["step-00000010"]}


def test_a_pulled_verified_copy_and_the_confirmation_pass():
    gate = judge(POD, True, "/workspace", False, pod_checks=CHECKS, pulled=pulled(), confirm="p1")
    assert gate["ok"] and gate["errors"] == [] and gate["needs_pulled"] and gate["newest"] == NEWEST
    assert gate["checks"]["pulled"]["ok"] and gate["checks"]["pulled"]["controller_has"] == ["step-00000010"]
    assert judge(POD, True, "/workspace", False, pod_checks=CHECKS, pulled=pulled(), confirm=POD["name"])["ok"]


def test_without_the_pulled_facts_the_gate_asks_for_them():
    gate = judge(POD, True, "/workspace", False, pod_checks=CHECKS, confirm="p1")
    assert gate["needs_pulled"] and "pulled" not in gate["checks"] and gate["ok"]


def test_a_missing_copy_and_no_confirmation_are_both_named():
    gate = judge(POD, True, "/workspace", False, pod_checks=CHECKS, pulled=pulled(exists=False))
    assert not gate["ok"] and len(gate["errors"]) == 2
    assert gate["errors"][0] == (
        "the newest checkpoint on pod trainops-r1-train, /workspace/trainops/r1/ckpt/step-00000020 (step 20), is not"
        " verified on the controller: /runs/r1/ckpt/step-00000020 does not exist (the controller has step-00000010);"
        " pull it with the sync role (tasks_from: pull, sync_pull_checkpoints: [step-00000020])"
    )
    assert gate["errors"][1] == (
        "teardown_confirm is empty: set teardown_confirm=p1 (or trainops-r1-train) to terminate pod"
        " trainops-r1-train (p1)."
    )
    wrong = judge(POD, True, "/workspace", False, pod_checks=CHECKS, pulled=pulled(), confirm="p2")
    assert wrong["errors"] == [
        'teardown_confirm "p2" names neither the id nor the name of this pod: set teardown_confirm=p1'
        " (or trainops-r1-train) to terminate pod trainops-r1-train (p1)."
    ]


def test_a_copy_that_does_not_load_or_differs_is_refused():
    bad = judge(
        POD, True, "/workspace", False, pod_checks=CHECKS, pulled=pulled(valid=False, errors=["x"]), confirm="p1"
    )
    assert "checkpoint_verify load=true on /runs/r1/ckpt/step-00000020 failed: x" in bad["errors"][0]
    other = judge(POD, True, "/workspace", False, pod_checks=CHECKS, pulled=pulled(sha="bb"), confirm="p1")
    assert (
        "is not the checkpoint on the pod (manifest sha256 bb on the controller, aa on the pod)" in other["errors"][0]
    )


def test_a_pod_that_cannot_be_read():
    stopped = dict(POD, status="EXITED")
    gate = judge(stopped, False, "/workspace", False, confirm="p1", start_stopped=True, check_mode=True)
    assert gate["errors"] == [
        "pod trainops-r1-train (p1) is EXITED: its durable root cannot be read, so its newest checkpoint is unknown."
        " Set teardown_start_stopped=true to start it for the checks (it is stopped again if the gate refuses)"
        " (check mode starts nothing), or use teardown_action=stop (or teardown_allow_no_known_checkpoint=true to"
        " terminate it unread)."
    ]
    running = judge(POD, False, "/workspace", False, confirm="p1")
    assert "is RUNNING and SSH does not answer yet: " in running["errors"][0]
    assert "Wait until it runs and SSH answers" in running["errors"][0]
    assert judge(POD, False, "", False, confirm="p1", allow_no_known_checkpoint=True)["ok"]


def test_no_durable_root_no_checkpoint_an_invalid_newest_and_a_failed_read():
    assert (
        "has neither a network volume nor a persistent volume" in judge(POD, True, "", False, confirm="p1")["errors"][0]
    )
    empty = dict(CHECKS, checkpoints=[], exists=False)
    assert judge(POD, True, "/workspace", False, pod_checks=empty, confirm="p1")["errors"] == [
        "pod trainops-r1-train (p1) has no checkpoint at all under /workspace/trainops/r1/ckpt (the directory does"
        " not exist): set teardown_allow_no_known_checkpoint=true to terminate it without one."
    ]
    assert judge(POD, True, "/workspace", False, pod_checks=empty, confirm="p1", allow_no_known_checkpoint=True)["ok"]
    invalid = dict(CHECKS, checkpoints=[dict(NEWEST, valid=False, errors=["SHA256SUMS: model.pt FAILED"])])
    gate = judge(POD, True, "/workspace", False, pod_checks=invalid, confirm="p1")
    assert gate["errors"][0].startswith(
        "the newest checkpoint on pod trainops-r1-train, /workspace/trainops/r1/ckpt/step-00000020, does not verify"
        " there: SHA256SUMS: model.pt FAILED. Keep an older one"
    )
    assert not gate["needs_pulled"]
    failed = judge(POD, True, "/workspace", False, pod_checks=dict(CHECKS, error="SSH to h failed: x"), confirm="p1")
    assert failed["errors"][0] == (
        "reading the checkpoints of pod trainops-r1-train under /workspace/trainops/r1/ckpt failed: SSH to h failed: x"
        " (teardown_allow_no_known_checkpoint=true terminates it unread)"
    )


def test_a_network_volume_that_exists_with_the_newest_loaded_on_the_pod_passes_without_a_pull():
    pod = dict(POD, network_volume={"id": "v1", "path": "/runpod"})
    newest = dict(NEWEST, path="/runpod/trainops/r1/ckpt/step-00000020")
    checks = dict(CHECKS, checkpoints=[newest], loaded={"ok": True, "path": newest["path"]})
    volumes = [{"id": "v1", "data_center": "EU-RO-1"}]
    gate = judge(pod, True, "/runpod", True, pod_checks=checks, volumes=volumes, confirm="p1")
    assert gate["ok"] and not gate["needs_pulled"] and gate["checks"]["volume"]["ok"]
    assert gate["checks"]["volume"]["data_center"] == "EU-RO-1" and gate["checks"]["volume"]["reason"] is None
    gone = judge(pod, True, "/runpod", True, pod_checks=checks, volumes=[], confirm="p1", pulled=pulled(exists=False))
    assert gone["needs_pulled"] and gone["checks"]["volume"]["reason"] == "network volume v1 is not on the account"
    assert gone["errors"][0].endswith(" (Network volume check: network volume v1 is not on the account.)")
    unloaded = judge(pod, True, "/runpod", True, pod_checks=dict(checks, loaded=None), volumes=volumes, confirm="p1")
    assert unloaded["checks"]["volume"]["reason"] == (
        "loading /runpod/trainops/r1/ckpt/step-00000020 on the pod (checkpoint_verify load=true) did not succeed:"
        " no load result"
    )


def test_what_terminating_would_lose_is_read_and_said_whatever_the_flag_waives():
    stopped = dict(POD, status="EXITED", persistent_volume={"size": 20, "path": "/workspace"})
    unread = judge(stopped, False, "/workspace", False, confirm="p1", allow_no_known_checkpoint=True)
    assert unread["ok"] and unread["would_lose"] == {
        "read": False,
        "on_pod": None,
        "lost": None,
        "controller_has": [],
        "sentence": "pod trainops-r1-train (p1) is EXITED and its durable root /workspace was not read: whatever"
        " checkpoints its 20 GB volume disk holds are deleted with it; the controller holds no pulled checkpoint of"
        " the run.",
    }
    two = dict(CHECKS, checkpoints=[NEWEST, dict(NEWEST, path="/workspace/trainops/r1/ckpt/step-00000010", step=10)])
    lost = would_lose(POD, True, "/workspace", False, two, ["step-00000010"])
    assert lost["read"] and lost["on_pod"] == ["step-00000020", "step-00000010"] and lost["lost"] == ["step-00000020"]
    assert lost["sentence"] == (
        "1 checkpoint(s) of pod trainops-r1-train (p1) are not on the controller and are deleted with it:"
        " step-00000020; the controller holds step-00000010 (newest step-00000010)."
    )
    kept = would_lose(POD, True, "/workspace", False, two, ["step-00000020", "step-00000010"])
    assert kept["lost"] == [] and "is on the controller: nothing is lost" in kept["sentence"]
    empty = would_lose(POD, True, "/workspace", False, dict(CHECKS, checkpoints=[]), [])
    assert (
        empty["lost"] == []
        and "holds no checkpoint under /workspace/trainops/r1/ckpt: nothing is lost" in (empty["sentence"])
    )
    volume_pod = dict(POD, network_volume={"id": "v1", "path": "/runpod-volume"})
    on_volume = would_lose(volume_pod, False, "/runpod-volume", True, None, [])
    assert on_volume["sentence"].startswith("the checkpoints under /runpod-volume stay on network volume v1")
    unreadable = dict(CHECKS, checkpoints=[], error="Permission denied")
    refused = judge(POD, True, "/workspace", False, pod_checks=unreadable, confirm="p1")
    assert refused["errors"] == [
        "reading the checkpoints of pod trainops-r1-train under /workspace/trainops/r1/ckpt failed: Permission denied"
        " (teardown_allow_no_known_checkpoint=true terminates it unread)"
    ]
    waived = judge(POD, True, "/workspace", False, pod_checks=unreadable, confirm="p1", allow_no_known_checkpoint=True)
    assert waived["ok"] and not waived["would_lose"]["read"]
    failed = would_lose(POD, True, "/workspace", False, dict(CHECKS, error="Permission denied"), [])
    assert not failed["read"] and failed["sentence"].startswith("reading the checkpoints of pod trainops-r1-train")
    assert "has no durable root" in would_lose(POD, True, "", False, None, [])["sentence"]
