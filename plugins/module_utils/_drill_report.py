# -*- coding: utf-8 -*-
# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Runs on the controller through AnsiballZ (Python >= 3.8, standard library only; matplotlib is imported
# only by render_png, and only when a plot is drawn).
# ruff: noqa: UP004, UP009, UP031, RUF100
"""The resume drill's evidence files, rendered from the report ``_drill_judge.build_report`` made:
``render_markdown(report)`` its ten-second table (report.md), ``render_png(report, series)`` the loss plot
(loss.png), ``report_json_bytes(report)`` report.json; and their writing: only the files whose bytes
change, atomically, a second run on the same report changing nothing (``keep_volatile``).
"""

from __future__ import annotations

import json
import os

from ansible_collections.trainops.gpu.plugins.module_utils._drill_judge import CLOCK_NOTE, FAIL, PASS, read_json_file
from ansible_collections.trainops.gpu.plugins.module_utils._source_verify import same_bytes

REPORT_JSON_NAME = "report.json"
REPORT_MD_NAME = "report.md"
LOSS_PNG_NAME = "loss.png"
# Points per line in the plot; longer journals are thinned evenly (every point stays in the comparison).
MAX_PLOT_POINTS = 20000
# Keys of report.json that change on every run although nothing else did; kept from an existing report
# whose other keys are equal, so that a second run changes nothing.
VOLATILE_KEYS = ("generated_at",)


class PlotLibraryMissing(Exception):
    """matplotlib is not importable by the controller's Python."""


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


# ------------------------------------------------------------------------------------------- rendering


def _cell(value, digits=None):
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if digits is not None and isinstance(value, (int, float)):
        return "%.*f" % (digits, value)
    return str(value).replace("|", "\\|").replace("\n", " ")


def _clock_cell(clock):
    if clock["source"] != "measured":
        return "not measured (taken as equal)"
    error = "± %.3f" % clock["error_s"] if clock["error_s"] is not None else "error unknown"
    return "pod %+.3f s %s" % (clock["offset_s"], error)


def _hash_cell(value):
    return "`%s`" % value if value else "unknown"


def _config_hash_phrase(report):
    """The config hash that ran and what provenance.json says of it, for report.md's Source line."""
    ran = report.get("config_hash")
    recorded = (report.get("provenance") or {}).get("config_hash")
    if not ran:
        return "config hash unknown"
    if not recorded:
        return "config hash `%s` (the trainer's; provenance.json records none)" % ran
    if recorded != ran:
        return "config hash `%s` ran; provenance.json records `%s`" % (ran, recorded)
    return "config hash `%s`" % ran


def plot_title(report):
    """loss.png's title: the run, its verdict and the config hash that ran, then how to read the marks."""
    return "run %s: %s, config hash %s\n(dotted: last step before the interruption; dot: step resumed from)" % (
        report["run_id"],
        PASS if report["passed"] else FAIL,
        report.get("config_hash") or "unknown",
    )


def render_markdown(report):
    """report.md: the verdict table first, then phase timings, wall time and per-mode details."""
    verdict = "PASS" if report["passed"] else "FAIL"
    lines = [
        "# Resume drill %s: %s" % (report["run_id"], verdict),
        "",
        "| mode | result | RTO s | RPO steps | resumed from | checkpoint verified | journal | weights | reason |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in report["modes"]:
        journal = m["journal"]
        if journal["equal"] is None:
            journal_cell = "-"
        elif journal["equal"]:
            journal_cell = "identical (%d steps)" % journal["steps_compared"]
        else:
            journal_cell = "differs at step %s" % _cell(m["first_differing_step"])
        weights = m["weights"]["equal"]
        lines.append(
            "| %s |"
            % " | ".join(
                [
                    _cell(m["mode"]),
                    "**%s**" % m["status"],
                    _cell(m["rto_s"], 2),
                    _cell(m["rpo_steps"]),
                    _cell(m["resumed_from_step"]),
                    "unsealed" if m["checkpoint"].get("sealed") is False else _cell(m["checkpoint"]["verified"]),
                    journal_cell,
                    "-" if weights is None else ("identical" if weights else "differ"),
                    _cell(m["reason"]),
                ]
            )
        )
    lines += ["", "## Phases", "", "| phase | seconds |", "|---|---|"]
    for phase, seconds in (report.get("phases") or {}).items():
        lines.append("| %s | %s |" % (_cell(phase), _cell(seconds, 1)))
    lines.append("| **wall time** | %s |" % _cell(report.get("wall_s"), 1))
    ref = report["reference"]
    lines += [
        "",
        "## Details",
        "",
        "Reference: %d steps (%s to %s), config hash %s, final weights sha256 `%s`."
        % (
            ref["steps"],
            ref["first_step"],
            ref["last_step"],
            _hash_cell(report.get("config_hash")),
            ref["weights_sha256"],
        ),
    ]
    prov = report.get("provenance")
    if prov:
        lines.append(
            "Source: commit `%s`, dirty %s; %s; command `%s`."
            % (prov.get("commit"), _cell(prov.get("dirty")), _config_hash_phrase(report), _cell(prov.get("command")))
        )
    if report.get("venv"):
        lines.append(_venv_line(report["venv"]))
    lines += [
        "",
        "| mode | interrupted at (UTC) | last step before | trainer start s | resume s | pod before | pod after | "
        "clock | timings |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m in report["modes"]:
        pods = m["pods"]
        timings = ", ".join("%s %s s" % (k, _cell(v, 1)) for k, v in m["timings"].items())
        clock = m["clock"]
        clock_cell = _clock_cell(clock)
        lines.append(
            "| %s |"
            % " | ".join(
                [
                    _cell(m["mode"]),
                    _cell(m["interrupted_at_utc"]),
                    _cell(m["last_step_before"]),
                    _cell(m["trainer_start_s"], 2),
                    _cell(m["resume_s"], 2),
                    "%s:%s" % (_cell(pods["before"]["id"]), _cell(pods["before"]["port"])),
                    "%s:%s" % (_cell(pods["after"]["id"]), _cell(pods["after"]["port"])),
                    clock_cell,
                    _cell(timings or None),
                ]
            )
        )
    notes = [(m["mode"], note) for m in report["modes"] for note in m["notes"]]
    if notes:
        lines += ["", "Notes:", ""] + ["- %s: %s" % (mode, _cell(note)) for mode, note in notes]
    lines += ["", "RTO: interruption (controller clock) to the first new journal step (pod clock). " + CLOCK_NOTE + "."]
    return "\n".join(lines) + "\n"


def _venv_line(venv):
    """report.md's line on the requirements venv: what it holds and what each bootstrap did with it."""
    freeze = venv.get("freeze")
    held = (
        "%d package%s beyond the image's (%s)"
        % (len(freeze), "" if len(freeze) == 1 else "s", ", ".join("`%s`" % _cell(line) for line in freeze))
        if isinstance(freeze, list)
        else "its packages not recorded"
    )
    lives = "; ".join(
        "%s %s in %s s" % (_cell(life.get("life")), _cell(life.get("state")), _cell(life.get("seconds"), 1))
        for life in venv.get("lives") or []
    )
    return "Requirements: `%s` in venv `%s` (`%s`), %s; bootstraps: %s." % (
        _cell(venv.get("requirements")),
        _cell(venv.get("key")),
        _cell(venv.get("python")),
        held,
        lives or "none recorded",
    )


def _thin(points):
    if len(points) <= MAX_PLOT_POINTS:
        return points
    stride = -(-len(points) // MAX_PLOT_POINTS)
    return points[::stride] + ([points[-1]] if (len(points) - 1) % stride else [])


def render_png(report, series):
    """loss.png as bytes: loss against step for the reference and each resumed run, the interruption (last
    step before it) and the step resumed from marked; below, each run's loss minus the reference's."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise PlotLibraryMissing(str(exc)) from exc
    import io

    figure = Figure(figsize=(10, 6.5), dpi=100)
    top, bottom = figure.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    reference = _thin(series["reference"])
    ref_by_step = dict(series["reference"])
    if reference:
        top.plot([p[0] for p in reference], [p[1] for p in reference], color="0.6", linewidth=3, label="reference")
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive"]
    for index, mode in enumerate(report["modes"]):
        color = colors[index % len(colors)]
        points = _thin(series["modes"].get(mode["mode"]) or [])
        label = "%s (%s)" % (mode["mode"], mode["status"])
        if points:
            steps, losses = [p[0] for p in points], [p[1] for p in points]
            top.plot(steps, losses, color=color, linewidth=1, linestyle="--", label=label)
            diffs = [(s, v - ref_by_step[s]) for s, v in points if s in ref_by_step]
            bottom.plot([d[0] for d in diffs], [d[1] for d in diffs], color=color, linewidth=1, label=mode["mode"])
        if _is_int(mode.get("last_step_before")):
            top.axvline(mode["last_step_before"], color=color, linestyle=":", linewidth=1)
        resumed = mode.get("resumed_from_step")
        if _is_int(resumed) and resumed in ref_by_step:
            top.plot(
                [resumed],
                [ref_by_step[resumed]],
                marker="o",
                markersize=9,
                markeredgecolor="black",
                color=color,
                linestyle="none",
                zorder=5,
            )
    top.set_ylabel("loss")
    top.set_title(plot_title(report), fontsize=10)
    top.grid(True, alpha=0.3)
    top.legend(fontsize=8, loc="upper right")
    bottom.axhline(0.0, color="0.6", linewidth=1)
    bottom.set_ylabel("resumed - reference")
    bottom.set_xlabel("step")
    bottom.grid(True, alpha=0.3)
    figure.tight_layout()
    buffer = io.BytesIO()
    # No Software key: the same report gives the same bytes, so a second run changes nothing.
    figure.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


# --------------------------------------------------------------------------------------------- writing


def keep_volatile(report, existing_path):
    """Carry VOLATILE_KEYS over from the report already at ``existing_path`` when nothing else differs."""
    existing, error = read_json_file(existing_path)
    if error:
        return report
    stripped = dict((k, v) for k, v in report.items() if k not in VOLATILE_KEYS)
    old = dict((k, v) for k, v in existing.items() if k not in VOLATILE_KEYS)
    if json.loads(json.dumps(stripped)) == old:
        for key in VOLATILE_KEYS:
            if key in existing:
                report[key] = existing[key]
    return report


def report_json_bytes(report):
    return (json.dumps(report, indent=2, sort_keys=True, allow_nan=False) + "\n").encode("utf-8")


def files_to_change(files):
    """The (path, bytes) pairs whose file does not already hold those bytes."""
    return [(path, data) for path, data in files if not same_bytes(path, data)]


def write_files(directory, files, atomic_write):
    """Write each (path, bytes) with ``atomic_write(path, writer)``, creating ``directory`` first."""
    if not os.path.isdir(directory):
        os.makedirs(directory)
    for path, data in files:
        atomic_write(path, lambda handle, data=data: handle.write(data))
