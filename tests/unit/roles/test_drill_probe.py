# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The resume drill's probe (roles/resume_drill/files/drill_probe.py, run on the pod): a trainer's events are
input, so a malformed resume event is named, never a crash."""

from __future__ import annotations

import importlib.util
import json
import pathlib

PROBE = pathlib.Path(__file__).resolve().parents[3] / "roles" / "resume_drill" / "files" / "drill_probe.py"
SPEC = importlib.util.spec_from_file_location("drill_probe", PROBE)
probe = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(probe)


def test_the_first_resume_after_the_interruption_with_what_is_wrong_in_it(tmp_path):
    events = tmp_path / "events.jsonl"
    lines = [
        {"event": "resume", "time": 5.0, "step": 10, "path": "/ckpt/step-10.pt"},  # before the interruption
        {"event": "resume", "time": "soon", "step": 20},  # no usable time: never "after"
        {"event": "resume", "time": None},
        "not an object",
        {"event": "resume", "time": 50.0, "step": "30", "path": None},
        {"event": "resume", "time": 60.0, "step": 40, "path": "/ckpt/step-40.pt"},
    ]
    events.write_text("".join(json.dumps(line) + "\n" for line in lines) + "{torn")
    found = probe.resume_after(str(events), 10.0)
    assert found["time"] == 50.0 and found["problems"] == [
        'the resume event\'s step is "30", not an integer',
        "the resume event's path is null, not the checkpoint's path",
    ]
    assert probe.resume_after(str(events), 55.0)["problems"] == []
    assert probe.resume_after(str(events), 99.0) is None
    assert probe.resume_after(str(tmp_path / "missing.jsonl"), 0.0) is None
