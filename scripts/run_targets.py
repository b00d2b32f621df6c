"""Run make targets in stages, time each one, and print a table of wall times at the end.

    python3 scripts/run_targets.py [--log-dir DIR] [--name NAME] STAGE [STAGE ...]

A STAGE is one target, or several lanes joined by commas that run at the same time; a lane is one target or
several joined by '+', run one after another. In a stage of several lanes each target writes its own log under
--log-dir, printed whole (not interleaved) as it ends. Stages run one after another. --first targets run before
the stages, alone; when one fails nothing else runs, and the stages run with TRAINOPS_SETUP_DONE=1 (the Makefile's
setup and image then do nothing: targets at the same time never install or build at the same time). A failed target does
not stop the others: every stage runs, the table names each target's status, and the exit status is 1 when any
failed. The table also goes to <log-dir>/times.json, so a slow new suite is seen at once.

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
        self.running: set[subprocess.Popen[bytes]] = set()
        self.lock = threading.Lock()
        self.rows: list[dict[str, object]] = []
        self.out = threading.Lock()

    def run(self, stage: int, target: str, to_log: bool) -> int:
        """One make target, timed: to the terminal, or into <log-dir>/<target>.log printed whole at its end."""
        t0 = time.monotonic()
        log_path = self.log_dir / f"{target}.log"
        with open(log_path, "wb") if to_log else contextlib.nullcontext() as log:
            output = {"stdout": log, "stderr": subprocess.STDOUT, "stdin": subprocess.DEVNULL} if to_log else {}
            with self.lock:
                process = subprocess.Popen([*self.make, target], cwd=ROOT, env=self.env, **output)
                self.running.add(process)
            rc = process.wait()
            with self.lock:
                self.running.discard(process)
        wall = time.monotonic() - t0
        with self.out:
            if to_log:
                status = "ok" if rc == 0 else f"FAILED, exit {rc}"
                print(f"== {target} ({status}, {fmt(wall)}): {log_path}", flush=True)
                sys.stdout.buffer.write(log_path.read_bytes())
                sys.stdout.buffer.flush()
            self.rows.append({"stage": stage, "target": target, "seconds": round(wall, 1), "rc": rc})
        return rc

    def lane(self, stage: int, targets: list[str], to_log: bool) -> None:
        for target in targets:
            if not to_log:
                print(f"== {target}", flush=True)
            self.run(stage, target, to_log)

    def stage(self, number: int, spec: str) -> None:
        lanes = [[t for t in lane.split("+") if t] for lane in spec.split(",") if lane]
        if len(lanes) == 1:
            self.lane(number, lanes[0], to_log=False)
            return
        print(f"== stage {number}, at the same time: {'  |  '.join(' then '.join(lane) for lane in lanes)}", flush=True)
        threads = [threading.Thread(target=self.lane, args=(number, lane, True)) for lane in lanes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def terminate(self, signum: int, _frame: object) -> None:
        with self.lock:
            for process in self.running:
                if process.poll() is None:
                    process.send_signal(signum)
        raise SystemExit(128 + signum)

    def table(self, name: str, total: float) -> str:
        lines = ["", f"{name}: wall time of each target", f"  {'stage':>5}  {'target':<24} {'time':>6}  status"]
        for row in self.rows:
            status = "ok" if row["rc"] == 0 else f"FAILED (exit {row['rc']})"
            lines.append(f"  {row['stage']:>5}  {row['target']:<24} {fmt(float(row['seconds'])):>6}  {status}")
        lines.append(f"  {'':>5}  {'all':<24} {fmt(total):>6}")
        return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--log-dir", type=Path, default=ROOT / "tests" / "output" / "make-test")
    parser.add_argument("--name", default="test", help="what the summary calls this run (test, check)")
    parser.add_argument("--first", action="append", default=[], help="a target run alone before the stages")
    parser.add_argument("stages", nargs="+")
    args = parser.parse_args(argv)
    log_dir = args.log_dir / args.name
    log_dir.mkdir(parents=True, exist_ok=True)
    runner = Runner(log_dir, [os.environ.get("MAKE", "make"), "--no-print-directory"])
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, runner.terminate)
    t0 = time.monotonic()
    first_failed = any(runner.run(0, target, to_log=False) != 0 for target in args.first)
    if not first_failed:
        runner.env["TRAINOPS_SETUP_DONE"] = "1"
        for number, stage in enumerate(args.stages, 1):
            runner.stage(number, stage)
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
