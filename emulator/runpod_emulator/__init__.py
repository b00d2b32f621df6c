"""A local emulator of RunPod's REST API v2 whose pods are real podman containers with sshd.

Run it with `PYTHONPATH=emulator python -m runpod_emulator serve --state-dir DIR --backend podman|memory
--api-key KEY [--port N]`; see docs/emulator.md. `runpod_emulator.testing.EmulatorProcess` starts one
from tests.
"""

__version__ = "0.1.0"
