# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The run_state module on real files: present, query, check mode, idempotence, refusals."""

from __future__ import annotations

import json
import os

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.trainops.gpu.plugins.modules import run_state as module


def run_module(capsys, args, check_mode=False, diff=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    if diff:
        args = dict(args, _ansible_diff=True)
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        module.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


@pytest.fixture
def runs(tmp_path):
    return tmp_path / "runs"


POD = {"kind": "pod", "id": "p1", "name": "trainops-r1-drill", "role": "drill", "action": "created"}


def test_present_writes_then_reports_no_change(runs, capsys):
    args = {"runs_dir": str(runs), "run_id": "r1", "resources": [dict(POD, status="RUNNING")], "run": {"api_url": "u"}}
    rc, result = run_module(capsys, args)
    path = runs / "r1" / "state.json"
    assert rc == 0 and result["changed"] is True and result["state_file"] == str(path)
    assert json.loads(path.read_text()) == result["state"]
    assert result["state"]["resources"][0]["role"] == "drill" and result["state"]["api_url"] == "u"
    rc, again = run_module(capsys, args)
    assert rc == 0 and again["changed"] is False and again["state"] == result["state"]
    rc, status = run_module(capsys, dict(args, resources=[{"kind": "pod", "id": "p1", "status": "EXITED"}]), diff=True)
    assert status["changed"] is True and status["state"]["resources"][0]["status"] == "EXITED"
    assert status["diff"]["before"]["resources"][0]["status"] == "RUNNING"


def test_check_mode_writes_nothing(runs, capsys):
    rc, result = run_module(capsys, {"runs_dir": str(runs), "run_id": "r1", "resources": [POD]}, check_mode=True)
    assert rc == 0 and result["changed"] is True and result["state"]["resources"][0]["id"] == "p1"
    assert not runs.exists()


def test_query_reads_and_a_missing_file_is_empty(runs, capsys):
    rc, result = run_module(capsys, {"runs_dir": str(runs), "run_id": "r1", "state": "query"})
    assert rc == 0 and result == dict(result, changed=False, state={}) and not runs.exists()
    run_module(capsys, {"runs_dir": str(runs), "run_id": "r1", "resources": [POD]})
    rc, result = run_module(capsys, {"path": str(runs / "r1" / "state.json"), "state": "query"})
    assert rc == 0 and result["state"]["run_id"] == "r1" and result["changed"] is False


def test_path_takes_the_run_id_from_the_file_or_its_directory(runs, capsys):
    path = runs / "r7" / "state.json"
    rc, result = run_module(capsys, {"path": str(path), "resources": [POD]})
    assert rc == 0 and result["state"]["run_id"] == "r7"
    rc, result = run_module(capsys, {"path": str(path), "run_id": "other", "resources": [POD]})
    assert rc == 1 and "belongs to run 'r7', not 'other'" in result["msg"]


@pytest.mark.parametrize(
    "args, message",
    [
        ({"run_id": "r1", "resources": [dict(POD, api_key="x")]}, "resources[0].api_key"),
        ({"run_id": "r1", "resources": [{"kind": "pod"}]}, "resources[0] needs id"),
        ({"run_id": "../r1"}, "run_id '../r1' must be 1-128 letters"),
        ({}, "run_id is required with runs_dir"),
        ({"run_id": "r1", "run": {"resources": []}}, "run must not set resources"),
        ({"run_id": "r1", "lock_timeout": 0}, "lock_timeout must be 1 to 600"),
    ],
)
def test_bad_input_fails_naming_it_and_writes_nothing(runs, capsys, args, message):
    rc, result = run_module(capsys, dict(args, runs_dir=str(runs)))
    assert rc == 1 and result["failed"] and message in result["msg"], result
    assert not runs.exists()


def test_a_refused_secret_value_never_reaches_the_output(runs, capsys):
    secret = "hf_s3cr3t_value_42"
    resources = [dict(POD, hf_token=secret, final={"credentials": {"user": "u-" + secret}})]
    args = {"runs_dir": str(runs), "run_id": "r1", "resources": resources}
    with patch_module_args(args), pytest.raises(SystemExit):
        module.main()
    output = capsys.readouterr().out
    result = json.loads(output)
    assert result["failed"] and "resources[0].hf_token" in result["msg"] and "final.credentials" in result["msg"]
    assert secret not in output
    assert not os.path.exists(str(runs / "r1" / "state.json"))
