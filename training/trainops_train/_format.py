"""Load the checkpoint format definition shared with the `checkpoint_verify` module.

The collection's plugins/module_utils/_checkpoint_format.py is the one definition. Inside an installed
collection it imports as a normal module; a wheel built from training/ (`pip install ./training`) carries
a build-time copy next to this file; in a synced source tree on a pod (no Ansible) it is loaded by path
from training/../plugins/module_utils/.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

_FORMAT_MODULE = "ansible_collections.trainops.gpu.plugins.module_utils._checkpoint_format"
_STANDALONE_NAME = "trainops_checkpoint_format"


def _load() -> ModuleType:
    try:
        return importlib.import_module(_FORMAT_MODULE)
    except ImportError:
        pass
    if _STANDALONE_NAME in sys.modules:
        return sys.modules[_STANDALONE_NAME]
    here = pathlib.Path(__file__).resolve()
    bundled = here.with_name("_checkpoint_format.py")
    path = bundled if bundled.is_file() else here.parents[2] / "plugins" / "module_utils" / "_checkpoint_format.py"
    if not path.is_file():
        raise ImportError(
            f"checkpoint format definition not found: neither {_FORMAT_MODULE} is importable nor {path} exists"
        )
    spec = importlib.util.spec_from_file_location(_STANDALONE_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_STANDALONE_NAME] = module
    spec.loader.exec_module(module)
    return module


fmt = _load()
