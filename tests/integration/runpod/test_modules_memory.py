"""The RunPod modules against the emulator's memory backend, through real ansible-playbook runs."""

from __future__ import annotations

from conftest import MUTATING, live_pods, recorded, run_playbook


def test_check_mode_apply_and_idempotence(emulator):
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
    # The secret reached the pod but not the playbook output.
    assert "hf_integration_secret_value" not in applied.stdout
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


def test_pod_lifecycle(emulator):
    run = run_playbook(emulator, "lifecycle.yml")
    assert run.rc == 0, run.explain()
    # Check-mode tasks sent nothing that mutates: the only actions are the real ones.
    actions = [r["body"]["action"] for r in recorded(emulator) if r["path"].endswith("/action")]
    assert actions == ["stop", "start", "restart"]
    deletes = [r for r in recorded(emulator) if r["method"] == "DELETE"]
    assert len(deletes) == 1
    assert live_pods(emulator) == []
