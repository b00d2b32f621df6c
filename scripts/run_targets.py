"""Run make targets in lanes at the same time, time each one, and print a table of wall times at the end.

    python3 scripts/run_targets.py [--log-dir DIR] [--name NAME] [--first TARGET ...] LANE [LANE ...]

The --first targets run alone, one after another; when one fails nothing else runs. Then every LANE runs at the
same time, with TRAINOPS_SETUP_DONE=1 (the Makefile's setup and image then do nothing: targets at the same time
never install or build at the same time). A lane is one target or several joined by '+', run one after another.
With several lanes each target writes <log-dir>/<name>/<target>.log, printed whole (not interleaved) as it ends.
A failed target does not stop the others; the table names each target's status (also in times.json beside the
logs) and the exit status is 1 when any failed.

Only the standard library: `make test` runs this before setup has made .venv. Children stay in this process
group (Ctrl-C at a terminal reaches them); a SIGTERM to this process is passed on to every running target.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fmt(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes:d}:{secs:02d}"


class Runner:
    def __init__(self, log_dir: Path, make: list[str]):
        self.log_dir = log_dir
        self.make = make
        self.env = dict(os.environ)
        self.lock = threading.Lock()  # guards running, rows and the terminal
        self.running: set[subprocess.Popen[bytes]] = set()
        self.rows: list[dict[str, object]] = []

    def run(self, target: str, to_log: bool) -> int:
        """One make target, timed: to the terminal, or into <log-dir>/<target>.log printed whole at its end."""
        if not to_log:
            print(f"== {target}", flush=True)
        t0 = time.monotonic()
        log_path = self.log_dir / f"{target}.log"
        with open(log_path, "wb") if to_log else contextlib.nullcontext() as log:
            output = {"stdout": log, "stderr": subprocess.STDOUT, "stdin": subprocess.DEVNULL} if to_log else {}
            with self.lock:
                process = subprocess.Popen([*self.make, target], cwd=ROOT, env=self.env, **output)
                self.running.add(process)
            rc = process.wait()
        wall = time.monotonic() - t0
        with self.lock:
            self.running.discard(process)
            if to_log:
                status = "ok" if rc == 0 else f"FAILED, exit {rc}"
                print(f"== {target} ({status}, {fmt(wall)}): {log_path}", flush=True)
                sys.stdout.buffer.write(log_path.read_bytes())
                sys.stdout.buffer.flush()
            self.rows.append({"target": target, "seconds": round(wall, 1), "rc": rc})
        return rc

    def lanes(self, specs: list[str]) -> None:
        lanes = [[t for t in spec.split("+") if t] for spec in specs]
        if len(lanes) == 1:
            for target in lanes[0]:
                self.run(target, to_log=False)
            return
        print(f"== at the same time: {'  |  '.join(' then '.join(lane) for lane in lanes)}", flush=True)
        threads = [threading.Thread(target=self._lane, args=(lane,)) for lane in lanes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _lane(self, targets: list[str]) -> None:
        for target in targets:
            self.run(target, to_log=True)

    def terminate(self, signum: int, _frame: object) -> None:
        with self.lock:
            for process in self.running:
                if process.poll() is None:
                    process.send_signal(signum)
        raise SystemExit(128 + signum)

    def table(self, name: str, total: float) -> str:
        lines = ["", f"{name}: wall time of each target", f"  {'target':<24} {'time':>6}  status"]
        for row in self.rows:
            status = "ok" if row["rc"] == 0 else f"FAILED (exit {row['rc']})"
            lines.append(f"  {row['target']:<24} {fmt(float(row['seconds'])):>6}  {status}")
        lines.append(f"  {'all':<24} {fmt(total):>6}")
        return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--log-dir", type=Path, default=ROOT / "tests" / "output" / "make-test")
    parser.add_argument("--name", default="test", help="what the summary calls this run (test, check)")
    parser.add_argument("--first", action="append", default=[], help="a target run alone before the lanes")
    parser.add_argument("lanes", nargs="+")
    args = parser.parse_args(argv)
    log_dir = args.log_dir / args.name
    log_dir.mkdir(parents=True, exist_ok=True)
    runner = Runner(log_dir, [os.environ.get("MAKE", "make"), "--no-print-directory"])
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, runner.terminate)
    t0 = time.monotonic()
    if all(runner.run(target, to_log=False) == 0 for target in args.first):
        runner.env["TRAINOPS_SETUP_DONE"] = "1"
        runner.lanes(args.lanes)
    total = time.monotonic() - t0
    print(runner.table(args.name, total), flush=True)
    (log_dir / "times.json").write_text(
        json.dumps({"total_seconds": round(total, 1), "targets": runner.rows}, indent=1) + "\n"
    )
    failed = [str(row["target"]) for row in runner.rows if row["rc"] != 0]
    if failed:
        print(f"{args.name}: FAILED: {', '.join(failed)}", flush=True)
        return 1
    print(f"{args.name}: all passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
