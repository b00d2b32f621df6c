"""A local emulator of RunPod's REST API v2 whose pods are real podman containers with sshd.

Run it with `python -m runpod_emulator serve --state-dir DIR --backend podman|memory
--api-key KEY [--port N]`; see docs/emulator.md. `runpod_emulator.testing.EmulatorProcess` starts one
from tests.
"""

from importlib import metadata

try:
    # The collection's version (galaxy.yml), stamped into the package metadata when it was installed.
    __version__ = metadata.version("trainops-runpod-emulator")
except metadata.PackageNotFoundError:  # imported from a checkout without `make setup`
    __version__ = "unknown"
