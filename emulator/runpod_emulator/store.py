"""The emulator's records (pods, network volumes, account, pod logs), held in memory and on disk.

Every mutation is written at once, one JSON file per record, atomically (temp file, fsync, rename), so
an emulator killed at any moment loses no pod or volume. Pod log lines go to an append-only JSONL file.
Callers hold `store.lock` while they read or change records.
"""

from __future__ import annotations

import json
import logging
import math
import shutil
import threading
from pathlib import Path
from typing import Any

from .models import NetworkVolume, Pod, Record
from .persist import atomic_write_json, loads_strict, read_json, read_json_strict, remove_file

LOG = logging.getLogger("runpod_emulator.store")
MAX_LOG_LINES = 10000


class Store:
    """Records of one state directory; `lock` guards every record and the log buffers."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.db_dir = state_dir / "db"
        self.data_dir = state_dir / "data"
        self.logs_dir = state_dir / "logs"
        for directory in (self.db_dir / "pods", self.db_dir / "volumes", self.data_dir, self.logs_dir):
            directory.mkdir(parents=True, exist_ok=True)
        self.lock = threading.RLock()
        self.pods: dict[str, Pod] = {}
        self.volumes: dict[str, NetworkVolume] = {}
        self.account: dict[str, Any] = {"sshKeys": [], "clockOffset": 0.0}
        self.logs: dict[str, list[dict[str, Any]]] = {}
        self._last_log_ts: dict[str, float] = {}
        self._load()

    def _load(self) -> None:
        self._load_account()
        self.pods.update(_load_records(self.db_dir / "pods", Pod))
        self.volumes.update(_load_records(self.db_dir / "volumes", NetworkVolume))
        for path in self.logs_dir.glob("*.jsonl"):
            events = []
            for line in path.read_text(errors="replace").splitlines():
                try:
                    events.append(loads_strict(line))
                except ValueError:
                    continue  # a line cut short by a kill (or a NaN an older version let in)
            self.logs[path.stem] = events[-MAX_LOG_LINES:]
            if events:
                self._last_log_ts[path.stem] = events[-1]["t"]

    def _load_account(self) -> None:
        """account.json; a clock offset that is not a finite number (older versions took NaN from the admin
        API, and every answer then failed) is dropped with a warning: the clock starts unshifted."""
        self.account.update(read_json(self.db_dir / "account.json", {}))
        offset = self.account.get("clockOffset", 0.0)
        if isinstance(offset, bool) or not isinstance(offset, int | float) or not math.isfinite(offset):
            LOG.warning("ignoring clockOffset %r in %s: not a finite number", offset, self.db_dir / "account.json")
            self.account["clockOffset"] = 0.0

    # Records -------------------------------------------------------------------------------------------

    def save_pod(self, pod: Pod) -> None:
        atomic_write_json(self.db_dir / "pods" / f"{pod.id}.json", pod.to_record())

    def save_volume(self, volume: NetworkVolume) -> None:
        atomic_write_json(self.db_dir / "volumes" / f"{volume.id}.json", volume.to_record())

    def save_account(self) -> None:
        atomic_write_json(self.db_dir / "account.json", self.account)

    def pod_dir(self, pod_id: str) -> Path:
        return self.data_dir / "pods" / pod_id

    def volume_dir(self, volume_id: str) -> Path:
        return self.data_dir / "volumes" / volume_id

    def delete_pod_data(self, pod_id: str) -> None:
        shutil.rmtree(self.pod_dir(pod_id), ignore_errors=True)

    def delete_volume_data(self, volume_id: str) -> None:
        shutil.rmtree(self.volume_dir(volume_id), ignore_errors=True)

    def wipe(self) -> None:
        """Forget everything (admin reset): records, logs, pod and volume data."""
        self.pods.clear()
        self.volumes.clear()
        self.logs.clear()
        self._last_log_ts.clear()
        self.account = {"sshKeys": [], "clockOffset": self.account.get("clockOffset", 0.0)}
        for directory in (self.db_dir / "pods", self.db_dir / "volumes", self.logs_dir):
            for path in directory.iterdir():
                remove_file(path)
        shutil.rmtree(self.data_dir, ignore_errors=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.save_account()

    # Logs ----------------------------------------------------------------------------------------------

    def append_log(self, pod_id: str, source: str, line: str, now: float) -> dict[str, Any]:
        """Add a log line; timestamps are strictly increasing per pod so they can serve as SSE event ids."""
        last = self._last_log_ts.get(pod_id, 0.0)
        ts = max(round(now, 6), round(last + 1e-6, 6))
        self._last_log_ts[pod_id] = ts
        event = {"t": ts, "source": source, "line": line}
        events = self.logs.setdefault(pod_id, [])
        events.append(event)
        if len(events) > MAX_LOG_LINES:
            del events[: len(events) - MAX_LOG_LINES]
        with (self.logs_dir / f"{pod_id}.jsonl").open("a") as handle:
            handle.write(json.dumps(event) + "\n")
        return event

    def drop_logs(self, pod_id: str) -> None:
        self.logs.pop(pod_id, None)
        self._last_log_ts.pop(pod_id, None)
        remove_file(self.logs_dir / f"{pod_id}.jsonl")


def _load_records(directory: Path, model: type[Record]) -> dict[str, Any]:
    """The records of one directory by id; a file that is not a record of `model` is skipped with a warning."""
    loaded = {}
    for path in sorted(directory.glob("*.json")):
        try:
            record = read_json_strict(path)
        except ValueError as exc:
            LOG.warning("ignoring %s: %s", path, exc)
            continue
        if not isinstance(record, dict) or "id" not in record:
            continue
        try:
            loaded[record["id"]] = model.from_record(record)
        except (KeyError, TypeError) as exc:
            LOG.warning("ignoring %s: not a %s record (%s: %s)", path, model.__name__, type(exc).__name__, exc)
    return loaded
