"""When to checkpoint: every N steps, every S seconds, or Daly's optimum ("auto").

Daly (2006), "A higher order estimate of the optimum checkpoint interval for restart dumps": with C the
time one checkpoint takes and M the mean time between interruptions, the compute time between
checkpoints that minimises the expected total run time is

    T = sqrt(2 C M) * (1 + (1/3) sqrt(C / (2M)) + (1/9) (C / (2M))) - C    for C < 2M
    T = M                                                                   for C >= 2M

whose first-order form (Young's, for C << M) is T = sqrt(2 C M) - C. docs/checkpoints.md has a worked
example. C is measured: the mean of the last few saves of this run.
"""

from __future__ import annotations

import collections
import math

from .config import CheckpointConfig

_SAVE_TIMES_KEPT = 5


def daly_interval(save_seconds: float, mtbi_seconds: float) -> float:
    """Daly's higher-order optimum compute time between checkpoints (seconds)."""
    if save_seconds < 0 or mtbi_seconds <= 0:
        raise ValueError("save time must be >= 0 and the mean time between interruptions > 0")
    if save_seconds >= 2 * mtbi_seconds:
        return mtbi_seconds
    ratio = save_seconds / (2 * mtbi_seconds)
    return math.sqrt(2 * save_seconds * mtbi_seconds) * (1 + math.sqrt(ratio) / 3 + ratio / 9) - save_seconds


def young_interval(save_seconds: float, mtbi_seconds: float) -> float:
    """First-order form, sqrt(2 C M) - C (valid for C << M)."""
    return math.sqrt(2 * save_seconds * mtbi_seconds) - save_seconds


class CheckpointCadence:
    """Decides at each step boundary whether a checkpoint is due."""

    def __init__(self, config: CheckpointConfig, start_step: int, now: float) -> None:
        self.config = config
        self.last_step = start_step
        self.last_time = now
        self.save_times: collections.deque[float] = collections.deque(maxlen=_SAVE_TIMES_KEPT)

    def interval_seconds(self) -> float | None:
        """The current time interval (seconds and auto modes); None while auto has no measurement yet."""
        if self.config.mode == "seconds":
            return self.config.every_seconds
        if self.config.mode == "auto":
            if not self.save_times:
                return None
            mean = sum(self.save_times) / len(self.save_times)
            return daly_interval(mean, self.config.mtbi_seconds)
        return None

    def due(self, step: int, now: float) -> bool:
        if self.config.mode == "steps":
            return step - self.last_step >= self.config.every_steps
        interval = self.interval_seconds()
        if interval is None:
            # auto mode measures its first save right away: C is unknown until one is taken
            return step > self.last_step
        return now - self.last_time >= interval

    def saved(self, step: int, now: float, seconds: float) -> None:
        self.last_step = step
        self.last_time = now
        self.save_times.append(seconds)
