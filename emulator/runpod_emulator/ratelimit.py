"""Per-key request quotas in fixed minute/hour/day windows, reported as RateLimit headers."""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass

WINDOWS = {"minute": 60, "hour": 3600, "day": 86400}


@dataclass
class Verdict:
    allowed: bool
    headers: dict[str, str]
    retry_after_s: int


def parse_policy(text: str) -> dict[str, int]:
    """'minute=60,hour=3000' -> quotas; windows not named keep their defaults."""
    quotas = dict(DEFAULT_POLICY)
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or name not in WINDOWS or not value.isdigit() or int(value) < 1:
            raise ValueError(f"rate limit {item!r}: expected minute|hour|day=<positive integer>")
        quotas[name] = int(value)
    return quotas


DEFAULT_POLICY = {"minute": 6000, "hour": 200000, "day": 2000000}


class RateLimiter:
    def __init__(self, quotas: dict[str, int]) -> None:
        self.quotas = quotas
        self._counts: dict[tuple[str, int], int] = {}
        self._lock = threading.Lock()
        self.policy_header = ", ".join(f'"{name}";q={quota};w={WINDOWS[name]}' for name, quota in quotas.items())

    def check(self, key: str, now: float | None = None) -> Verdict:
        """Count one request of `key` unless a window is exhausted; headers describe what is left."""
        now = time.time() if now is None else now
        with self._lock:
            windows = []
            for name, quota in self.quotas.items():
                length = WINDOWS[name]
                index = int(now // length)
                used = self._counts.get((name, index), 0)
                # Rounded up: a client that waits Retry-After seconds must find the window reset.
                reset = max(1, math.ceil((index + 1) * length - now))
                windows.append((name, quota, index, used, reset))
            exceeded = [w for w in windows if w[3] >= w[1]]
            if not exceeded:
                for name, _quota, index, _used, _reset in windows:
                    self._counts[(name, index)] = self._counts.get((name, index), 0) + 1
                windows = [(n, q, i, u + 1, r) for n, q, i, u, r in windows]
            self._forget_old(now)
        header = ", ".join(f'"{name}";r={max(0, quota - used)};t={reset}' for name, quota, _i, used, reset in windows)
        headers = {"RateLimit": header, "RateLimit-Policy": self.policy_header}
        retry = max((w[4] for w in exceeded), default=0)
        return Verdict(allowed=not exceeded, headers=headers, retry_after_s=retry)

    def _forget_old(self, now: float) -> None:
        if len(self._counts) < 64:
            return
        current = {(name, int(now // length)) for name, length in WINDOWS.items()}
        for key in [k for k in self._counts if k not in current]:
            del self._counts[key]
