"""The stop flag: standard library only, so that train.py can install the SIGTERM/SIGINT handlers before
torch is imported (a preemption during the seconds of import is then still graceful). The exit statuses
a stop leads to are the run layout's (run_layout.py)."""

from __future__ import annotations

import signal
import threading


class StopFlag:
    """Set by SIGTERM/SIGINT; read at step boundaries. The handler does nothing else."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signal_name: str | None = None

    def set(self, signum: int | None = None) -> None:
        if signum is not None and self.signal_name is None:
            self.signal_name = signal.Signals(signum).name
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()

    def install(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda number, _frame: self.set(number))
