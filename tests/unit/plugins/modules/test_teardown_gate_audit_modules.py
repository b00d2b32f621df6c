# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The teardown_gate module's answer shape, and which state.json files runpod_audit_info reads."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.trainops.gpu.plugins.modules import runpod_audit_info, teardown_gate

POD = {"id": "p1", "name": "trainops-r1-train", "status": "EXITED"}


def run_gate(capsys, args):
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        teardown_gate.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


def test_the_gate_returns_ok_errors_and_checks_and_changes_nothing(capsys):
    rc, result = run_gate(capsys, {"pod": POD, "reachable": False, "start_stopped": True, "_ansible_check_mode": True})
    assert rc == 0 and result["changed"] is False and result["ok"] is False and result["checks"] == {}
    assert len(result["errors"]) == 2 and "(check mode starts nothing)" in result["errors"][0]
    assert result["errors"][1].startswith("teardown_confirm is empty")
    args = {"pod": POD, "reachable": False, "allow_no_known_checkpoint": True, "confirm": "p1"}
    rc, result = run_gate(capsys, dict(args, controller_has=["step-00000002"]))
    assert rc == 0 and result["ok"] is True and result["errors"] == [] and result["newest"] is None
    assert result["would_lose"]["read"] is False and result["would_lose"]["controller_has"] == ["step-00000002"]
    assert "deprecations" not in result
    # The old name still works, with a deprecation naming the new one.
    del args["allow_no_known_checkpoint"]
    rc, result = run_gate(capsys, dict(args, allow_no_checkpoint=True))
    assert rc == 0 and result["ok"] is True
    (deprecation,) = result["deprecations"]
    assert "Alias 'allow_no_checkpoint' is deprecated" in json.dumps(deprecation) and deprecation["version"] == "1.0.0"


def test_the_audit_reads_state_json_in_runs_dir_and_one_level_below(tmp_path):
    for rel in ("state.json", "r1/state.json", "r2/state.json", "r1/deep/state.json", "r3/other.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("{}")
    (tmp_path / "r4").mkdir()
    (tmp_path / "r4" / "state.json").symlink_to(tmp_path / "r1" / "state.json")
    found = runpod_audit_info.state_files(str(tmp_path) + "/")
    assert found == [str(tmp_path / "r1/state.json"), str(tmp_path / "r2/state.json"), str(tmp_path / "state.json")]
    assert runpod_audit_info.state_files(str(tmp_path / "missing")) == []
