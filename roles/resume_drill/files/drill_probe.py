# Copyright: trainops.gpu contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Pod-side probe of a drilled run's journal (standard library only, Python 3.8+).

    drill_probe.py wait METRICS EXIT_CODE_FILE STEP TIMEOUT_S
        Wait until the journal's last complete line has step >= STEP, the job wrote its exit code, or
        TIMEOUT_S passed. Prints {"step", "reached", "ended", "exit_code", "waited_s", "time"}.
    drill_probe.py last METRICS EVENTS AFTER_EPOCH
        The journal's last step and the first `resume` event written at or after AFTER_EPOCH.
        Prints {"last_step", "resume"}.

Paths come from the caller (the role derives them from the run layout); nothing is written.
"""

import json
import os
import sys
import time

TAIL_BYTES = 4096


def last_step(path):
    """Step of the last complete JSON line of a metrics journal, or None."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - TAIL_BYTES))
            lines = handle.read().split(b"\n")
    except OSError:
        return None
    # The last element is the torn or empty remainder after the final newline.
    for raw in reversed(lines[:-1]):
        try:
            record = json.loads(raw.decode("utf-8"))
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            return record["step"]
    return None


def exit_code(path):
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def wait(metrics, exit_code_file, step, timeout_s):
    started = time.monotonic()
    deadline = started + timeout_s
    while True:
        seen = last_step(metrics)
        code = exit_code(exit_code_file)
        reached = seen is not None and seen >= step
        if reached or code is not None or time.monotonic() >= deadline:
            return {
                "step": seen,
                "reached": reached,
                "ended": code is not None,
                "exit_code": code,
                "waited_s": round(time.monotonic() - started, 3),
                "time": time.time(),
            }
        time.sleep(0.02)


def resume_after(events, after):
    try:
        with open(events, "rb") as handle:
            lines = handle.read().split(b"\n")
    except OSError:
        return None
    for raw in lines:
        try:
            record = json.loads(raw.decode("utf-8"))
        except ValueError:
            continue
        if not isinstance(record, dict) or record.get("event") != "resume":
            continue
        when = record.get("time")
        if isinstance(when, (int, float)) and not isinstance(when, bool) and when >= after:
            return dict(record, problems=resume_problems(record))
    return None


def resume_problems(record):
    """What the drill cannot use in a trainer's resume event (its events are input: named, never a crash)."""
    problems = []
    step = record.get("step")
    if not isinstance(step, int) or isinstance(step, bool):
        problems.append(f"the resume event's step is {json.dumps(step)[:40]}, not an integer")
    path = record.get("path")
    if not isinstance(path, str) or not path.strip("/"):
        problems.append(f"the resume event's path is {json.dumps(path)[:80]}, not the checkpoint's path")
    return problems


def main(argv):
    if len(argv) == 5 and argv[0] == "wait":
        result = wait(argv[1], argv[2], int(argv[3]), float(argv[4]))
    elif len(argv) == 4 and argv[0] == "last":
        result = {"last_step": last_step(argv[1]), "resume": resume_after(argv[2], float(argv[3]))}
    else:
        sys.stderr.write(__doc__)
        return 2
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
