# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# Run on the pod by the train role (python3 -c, standard library only, Python >= 3.8); reads, never writes.
"""Print one JSON object about a run's progress: train_progress.py METRICS EVENTS STARTED_AT.

last: the journal's last complete line (logs/metrics.jsonl; a torn last line from a kill is skipped);
rate: steps per second over this life's lines in the tail (wall_time at or after STARTED_AT, the job's
start, RFC 3339), null with fewer than two; last_save: the last save_end event's fields the role reads (each a
number or null; a trainer's event is input: what is missing or not a number is named in its `problems`, never a
crash); resume: the last resume event of this life (the step it resumed from).
"""

import datetime
import json
import os
import sys

TAIL_BYTES = 256 * 1024


def tail_records(path):
    """The complete JSON-object lines among the last TAIL_BYTES of path; [] when it cannot be read."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(0, size - TAIL_BYTES)
            handle.seek(start)
            data = handle.read()
    except OSError:
        return []
    lines = data.split(b"\n")
    lines.pop()  # the text after the last newline: empty, or a torn line
    if start and lines:
        lines.pop(0)  # cut by the seek
    records = []
    for line in lines:
        try:
            record = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def epoch(text):
    try:
        return datetime.datetime.fromisoformat(text).timestamp()
    except (TypeError, ValueError):
        return None


def number(record, key):
    value = record.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


# The save_end fields the train role reads: the step saved, how long the save took and stalled training, the
# interval to the next save (auto cadence), the bytes written. Only step is asked of every trainer.
SAVE_FIELDS = ("step", "seconds", "stalled_s", "next_interval_s", "bytes")


def save_of(event):
    """The save_end event's SAVE_FIELDS, numbers or null, with `problems` naming a missing step and any field
    that is there but not a number."""
    save = {key: number(event, key) for key in SAVE_FIELDS}
    problems = []
    for key in SAVE_FIELDS:
        if key in event and save[key] is None and event[key] is not None:
            problems.append(f"save_end {key} is {json.dumps(event[key])[:40]}, not a number")
        elif key == "step" and key not in event:
            problems.append("save_end has no step")
    if save["step"] is not None:
        save["step"] = int(save["step"])
    save["problems"] = problems
    return save


def in_life(when, started):
    """Whether a record made at `when` (epoch seconds) belongs to the job's life that started at `started`."""
    return started is None or (when is not None and when >= started - 1.0)


def main(argv):
    metrics, events, started = tail_records(argv[1]), tail_records(argv[2]), epoch(argv[3])
    steps = [r for r in metrics if isinstance(r.get("step"), int) and number(r, "wall_time") is not None]
    life = [r for r in steps if in_life(number(r, "wall_time"), started)]
    rate = None
    if len(life) >= 2:
        seconds = number(life[-1], "wall_time") - number(life[0], "wall_time")
        if seconds > 0:
            rate = (life[-1]["step"] - life[0]["step"]) / seconds
    saves = [e for e in events if e.get("event") == "save_end"]
    resumes = [e for e in events if e.get("event") == "resume" and in_life(number(e, "time"), started)]
    out = {
        "last": steps[-1] if steps else None,
        "rate": rate,
        "life_steps": len(life),
        "last_save": save_of(saves[-1]) if saves else None,
        "resume": resumes[-1] if resumes else None,
    }
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
