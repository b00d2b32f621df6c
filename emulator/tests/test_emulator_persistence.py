"""State survives restarts and crashes; one emulator per state directory."""

from __future__ import annotations

import pytest
from emulator_helpers import gpu_pod_body
from runpod_emulator.testing import EmulatorProcess


def test_second_emulator_on_the_same_state_dir_is_refused(tmp_path):
    with EmulatorProcess(backend="memory", state_dir=tmp_path / "emu"):
        second = EmulatorProcess(backend="memory", state_dir=tmp_path / "emu", startup_timeout_s=10)
        with pytest.raises(RuntimeError, match="in use by emulator pid"):
            second.start()


def test_a_killed_emulator_loses_no_record(tmp_path):
    emu = EmulatorProcess(backend="memory", state_dir=tmp_path / "emu")
    try:
        emu.start()
        keys = {"keys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB7v0vbBPx6cRvtmn4rEyQcW1cBW3fF+Zd9U1ySiagsM a@b"]}
        emu.admin("PUT", "/v2/account/ssh-keys", keys)
        volume = emu.admin("POST", "/v2/network-volumes", {"name": "v", "size": 10, "dataCenter": "EU-SE-1"})
        pods = [emu.admin("POST", "/v2/pods", gpu_pod_body(name=f"p{i}")) for i in range(5)]
        emu.wait_for(pods[0]["id"], lambda p: p["status"] == "RUNNING")
        emu.admin("POST", f"/v2/pods/{pods[0]['id']}/action", {"action": "stop"})
        emu.admin("DELETE", f"/v2/pods/{pods[1]['id']}")
        before = {p["id"]: p["status"] for p in emu.admin("GET", "/v2/pods")["pods"]}
        emu.kill()
        emu.start()
        after = {p["id"]: p["status"] for p in emu.admin("GET", "/v2/pods")["pods"]}
        assert set(after) == set(before) == {p["id"] for p in pods} - {pods[1]["id"]}
        assert after[pods[0]["id"]] == "EXITED"
        assert emu.admin("GET", f"/v2/network-volumes/{volume['id']}") == volume
        assert emu.admin("GET", "/v2/account/ssh-keys") == keys
        for pod in pods[2:]:
            emu.wait_for(pod["id"], lambda p: p["status"] == "RUNNING")
        billed = emu.admin("GET", "/v2/billing/pods")["metadata"]["uniquePodCount"]
        assert billed == 5  # the terminated pod's cost stays in the ledger
    finally:
        emu.close()
