"""Build hook: the package's version is the collection's, read from galaxy.yml (its one source).

The emulator runs from a trainops.gpu checkout (it needs emulator/image/ and config/ beside it), so it is
installed editable into .venv by `make setup`; galaxy.yml is always one directory up.
"""

import pathlib
import re

from setuptools import setup

GALAXY = pathlib.Path(__file__).resolve().parent.parent / "galaxy.yml"
setup(version=re.search(r"^version:\s*([^\s#]+)", GALAXY.read_text(), re.M).group(1))
