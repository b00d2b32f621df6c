"""Start one molecule pod container exactly as the emulator starts its pods (runpod_emulator's run_command).

Usage: start_pod.py SPEC.json, where the spec holds name, image, env, mounts ([host, path, read_only]) and,
for a GPU pod, gpus ({count, name, memory_mib, cuda}) and a work directory: the emulated nvidia-smi and its
gpus.conf are bind-mounted read-only as the emulator's engine does. Prints the published SSH port.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from runpod_emulator.backends.podman import run_command
from runpod_emulator.engine import SHIM, SHIM_DATA_IN_POD


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    mounts = [(host, path, bool(read_only)) for host, path, read_only in spec.get("mounts", [])]
    gpus = spec.get("gpus")
    if gpus:
        shim_data = Path(spec["workdir"]) / (spec["name"] + "-emulator")
        shim_data.mkdir(parents=True, exist_ok=True)
        (shim_data / "gpus.conf").write_text(
            f"count={gpus['count']}\nname={gpus['name']} (emulated)\nmemory_mib={gpus['memory_mib']}\n"
            f"pod_id={spec['env']['RUNPOD_POD_ID']}\ncuda={gpus['cuda']}\n"
        )
        mounts += [(shim_data, SHIM_DATA_IN_POD, True), (SHIM, "/usr/local/bin/nvidia-smi", True)]
    for host, _path, read_only in mounts:
        if not read_only:
            Path(host).mkdir(parents=True, exist_ok=True)
    args, env = run_command(spec["image"], spec["name"], env=spec["env"], hostname=spec["name"], mounts=mounts)
    subprocess.run(["podman", *args], env=env, check=True, capture_output=True, text=True)
    port = subprocess.run(["podman", "port", spec["name"], "22/tcp"], check=True, capture_output=True, text=True)
    print(port.stdout.splitlines()[0].rsplit(":", 1)[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
