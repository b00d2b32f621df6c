"""Exit statuses and the stop flag: standard library only, so that train.py can install the SIGTERM/SIGINT
handlers before torch is imported (a preemption during the seconds of import is then still graceful)."""

from __future__ import annotations

import signal
import threading

# Exit statuses of `python -m trainops_train.train` (each rank under torchrun).
EXIT_FINISHED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2  # bad config or arguments, resume refused, run directory locked: nothing was trained
EXIT_INTERRUPTED = 75  # EX_TEMPFAIL: stopped by SIGTERM/SIGINT after writing a checkpoint; run again to resume

STATUS_BY_EXIT = {EXIT_FINISHED: "finished", EXIT_INTERRUPTED: "interrupted", EXIT_USAGE: "refused"}


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
