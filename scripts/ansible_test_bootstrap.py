"""Make `ansible-test --requirements` work offline.

ansible-test bootstraps pip into its virtual environments with a script it downloads from a
host that is unreachable here, caching it as ~/.ansible/test/cache/get_pip_<version>.py.
This writes a stand-in at that path which installs the same pip version from its wheel,
fetched from PyPI into our wheel cache (argument 1).
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import ansible_test

STAND_IN = '''\
"""Stand-in for get-pip.py written by trainops.gpu scripts/ansible_test_bootstrap.py.

Installs pip {version} from its wheel in {wheels} (no download).
"""
import sys

WHEEL = {wheel!r}
sys.path.insert(0, WHEEL)
from pip._internal.cli.main import main  # noqa: E402

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install", "--no-index", "--find-links", {wheels!r}] + args))
'''


def pip_version() -> str:
    """The pip version this ansible-test bootstraps (see python_requirements.get_venv_packages)."""
    src = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
    match = re.search(r"default_packages = dict\(\s*pip='([^']+)'", src.read_text())
    if not match:
        raise SystemExit(f"cannot find the pip version ansible-test bootstraps in {src}")
    return match.group(1)


def main() -> int:
    wheels = pathlib.Path(sys.argv[1])
    version = pip_version()
    target = pathlib.Path.home() / ".ansible" / "test" / "cache" / f"get_pip_{version.replace('.', '_')}.py"
    wheel = wheels / f"pip-{version}-py3-none-any.whl"
    if not wheel.exists():
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), f"pip=={version}"],
            check=True,
        )
    text = STAND_IN.format(version=version, wheels=str(wheels), wheel=str(wheel))
    if target.exists() and target.read_text() == text:
        print(f"  {target} in place (pip {version})")
        return 0
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    print(f"  wrote {target} (pip {version} from {wheel})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
