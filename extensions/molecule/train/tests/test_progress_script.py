"""roles/train/files/train_progress.py on hand-made journals (runs on the controller with the verifier)."""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
from pathlib import Path

import pytest

PROJECT = Path(os.environ.get("MOLECULE_PROJECT_DIRECTORY") or Path(__file__).resolve().parents[4])
SCRIPT = PROJECT / "roles/train/files/train_progress.py"
T0 = 1_800_000_000.0


@pytest.fixture(scope="module")
def progress():
    spec = importlib.util.spec_from_file_location("train_progress", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def iso(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).isoformat(timespec="milliseconds")


def line(step: int, wall: float) -> str:
    return json.dumps({"step": step, "loss": "0.5", "wall_time": wall}) + "\n"


def run(progress, tmp_path: Path, metrics: str, events: str, started: str, capsys) -> dict:
    (tmp_path / "m.jsonl").write_text(metrics)
    (tmp_path / "e.jsonl").write_text(events)
    assert progress.main(["x", str(tmp_path / "m.jsonl"), str(tmp_path / "e.jsonl"), started]) == 0
    return json.loads(capsys.readouterr().out)


def test_torn_last_line_is_skipped(progress, tmp_path, capsys):
    metrics = line(1, T0) + line(2, T0 + 1) + '{"step": 3, "lo'
    out = run(progress, tmp_path, metrics, "", iso(T0 - 5), capsys)
    assert out["last"]["step"] == 2 and out["rate"] == pytest.approx(1.0)


def test_rate_and_resume_count_only_this_life(progress, tmp_path, capsys):
    # First life: steps 1-10 at 10 steps/s; resumed from 8 after a 100 s gap, at 2 steps/s.
    metrics = "".join(line(s, T0 + s / 10) for s in range(1, 9))
    metrics += "".join(line(8 + k, T0 + 100 + k / 2) for k in range(1, 7))
    events = json.dumps({"event": "resume", "step": 3, "time": T0 - 50}) + "\n"
    events += json.dumps({"event": "save_end", "step": 8, "seconds": 0.01, "time": T0 + 0.9}) + "\n"
    events += json.dumps({"event": "resume", "step": 8, "time": T0 + 99.5}) + "\n"
    out = run(progress, tmp_path, metrics, events, iso(T0 + 99), capsys)
    assert out["last"]["step"] == 14 and out["life_steps"] == 6
    assert out["rate"] == pytest.approx(2.0)
    assert out["resume"]["step"] == 8 and out["last_save"]["step"] == 8 and out["last_save"]["seconds"] == 0.01


def test_missing_files_and_no_start_time(progress, tmp_path, capsys):
    assert progress.main(["x", str(tmp_path / "none"), str(tmp_path / "none2"), ""]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"last": None, "rate": None, "life_steps": 0, "last_save": None, "resume": None}


def test_long_journal_is_read_from_its_tail(progress, tmp_path, capsys):
    metrics = "".join(line(s, T0 + s) for s in range(1, 20001))  # about 1 MiB: the read starts mid-line
    out = run(progress, tmp_path, metrics, "", "", capsys)
    assert out["last"]["step"] == 20000 and out["rate"] == pytest.approx(1.0)
    assert 0 < out["life_steps"] < 20000


def test_a_save_end_event_is_input_read_field_by_field(progress, tmp_path, capsys):
    # A user's trainer: no seconds, a bytes count as a string, an unknown field; then one with no step at all.
    events = json.dumps({"event": "save_end", "step": 8, "bytes": "12 MB", "path": "ckpt/8.pt", "time": T0}) + "\n"
    out = run(progress, tmp_path, line(8, T0), events, "", capsys)
    assert out["last_save"] == {
        "step": 8, "seconds": None, "stalled_s": None, "next_interval_s": None, "bytes": None,
        "problems": ['save_end bytes is "12 MB", not a number'],
    }  # fmt: skip
    events += json.dumps({"event": "save_end", "time": T0 + 1}) + "\n"
    out = run(progress, tmp_path, line(8, T0), events, "", capsys)
    assert out["last_save"]["step"] is None and out["last_save"]["problems"] == ["save_end has no step"]
