"""Load the checkpoint format definition shared with the `checkpoint_verify` module.

The collection's plugins/module_utils/_checkpoint_format.py is the one definition. The file that travels
with this package is preferred: a wheel built from training/ (`pip install ./training`) carries a
build-time copy next to this file, and a source tree (a checkout, or the synced source on a pod) has it at
training/../plugins/module_utils/. Only when neither exists is it imported from an installed collection,
which may be another version than this trainer's.
"""

from __future__ import annotations

import importlib.util
import pathlib
import sys
from types import ModuleType

_FORMAT_MODULE = "ansible_collections.trainops.gpu.plugins.module_utils._checkpoint_format"
_STANDALONE_NAME = "trainops_checkpoint_format"


def _load() -> ModuleType:
    if _STANDALONE_NAME in sys.modules:
        return sys.modules[_STANDALONE_NAME]
    here = pathlib.Path(__file__).resolve()
    bundled = here.with_name("_checkpoint_format.py")
    path = bundled if bundled.is_file() else here.parents[2] / "plugins" / "module_utils" / "_checkpoint_format.py"
    if not path.is_file():
        try:
            return importlib.import_module(_FORMAT_MODULE)
        except ImportError as exc:
            raise ImportError(
                f"checkpoint format definition not found: neither {path} exists nor {_FORMAT_MODULE} is importable"
            ) from exc
    spec = importlib.util.spec_from_file_location(_STANDALONE_NAME, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[_STANDALONE_NAME] = module
    spec.loader.exec_module(module)
    return module


fmt = _load()
