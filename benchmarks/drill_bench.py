"""Where the resume drill's time goes (not a test): one run of playbooks/resume_drill.yml on the podman emulator.

Prints the drill's wall time split into the phases the drill records in evidence/report.json (provisioning,
bootstrap, sync, training, interruption, recovery, teardown; the rest is validation, evidence and Ansible's own
start-up), per-mode RTO and RPO, and the training time alone in the same run:

- trainer lives: the sum over every trainer process of the drill (the reference, each mode's interrupted and
  resumed life) of ended_at - started_at from the pulled job files (a life whose pod was stopped, killed or
  terminated has no ended_at: it counts up to the interruption);
- back to back: the reference run's duration times the number of runs (reference + modes), what the same
  trainings would cost uninterrupted on a pod that is already up.

    .venv/bin/python benchmarks/drill_bench.py [--emulator-state state/emulator] [--src DIR] [--modes kill,...]

Without --emulator-state it starts its own emulator (podman backend) in a temporary directory. `make bench-drill`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from runpod_emulator.testing import EmulatorProcess, run_emulator_playbook

ROOT = Path(__file__).resolve().parents[1]
PHASES = ["provisioning", "bootstrap", "sync", "training", "interruption", "recovery", "teardown"]


def stamp(path: Path) -> float | None:
    try:
        return datetime.fromisoformat(path.read_text().strip()).timestamp()
    except (OSError, ValueError):
        return None


def lives(job_dir: Path, interrupted_at: float | None) -> list[float]:
    """Durations of every life of one trainer job (previous/<n>/ and the last one), in seconds."""
    found = []
    for life in [*sorted((job_dir / "previous").glob("*")), job_dir]:
        started = stamp(life / "started_at")
        ended = stamp(life / "ended_at")
        if started is None:
            continue
        if ended is None and interrupted_at is not None and life != job_dir:
            ended = interrupted_at
        if ended is not None:
            found.append(max(0.0, ended - started))
    return found


def run_drill(url: str, key: str, runs: Path, run_id: str, args: argparse.Namespace) -> tuple[int, float, str]:
    extra = {
        "resume_drill_run_id": run_id,
        "resume_drill_runs_dir": str(runs),
        "resume_drill_src": str(args.src),
        "resume_drill_ssh_private_key": str(runs / "key" / "id_ed25519"),
    }
    if args.modes:
        extra["resume_drill_modes"] = args.modes.split(",")
    started = time.monotonic()
    done = run_emulator_playbook(url, key, "resume_drill.yml", extra, timeout_s=1800)
    return done.returncode, time.monotonic() - started, done.stdout[-4000:] + done.stderr[-2000:]


def report(run_dir: Path, playbook_s: float) -> None:
    data = json.loads((run_dir / "evidence" / "report.json").read_text())
    phases = data.get("phases") or {}
    wall = float(data.get("wall_s") or playbook_s)
    print(f"drill wall time: {wall:.1f} s (report.json); ansible-playbook end to end: {playbook_s:.1f} s")
    print("\n| phase | seconds | share of wall |\n|---|---|---|")
    for name in PHASES:
        value = float(phases.get(name, 0.0))
        print(f"| {name} | {value:.1f} | {100 * value / wall:.0f} % |")
    rest = wall - sum(float(phases.get(name, 0.0)) for name in PHASES)
    print(f"| other (validation, evidence, Ansible) | {rest:.1f} | {100 * rest / wall:.0f} % |")

    print("\n| mode | status | RTO s | RPO steps | resumed from |\n|---|---|---|---|---|")
    for mode in data["modes"]:
        rto = mode.get("rto_s")
        print(
            f"| {mode['mode']} | {mode['status']} | {'-' if rto is None else f'{rto:.1f}'} | "
            f"{mode.get('rpo_steps', '-')} | {mode.get('resumed_from_step', '-')} |"
        )

    pulled = run_dir / "modes"
    reference = lives(pulled / f"{data['run_id']}-reference" / "job" / "train", None)
    all_lives = list(reference)
    for mode in data["modes"]:
        all_lives += lives(pulled / f"{data['run_id']}-{mode['mode']}" / "job" / "train", mode.get("interrupted_at"))
    runs = 1 + len(data["modes"])
    ref_s = reference[0] if reference else float("nan")
    print(
        f"\ntraining alone: trainer lives {len(all_lives)}, {sum(all_lives):.1f} s in all; "
        f"reference run {ref_s:.1f} s, x {runs} runs back to back = {ref_s * runs:.1f} s; "
        f"drill wall / back to back = {wall / (ref_s * runs):.1f}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--emulator-state", type=Path, help="state dir of a running emulator (make emulator-start)")
    parser.add_argument("--src", type=Path, default=ROOT, help="source tree to push (default: this repository)")
    parser.add_argument("--modes", default="", help="comma-separated modes (default: all six)")
    args = parser.parse_args()
    os.environ.setdefault("CONTAINERS_CONF", str(ROOT / "config" / "containers.conf"))
    with tempfile.TemporaryDirectory(prefix="drill-bench-") as tmp:
        runs = Path(tmp) / "runs"
        (runs / "key").mkdir(parents=True)
        run_id = f"bench-{int(time.time())}"
        if args.emulator_state:
            info = json.loads((args.emulator_state / "emulator.json").read_text())
            key = (args.emulator_state / "api-key").read_text().strip()
            rc, playbook_s, tail = run_drill(info["url"], key, runs, run_id, args)
        else:
            with EmulatorProcess(backend="podman", state_dir=Path(tmp) / "emulator") as emulator:
                rc, playbook_s, tail = run_drill(emulator.url, emulator.api_key, runs, run_id, args)
        if not (runs / run_id / "evidence" / "report.json").is_file():
            print(f"drill bench: no report (ansible-playbook exit {rc}):\n{tail}", file=sys.stderr)
            return 1
        report(runs / run_id, playbook_s)
        if rc != 0:
            print(f"\ndrill bench: the drill failed (exit {rc}):\n{tail}", file=sys.stderr)
        return rc


if __name__ == "__main__":
    sys.exit(main())
