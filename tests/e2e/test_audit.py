"""playbooks/audit.yml (and the teardown role's stop verb) on the emulator's memory backend: no SSH is needed.

One emulator holds: a pod a run recorded (running), an orphaned running pod (our prefix, no run recorded it), a
pod of ours stopped through playbooks/teardown.yml (teardown_action=stop), a pod not ours, an unattached network
volume of ours, and a pod a run recorded that no longer exists. The emulator's clock is moved 10 hours between
two reads of its billing ledger (GET /v2/billing/*); the audit's rates must account for what the ledger accrued
in those hours, and its figures must equal the ones computed here from the price rules.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from runpod_emulator.testing import EmulatorProcess, ansible_env

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
HOURS = 10
# RunPod's published prices, which the emulator bills: RTX 4090 secure cloud $0.69/GPU-hour; disks $0.10/GB-month
# (container and volume disk while running), a stopped pod's volume disk $0.20/GB-month, a STANDARD network volume
# $0.07/GB-month; 730 hours a month.
GPU_HOUR = 0.69
MONTH_H = 730.0
RUNNING_GB_MONTH = 0.10
STOPPED_GB_MONTH = 0.20
VOLUME_GB_MONTH = 0.07
DISK_GB, VOLUME_GB, NETWORK_GB = 10, 20, 50


def running_per_hour() -> float:
    return GPU_HOUR + (DISK_GB + VOLUME_GB) * RUNNING_GB_MONTH / MONTH_H


class Account:
    def __init__(self, emulator: EmulatorProcess, runs: Path):
        self.emulator = emulator
        self.runs = runs
        self.ids: dict[str, str] = {}

    def create_pod(self, key: str, name: str) -> dict[str, Any]:
        body = {
            "name": name,
            "image": "runpod/pytorch",
            "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
            "cloud": "SECURE",
            "disk": DISK_GB,
            "mounts": {"persistent": {"size": VOLUME_GB, "path": "/workspace"}},
        }
        pod = self.emulator.admin("POST", "/v2/pods", body)
        self.ids[key] = pod["id"]
        return pod

    def play(self, playbook: str, *args: str, **extra_vars: Any) -> subprocess.CompletedProcess[str]:
        env = ansible_env(self.emulator.url, self.emulator.api_key)
        command = [
            str(BIN / "ansible-playbook"),
            str(ROOT / "playbooks" / playbook),
            *args,
            "-e",
            json.dumps(extra_vars),
        ]
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)

    def ledger(self) -> dict[str, float]:
        """USD accrued per pod and volume since 1970, read from the emulator's billing ledger."""
        totals: dict[str, float] = {}
        for family, key in (("pods", "podId"), ("network-volumes", "networkVolumeId")):
            answer = self.emulator.admin("GET", f"/v2/billing/{family}?bucketSize=year&lastN=100")
            for record in answer["records"]:
                totals[record[key]] = totals.get(record[key], 0.0) + record["totalAmount"]
        return totals


def explain(done: subprocess.CompletedProcess[str]) -> str:
    return f"rc={done.returncode}\n{done.stdout[-6000:]}\n{done.stderr[-3000:]}"


def write_state(runs: Path, run_id: str, pods: list[tuple[str, str, str]]) -> None:
    (runs / run_id).mkdir(parents=True, exist_ok=True)
    resources = [
        {"kind": "pod", "id": pod_id, "name": name, "action": "created", "status": status}
        for pod_id, name, status in pods
    ]
    document = {"format_version": 1, "run_id": run_id, "resources": resources}
    (runs / run_id / "state.json").write_text(json.dumps(document))


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("audit")
    runs = tmp / "runs"
    with EmulatorProcess(backend="memory", state_dir=tmp / "emulator") as emulator:
        account = Account(emulator, runs)
        recorded = account.create_pod("recorded", "trainops-r1-train")
        stopped = account.create_pod("stopped", "trainops-r1-eval")
        account.create_pod("orphan", "trainops-lost-run-train")
        account.create_pod("foreign", "someone-elses-notebook")
        volume = emulator.admin(
            "POST", "/v2/network-volumes", {"name": "trainops-r1-data", "size": NETWORK_GB, "dataCenter": "EU-RO-1"}
        )
        account.ids["volume"] = volume["id"]
        for pod_id in account.ids.values():
            if pod_id != volume["id"]:
                emulator.wait_for(pod_id, lambda p: p["status"] == "RUNNING", 30)
        write_state(
            runs,
            "r1",
            [
                (recorded["id"], recorded["name"], "RUNNING"),
                (stopped["id"], stopped["name"], "RUNNING"),
                ("gonepod00001", "trainops-r1-old", "RUNNING"),
            ],
        )
        stop = account.play(
            "teardown.yml",
            teardown_run_id="r1",
            teardown_pod=stopped["id"],
            teardown_action="stop",
            teardown_runs_dir=str(runs),
        )
        before = account.ledger()
        emulator.admin("POST", "/_emulator/clock", {"advance_s": HOURS * 3600})
        after = account.ledger()
        foreign_before = emulator.admin("GET", f"/v2/pods/{account.ids['foreign']}")
        emulator.admin("DELETE", "/_emulator/requests")
        audit = account.play(
            "audit.yml", audit_runs_dir=str(runs), audit_billing_bucket="year", audit_billing_last_n=100
        )
        requests = emulator.admin("GET", "/_emulator/requests")["requests"]
        foreign_after = emulator.admin("GET", f"/v2/pods/{account.ids['foreign']}")
        state_before = (runs / "r1" / "state.json").read_bytes()
        stop_again = account.play(
            "teardown.yml",
            teardown_run_id="r1",
            teardown_pod=stopped["id"],
            teardown_action="stop",
            teardown_runs_dir=str(runs),
        )
        state_after = (runs / "r1" / "state.json").read_bytes()
        yield {
            "account": account,
            "stop": stop,
            "stop_again": (stop_again, state_before, state_after),
            "audit": audit,
            "accrued": {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after},
            "ledger": after,
            "requests": requests,
            "foreign": (foreign_before, foreign_after),
            "runs": runs,
        }


def report(audited: dict[str, Any]) -> dict[str, Any]:
    done = audited["audit"]
    assert done.returncode == 0, explain(done)
    found = sorted(audited["runs"].glob("audit-*/audit.json"))
    assert len(found) == 1, found
    return json.loads(found[0].read_text())


def pod_row(document: dict[str, Any], pod_id: str) -> dict[str, Any]:
    return next(p for p in document["pods"] if p["id"] == pod_id)


def test_stop_states_the_storage_cost_per_month(audited):
    done = audited["stop"]
    ids = audited["account"].ids
    assert done.returncode == 0, explain(done)
    text = re.sub(r"\s+", " ", done.stdout)
    month = VOLUME_GB * STOPPED_GB_MONTH
    assert (
        f"Stopped pod trainops-r1-eval ({ids['stopped']}); status from the API: EXITED. While stopped it bills its "
        f"{VOLUME_GB} GB volume disk at $0.20/GB-month: ${month:.2f} per month" in text
    ), explain(done)
    state = json.loads((audited["runs"] / "r1" / "state.json").read_text())
    assert next(r for r in state["resources"] if r["id"] == ids["stopped"])["status"] == "EXITED"


def test_a_second_stop_changes_nothing(audited):
    done, state_before, state_after = audited["stop_again"]
    assert done.returncode == 0, explain(done)
    assert re.search(r"localhost\s*:\s*ok=\d+\s+changed=0\s", done.stdout), explain(done)
    assert state_after == state_before


def test_audit_finds_the_orphaned_running_pod(audited):
    document = report(audited)
    ids = audited["account"].ids
    orphan = pod_row(document, ids["orphan"])
    assert document["orphans"] == [ids["orphan"]]
    assert orphan["status"] == "RUNNING" and orphan["ours"] and orphan["runs"] == []
    assert orphan["cost_per_hour_now"] == pytest.approx(running_per_hour(), abs=1e-6)
    assert orphan["teardown_command"] == (
        f"ansible-playbook playbooks/teardown.yml -e teardown_run_id=lost-run -e teardown_pod={ids['orphan']}"
        f" -e teardown_confirm={ids['orphan']}"
    )
    assert orphan["teardown_command"] in audited["audit"].stdout
    # What the ledger accrued for it in the 10 hours is 10 times the audit's rate.
    assert audited["accrued"][ids["orphan"]] == pytest.approx(HOURS * orphan["cost_per_hour_now"], rel=1e-3)
    recorded = pod_row(document, ids["recorded"])
    assert not recorded["orphan"] and recorded["runs"] == ["r1"]
    assert document["recorded_but_gone"] == [
        {
            "run_id": "r1",
            "id": "gonepod00001",
            "name": "trainops-r1-old",
            "recorded_status": "RUNNING",
            "terminate_recorded": False,
        }
    ]


def test_audit_states_the_stopped_pods_storage_cost(audited):
    document = report(audited)
    stopped = pod_row(document, audited["account"].ids["stopped"])
    assert stopped["status"] == "EXITED" and stopped["cost_per_hour_api"] == 0.0
    assert stopped["storage_per_month_stopped"] == pytest.approx(VOLUME_GB * STOPPED_GB_MONTH, abs=1e-9)
    per_hour = VOLUME_GB * STOPPED_GB_MONTH / MONTH_H
    assert stopped["cost_per_hour_now"] == pytest.approx(per_hour, abs=1e-6)
    assert audited["accrued"][stopped["id"]] == pytest.approx(HOURS * per_hour, rel=1e-3)
    assert document["totals"]["stopped_storage_per_month"] == pytest.approx(4.0, abs=1e-9)


def test_audit_finds_the_unattached_network_volume(audited):
    document = report(audited)
    volume_id = audited["account"].ids["volume"]
    volume = next(v for v in document["network_volumes"] if v["id"] == volume_id)
    assert document["unattached_volumes"] == [volume_id]
    assert document["orphaned_volumes"] == [volume_id]  # our prefix, and no run recorded it
    assert volume["attached_pods"] == [] and volume["unattached"] and volume["ours"]
    assert (volume["size_gb"], volume["data_center"]) == (NETWORK_GB, "EU-RO-1")
    assert volume["cost_per_month"] == pytest.approx(NETWORK_GB * VOLUME_GB_MONTH, abs=1e-9)
    assert audited["accrued"][volume_id] == pytest.approx(HOURS * NETWORK_GB * VOLUME_GB_MONTH / MONTH_H, rel=1e-3)


def test_audit_totals_and_billing_match_the_ledger(audited):
    document = report(audited)
    expected_hour = (
        3 * running_per_hour() + VOLUME_GB * STOPPED_GB_MONTH / MONTH_H + NETWORK_GB * VOLUME_GB_MONTH / MONTH_H
    )
    assert document["totals"]["per_hour_now"] == pytest.approx(expected_hour, abs=1e-5)
    assert document["totals"]["not_ours_per_hour_now"] == pytest.approx(running_per_hour(), abs=1e-6)
    ledger = audited["ledger"]
    billed = document["billing"]["by_resource"]
    assert set(billed) == set(ledger)
    # The audit read the ledger a few seconds after the test did: at most that much more accrued since.
    for resource, amount in ledger.items():
        assert amount <= billed[resource] <= amount + expected_hour * 120 / 3600, resource
    assert document["billing"]["total_amount"] == pytest.approx(sum(billed.values()), abs=1e-5)
    markdown = next(audited["runs"].glob("audit-*/audit.md")).read_text()
    assert f"| {audited['account'].ids['orphan']} | trainops-lost-run-train | orphan |" in markdown
    assert "none (unattached)" in markdown


def test_audit_lists_the_pod_not_ours_and_touches_nothing(audited):
    document = report(audited)
    foreign_id = audited["account"].ids["foreign"]
    foreign = pod_row(document, foreign_id)
    assert not foreign["ours"] and not foreign["orphan"] and foreign["teardown_command"] is None
    before, after = audited["foreign"]
    assert before["status"] == after["status"] == "RUNNING"
    assert [r for r in audited["requests"] if r["method"] != "GET"] == []
    assert {r["path"] for r in audited["requests"] if foreign_id in r["path"]} <= {f"/v2/pods/{foreign_id}"}


def test_bad_input_is_named_before_any_request(audited):
    account = audited["account"]
    account.emulator.admin("DELETE", "/_emulator/requests")
    audit = account.play(
        "audit.yml",
        audit_runs_dir=str(audited["runs"]),
        audit_billing_bucket="minute",
        audit_billing_start="2026-12-01",
    )
    text = re.sub(r"\s+", " ", audit.stdout)
    assert audit.returncode != 0
    assert "audit_billing_bucket minute must be hour, day, week, month or year." in text, explain(audit)
    assert "give both audit_billing_start and audit_billing_end (RFC 3339), or neither." in text, explain(audit)
    teardown = account.play("teardown.yml", teardown_run_id="../etc", teardown_runs_dir=str(audited["runs"]))
    text = re.sub(r"\s+", " ", teardown.stdout)
    assert teardown.returncode != 0
    assert 'teardown_run_id \'../etc\' must be 1-128 letters, digits, ".", "_" or "-"' in text, explain(teardown)
    assert account.emulator.admin("GET", "/_emulator/requests")["requests"] == []
