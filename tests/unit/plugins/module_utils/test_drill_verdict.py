# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The drill's verdict lines (the drill_verdict callback prints them after the play recap)."""

from __future__ import annotations

from ansible_collections.trainops.gpu.plugins.module_utils._drill_verdict import mode_rows, verdict_lines

REPORT = {"md": "/r/e/evidence/report.md", "json": "/r/e/evidence/report.json", "png": "/r/e/evidence/loss.png"}


def mode(name, status="PASS", **fields):
    base = {"mode": name, "status": status, "rto_s": 4.25, "rpo_steps": 20, "resumed_from_step": 100,
            "checkpoint": {"name": "step-00000100", "verified": True}}  # fmt: skip
    base.update(fields)
    return base


def test_a_passing_drill_ends_with_the_table_the_verdict_and_the_paths():
    evidence = {"passed": True, "modes": [mode("kill"), mode("recreate", rto_s=12.0)], "report": REPORT}
    lines = verdict_lines(evidence, {"run_id": "e1", "emulator": False})
    header = lines.index(next(line for line in lines if line.startswith("mode")))
    assert lines[header].split() == ["mode", "result", "RTO", "RPO", "resumed", "from"]
    assert lines[header + 2].split()[:6] == ["kill", "PASS", "4.2", "s", "20", "steps"]
    assert "step 100 (step-00000100, verified)" in lines[header + 2]
    assert lines[header + 3].split()[:3] == ["recreate", "PASS", "12.0"]
    assert "Resume drill e1: PASS, 2 of 2 modes, every one bit-identical to the reference" in lines
    assert lines[-3:] == [
        "  report.md   /r/e/evidence/report.md",
        "  report.json /r/e/evidence/report.json",
        "  loss.png    /r/e/evidence/loss.png",
    ]


def test_a_failed_mode_is_named_with_its_reason():
    evidence = {
        "passed": False,
        "modes": [mode("kill"), mode("sigterm", "FAIL", reason="journal differs at step 57", rto_s=None)],
        "report": REPORT,
    }
    lines = verdict_lines(evidence, {"run_id": "e2"})
    assert "Resume drill e2: FAIL, 1 of 2 modes failed (sigterm)" in lines
    assert "  sigterm: journal differs at step 57" in lines
    row = next(line for line in lines if line.startswith("sigterm"))
    assert row.split()[:3] == ["sigterm", "FAIL", "-"]


def test_an_unverified_checkpoint_and_missing_figures_are_shown_as_such():
    rows = mode_rows([mode("kill", checkpoint={"name": "step-00000050", "verified": False}), {"mode": "no_gpu"}])
    assert rows[0][4] == "step 100 (step-00000050, NOT verified)"
    assert rows[1] == ("no_gpu", "?", "-", "-", "-")
    assert mode_rows([mode("sigterm", rpo_steps=1)])[0][3] == "1 step"


def test_on_the_emulator_the_last_line_says_it_still_runs_and_how_to_stop_it():
    evidence = {"passed": True, "modes": [mode("kill")], "report": REPORT}
    plan = {"run_id": "e3", "emulator": True, "api_url": "http://127.0.0.1:4321/v2"}
    assert verdict_lines(evidence, plan)[-1] == (
        "The emulator that served this drill (http://127.0.0.1:4321/v2) is still running: stop it with "
        "`make emulator-stop`."
    )
    last = verdict_lines(evidence, plan, emulator_state_dir="/tmp/emu")[-1]
    assert last.endswith("`make emulator-stop EMULATOR_STATE=/tmp/emu`.")
