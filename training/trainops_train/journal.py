"""Append-only JSON-lines logs: the metrics journal (one line per step) and the event log.

The hooks use it in a user's trainer on the pod, whose Python may be as old as 3.8: datetime.timezone.utc
stays (ruff's UP017)."""
# ruff: noqa: UP017

from __future__ import annotations

import contextlib
import datetime
import json
import os
import time
from typing import Any

from . import checkpoint_format, run_layout
from .atomic import replace_text_atomically


class JsonLines:
    """Lines go out with one write(2) each on an O_APPEND descriptor: a SIGKILL leaves at most a torn
    last line, which readers drop."""

    def __init__(self, path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0), 0o644)

    def append(self, record: dict[str, Any]) -> None:
        os.write(self._fd, (json.dumps(record, sort_keys=True, allow_nan=False) + "\n").encode("utf-8"))

    def sync(self) -> None:
        os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def read_records(path: str) -> list[dict[str, Any]]:
    """Every complete JSON line of a journal; a torn or garbled line (from a kill mid-write) is dropped."""
    records = []
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.endswith("\n"):
                    continue
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    records.append(record)
    except FileNotFoundError:
        return []
    return records


def step_record(step: int, loss: float, lr: float | None, wall_time: float, elapsed_s: float) -> dict[str, Any]:
    """The metrics journal's line for one step: loss and lr as repr and float.hex, both exact."""
    return {
        "step": step,
        "loss": repr(loss),
        "loss_hex": float.hex(loss),
        "lr": None if lr is None else repr(lr),
        "lr_hex": None if lr is None else float.hex(lr),
        "wall_time": wall_time,
        "elapsed_s": elapsed_s,
    }


def write_result(path: str, exit_code: int, step: int | None, weights_sha256: str | None, **fields: Any) -> None:
    """result.json: how this life ended (status from the exit code, the step, the final weights' hash and
    `fields`: checkpoint, signal, reason), replaced atomically."""
    record = {
        "status": run_layout.status_for_exit(exit_code),
        "exit_code": exit_code,
        "step": step,
        "weights_sha256": weights_sha256,
        **fields,
        "finished_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
    }
    replace_text_atomically(path, json.dumps(record, sort_keys=True, indent=2) + "\n")


def clear_result(path: str) -> None:
    """Remove an earlier life's result.json: until this life writes its own, the outcome is unknown (a
    SIGKILL writes nothing), and a stale 'interrupted' or 'finished' must not be read as this life's."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        checkpoint_format.fsync_dir(os.path.dirname(path))


def truncate_metrics(path: str, last_step: int) -> int:
    """Keep the journal's records up to `last_step` (the step resumed from): the steps after it will be
    computed again. Returns how many records were dropped."""
    records = read_records(path)
    kept = [record for record in records if isinstance(record.get("step"), int) and record["step"] <= last_step]
    dropped = len(records) - len(kept)
    if os.path.exists(path):
        replace_text_atomically(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
    return dropped


class EventLog(JsonLines):
    """What the trainer did and when (start, resume, save_begin/save_end, aside, prune, stop, exit)."""

    def __call__(self, event: str, **fields: Any) -> None:
        self.append({"event": event, "time": time.time(), "pid": os.getpid(), **fields})
