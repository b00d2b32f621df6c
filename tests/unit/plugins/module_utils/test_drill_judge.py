# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The drill's judging as pure functions on journals and events held in memory (no file, no plot); the files,
the report and the module are tests/unit/plugins/modules/test_drill_evidence.py's."""

from __future__ import annotations

import ast
import pathlib

from ansible_collections.trainops.gpu.plugins.module_utils import _drill_judge as dj

MODULE_UTILS = pathlib.Path(dj.__file__).parent
T0 = 1_000.0


def journal(losses, wall=None):
    """A Journal as read_journal builds it, from {step: loss} (lr fixed), wall_time T0 + step unless given."""
    built = dj.Journal("/mem/metrics.jsonl")
    built.exists = True
    for step, value in losses.items():
        built.records[step] = {
            "step": step,
            "loss_hex": float(value).hex(),
            "lr_hex": (0.01).hex(),
            "wall_time": (wall or {}).get(step, T0 + step),
        }
        built.order.append(step)
    return built


def test_judge_imports_neither_the_rendering_nor_matplotlib():
    tree = ast.parse((MODULE_UTILS / "_drill_judge.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not [name for name in imported if "matplotlib" in name or "_drill_report" in name], imported
    assert not hasattr(dj, "render_markdown") and not hasattr(dj, "render_png")


def test_equal_journals_compare_equal_and_a_flipped_bit_is_the_first_difference():
    reference = journal({1: 0.5, 2: 0.25, 3: 0.125})
    assert dj.compare_journals(reference, journal({1: 0.5, 2: 0.25, 3: 0.125}))["equal"]
    resumed = journal({1: 0.5, 2: 0.25, 3: 0.125})
    resumed.records[2]["loss_hex"] = "0x1.0000000000001p-2"
    comparison = dj.compare_journals(reference, resumed)
    assert not comparison["equal"] and comparison["first_differing_step"] == 2
    assert comparison["issues"] == [
        (2, "step 2: loss_hex differs (reference 0x1.0000000000000p-2, resumed 0x1.0000000000001p-2)")
    ]


def test_missing_extra_and_duplicate_steps_are_issues_in_step_order():
    reference = journal({1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0})
    resumed = journal({1: 1.0, 4: 1.0, 5: 1.0})
    resumed.duplicates.append(1)
    comparison = dj.compare_journals(reference, resumed)
    assert comparison["missing"] == [2, 3] and comparison["extra"] == [5]
    assert [text for _step, text in comparison["issues"]] == [
        "step 1 recorded more than once",
        "steps 2-3 missing",
        "step 5 not in the reference",
    ]
    assert comparison["steps_compared"] == 2


def test_recovery_figures_from_the_resume_event_after_the_interruption():
    interrupted_at = T0 + 50.0
    # The first life wrote up to step 60; the new life resumed from 40 and wrote 41.. stamped after the restart.
    steps = {s: 1.0 for s in range(1, 101)}
    wall = {s: interrupted_at + 5.0 + (s - 40) for s in range(41, 101)}
    events = [
        {"event": "resume", "step": 20, "time": T0 - 1.0},
        {"event": "start", "time": interrupted_at + 3.0},
        {"event": "resume", "step": 40, "time": interrupted_at + 4.0, "manifest_sha256": "m" * 64},
    ]
    figures = dj.recovery_figures(journal(steps, wall), events, interrupted_at, 60, 0.0)
    assert figures["resumed_from_step"] == 40 and figures["rpo_steps"] == 20
    assert figures["trainer_start_s"] == 3.0 and figures["resume_s"] == 4.0 and figures["rto_s"] == 6.0
    assert figures["first_new_step"] == {"step": 41, "wall_time": interrupted_at + 6.0}
    # A pod clock 2 s ahead: its stamps are 2 s late.
    assert dj.recovery_figures(journal(steps, wall), events, interrupted_at, 60, 2.0)["rto_s"] == 4.0
    # No resume after the interruption: nothing resumed, and a hint about the earlier one.
    figures = dj.recovery_figures(journal(steps), events[:1], interrupted_at, 60, 0.0)
    assert figures["resumed_from_step"] is None and figures["rto_s"] is None
    assert "step 20" in figures["no_resume_hint"]


def test_checkpoint_verdict_vouches_only_for_the_checkpoint_resumed_from():
    entry = {"step": 40, "valid": True, "manifest_sha256": "m" * 64, "loaded": {"ok": True}}
    assert dj.checkpoint_verdict({"checkpoints": [entry]}, 40, "m" * 64) == (
        True,
        "step-00000040 verified (every file's sha256 checked, loaded)",
    )
    verified, detail = dj.checkpoint_verdict({"checkpoints": [entry]}, 40, "n" * 64)
    assert not verified and "resumed from manifest nnnnnnnnnnnn" in detail
    verified, detail = dj.checkpoint_verdict(
        {"checkpoints": [dict(entry, valid=False, errors=["model.pt sha256"])]}, 40, None
    )
    assert not verified and detail.endswith("step-00000040: model.pt sha256")
    assert dj.checkpoint_verdict(None, 40, None)[0] is False
    assert dj.checkpoint_verdict({"valid": True, "newest_valid_step": 40}, 40, None)[0] is True
    assert dj.checkpoint_verdict({}, None, None) == (False, "no checkpoint was resumed from")


def test_float_bits_and_step_ranges_are_plain_functions():
    assert dj.float_bits("0x1.8p-1") == dj.float_bits("0x1.8000000000000p-1")
    assert dj.float_bits("-0x0.0p+0") != dj.float_bits("0x0.0p+0")
    assert dj.float_bits("nope") is None and dj.float_bits(None) is None
    assert dj.step_ranges([7, 1, 2, 3]) == "1-3, 7"


def test_loss_series_is_data_for_the_plot_in_step_order():
    built = journal({3: 0.5, 1: 2.0, 2: 1.0})
    built.records[2]["loss_hex"] = "garbage"
    built.records[2]["loss"] = "1.5"
    assert dj.loss_series(built) == [(1, 2.0), (2, 1.5), (3, 0.5)]


def test_a_dead_lifes_lines_past_the_resume_point_are_dropped_and_the_new_lifes_judged():
    """A trainer that appends across lives keeps the killed life's steps 4-5; the new life's are judged."""
    built = dj.Journal("/mem/metrics.jsonl")
    lines = [{"step": s, "loss_hex": float(s).hex(), "wall_time": T0 + s} for s in range(1, 6)]
    lines += [{"step": s, "loss_hex": float(s * 10).hex(), "wall_time": T0 + 20 + s} for s in (4, 5)]
    dj._add_lines(built, lines)
    assert built.duplicates == [4, 5] and built.records[4]["loss_hex"] == float(4).hex()
    kept, dead = dj.drop_dead_lines(built, {"event": "resume", "step": 3, "time": T0 + 20})
    assert dead == [4, 5] and kept.duplicates == [] and kept.steps == [1, 2, 3, 4, 5]
    assert kept.records[4]["loss_hex"] == float(40).hex() and built.duplicates == [4, 5]  # the input is kept
    assert dj.drop_dead_lines(built, {"step": 3})[1] == []  # no time: nothing can be told apart
    assert dj.drop_dead_lines(kept, {"step": 3, "time": T0 + 20})[0] is kept


def test_an_unsealed_checkpoint_is_named_with_how_to_seal_it():
    verify = {
        "checkpoints": [
            {
                "path": "/runs/x/ckpt/step-20.pt",
                "step": None,
                "valid": False,
                "errors": ["step-20.pt.SHA256SUMS missing: not sealed"],
            }
        ]
    }
    verified, detail = dj.checkpoint_verdict(verify, 20, None, "step-20.pt")
    assert verified is False
    assert detail.startswith("checkpoint used is not sealed: step-20.pt: step-20.pt.SHA256SUMS missing: not sealed; ")
    assert "trainops_train.hooks" in detail and "docs/trainer_contract.md" in detail
    assert dj.verify_entry(verify, 20, "step-20.pt") is verify["checkpoints"][0]
    assert dj.verify_entry(verify, 20, "step-40.pt") is None
    sealed = {"checkpoints": [{"path": "/c/checkpoint-20", "step": 20, "valid": True, "manifest_sha256": "a" * 64}]}
    assert dj.checkpoint_verdict(sealed, 20, None, "checkpoint-20") == (
        True,
        "checkpoint-20 verified (every file's sha256 checked)",
    )


def test_the_venv_summary_holds_what_provenance_recorded_and_each_bootstrap():
    recorded = {"requirements": "requirements.txt", "key": "k1", "python": "/v/bin/python", "freeze": ["a==1"]}
    provenance = {"venv": recorded}
    modes = [
        {"mode": "kill", "venv": None},
        {"mode": "stop_start", "venv": {"state": "reused", "seconds": 0.4, "key": "k1"}},
    ]
    summary = dj.venv_summary(provenance, {"state": "built", "seconds": 9.5, "key": "k1"}, modes)
    assert summary["freeze"] == ["a==1"] and summary["key"] == "k1"
    assert summary["lives"] == [
        {"life": "reference", "state": "built", "seconds": 9.5, "key": "k1"},
        {"life": "stop_start", "state": "reused", "seconds": 0.4, "key": "k1"},
    ]
    assert dj.venv_summary({"venv": None}, None, [{"mode": "kill", "venv": None}]) is None
    assert dj.venv_summary(None, None, []) is None
