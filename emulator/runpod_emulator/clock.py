"""The emulator's clock: wall time plus an offset that the admin API can advance (billing tests)."""

from __future__ import annotations

import datetime as dt
import math
import threading
import time


class Clock:
    """Wall-clock seconds since the epoch, shifted by an adjustable offset."""

    def __init__(self, offset_s: float = 0.0) -> None:
        self._offset_s = offset_s
        self._lock = threading.Lock()

    def now(self) -> float:
        with self._lock:
            return time.time() + self._offset_s

    @property
    def offset_s(self) -> float:
        with self._lock:
            return self._offset_s

    def advance(self, seconds: float) -> None:
        if not math.isfinite(seconds):
            raise ValueError(f"cannot advance the clock by {seconds!r} s")
        with self._lock:
            self._offset_s += seconds


def to_rfc3339(epoch_s: float) -> str:
    """UTC timestamp with microseconds, e.g. 2026-12-02T16:40:00.123456Z."""
    return dt.datetime.fromtimestamp(epoch_s, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_rfc3339(text: str) -> float:
    """Epoch seconds from an RFC 3339 timestamp; ValueError when it is not one (a timezone is required)."""
    if not isinstance(text, str) or "T" not in text.upper():
        raise ValueError(f"not an RFC 3339 date-time: {text!r}")
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    # Python's parser takes at most 6 fractional digits; RFC 3339 allows more (podman writes nanoseconds).
    head, sep, frac_and_zone = value.partition(".")
    if sep:
        digits = ""
        rest = frac_and_zone
        while rest and rest[0].isdigit():
            digits += rest[0]
            rest = rest[1:]
        value = f"{head}.{(digits or '0')[:6]}{rest}"
    parsed = dt.datetime.fromisoformat(value)
    if parsed.tzinfo is None:
        raise ValueError(f"date-time without a timezone: {text!r}")
    try:
        return parsed.timestamp()
    except (OverflowError, ValueError):
        raise ValueError(f"date-time out of range: {text!r}") from None
