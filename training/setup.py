"""Build hook: the wheel carries a copy of the collection's checkpoint format definition.

The definition lives once, in plugins/module_utils/_checkpoint_format.py; an installed package has no
repository around it, so the build copies that file into the built package (never into the source tree).
"""

import pathlib
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

FORMAT_SOURCE = pathlib.Path(__file__).resolve().parent.parent / "plugins" / "module_utils" / "_checkpoint_format.py"


class BuildWithFormat(build_py):
    """build_py that adds the checkpoint format definition to the built package."""

    def run(self):
        super().run()
        if not FORMAT_SOURCE.is_file():
            raise FileNotFoundError(f"{FORMAT_SOURCE} is missing: build from a full trainops.gpu checkout")
        target = pathlib.Path(self.build_lib) / "trainops_train" / "_checkpoint_format.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(FORMAT_SOURCE, target)


setup(cmdclass={"build_py": BuildWithFormat})
