"""The version is written once, in galaxy.yml: every copy and every installed package agrees with it."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import runpod_emulator
import trainops_train
import yaml

ROOT = Path(__file__).resolve().parents[2]
FIX = "run `make version` (copies) or `make setup` (installed packages)"


def galaxy_version() -> str:
    return str(yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"])


def test_every_copy_of_the_version_is_galaxy_ymls():
    version = galaxy_version()
    user_agent = re.search(
        r'^COLLECTION_VERSION = "(.*)"$', (ROOT / "plugins/module_utils/_version.py").read_text(), re.M
    )
    copies = {
        "plugins/module_utils/_version.py": user_agent.group(1) if user_agent else None,
        "training/pyproject.toml": tomllib.loads((ROOT / "training/pyproject.toml").read_text())["project"]["version"],
        "trainops-train (installed)": metadata.version("trainops-train"),
        "trainops-runpod-emulator (installed)": metadata.version("trainops-runpod-emulator"),
        "trainops_train.__version__": trainops_train.__version__,
        "runpod_emulator.__version__": runpod_emulator.__version__,
    }
    differing = {where: found for where, found in copies.items() if found != version}
    assert not differing, f"galaxy.yml says {version}, these differ: {differing}; {FIX}"


def test_no_other_file_writes_a_version_literal():
    # A new hard-coded copy would drift: only the two copies `make version` maintains may hold one.
    allowed = {"plugins/module_utils/_version.py", "training/pyproject.toml", "galaxy.yml"}
    pattern = re.compile(r'^\s*(__version__|version|COLLECTION_VERSION)\s*[=:]\s*["\']?\d+\.\d+\.\d+', re.M)
    found = []
    for directory in ("plugins", "training", "emulator"):
        for path in (ROOT / directory).rglob("*"):
            if path.suffix in {".py", ".toml", ".yml", ".cfg"} and path.is_file() and not path.is_symlink():
                relative = str(path.relative_to(ROOT))
                if relative not in allowed and "egg-info" not in relative and pattern.search(path.read_text()):
                    found.append(relative)
    assert not found, f"hard-coded versions outside galaxy.yml and its two copies: {found}"
