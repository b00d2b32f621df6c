# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Runs on the controller (the drill_verdict callback); standard library only.
# ruff: noqa: UP004, UP009, UP031, RUF100
"""The resume drill's verdict as a person reads it at the end of a run: one row per mode and the evidence files.

``verdict_lines(evidence, plan)`` takes trainops.gpu.drill_evidence's result (``passed``, ``modes``, ``report``)
and the drill's plan (``run_id``, ``emulator``, ``api_url``) and returns the lines to print, the verdict last
but for the evidence paths and, on the emulator, how to stop it.
"""

from __future__ import absolute_import, division, print_function

HEADER = ("mode", "result", "RTO", "RPO", "resumed from")


def _seconds(value):
    return "%.1f s" % value if isinstance(value, (int, float)) else "-"


def _steps(value):
    return ("%d step" if value == 1 else "%d steps") % value if isinstance(value, int) else "-"


def _step(value):
    return "step %d" % value if isinstance(value, int) else "-"


def mode_rows(modes):
    # type: (list) -> list
    """(mode, result, RTO, RPO, resumed from) for each mode, as text."""
    rows = []
    for mode in modes or []:
        checkpoint = mode.get("checkpoint") or {}
        resumed = _step(mode.get("resumed_from_step"))
        if checkpoint.get("name") and resumed != "-":
            how = "verified" if checkpoint.get("verified") else "NOT verified"
            resumed += " (%s, %s)" % (checkpoint["name"], "unsealed" if checkpoint.get("sealed") is False else how)
        rows.append(
            (
                str(mode.get("mode", "?")),
                str(mode.get("status", "?")),
                _seconds(mode.get("rto_s")),
                _steps(mode.get("rpo_steps")),
                resumed,
            )
        )
    return rows


def table(rows):
    # type: (list) -> list
    widths = [max(len(row[i]) for row in [HEADER, *rows]) for i in range(len(HEADER))]
    line = "  ".join("%-*s" % (widths[i], HEADER[i]) for i in range(len(HEADER))).rstrip()
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join("%-*s" % (widths[i], row[i]) for i in range(len(row))).rstrip() for row in rows]
    return out


def verdict_lines(evidence, plan=None, emulator_state_dir=""):
    # type: (dict, dict | None, str) -> list
    plan = plan or {}
    modes = evidence.get("modes") or []
    failed = [m.get("mode", "?") for m in modes if m.get("status") != "PASS"]
    run_id = plan.get("run_id") or evidence.get("run_id") or "?"
    if evidence.get("passed") and not failed:
        verdict = "Resume drill %s: PASS, %d of %d modes, every one bit-identical to the reference" % (
            run_id,
            len(modes),
            len(modes),
        )
    else:
        verdict = "Resume drill %s: FAIL, %d of %d modes failed (%s)" % (
            run_id,
            len(failed),
            len(modes),
            ", ".join(failed) or "the evidence was not judged",
        )
    lines = ["", "RESUME DRILL VERDICT " + "*" * 59]
    lines += table(mode_rows(modes))
    lines += ["", verdict]
    for mode in modes:
        if mode.get("status") != "PASS" and mode.get("reason"):
            lines.append("  %s: %s" % (mode.get("mode", "?"), mode["reason"]))
    report = evidence.get("report") or {}
    for key, label in (("md", "report.md  "), ("json", "report.json"), ("png", "loss.png   ")):
        if report.get(key):
            lines.append("  %s %s" % (label, report[key]))
    if plan.get("emulator") in (True, "True", "true"):
        where = plan.get("api_url") or "the local emulator"
        stop = "make emulator-stop"
        if emulator_state_dir:
            stop += " EMULATOR_STATE=%s" % emulator_state_dir
        lines.append("The emulator that served this drill (%s) is still running: stop it with `%s`." % (where, stop))
    return lines
