# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The shared file primitives (_files), and the module_utils import graph they keep small: every import of a
module_util by another, read from the source with ast, so that what a module's payload carries is checked."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from ansible_collections.trainops.gpu.plugins.module_utils import _files
from ansible_collections.trainops.gpu.plugins.module_utils._provenance import ProvenanceError, validate_run_id
from ansible_collections.trainops.gpu.plugins.module_utils._run_state import RunStateError, check_run_id

PACKAGE = "ansible_collections.trainops.gpu.plugins.module_utils"
MODULE_UTILS = Path(_files.__file__).parent


def imports_graph() -> dict[str, set[str]]:
    """Module_util name (``_run_state``) -> the module_utils it imports, at any level of the file."""
    known = {path.stem for path in MODULE_UTILS.glob("_*.py")}
    graph = {}
    for name in known:
        path = MODULE_UTILS / (name + ".py")
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name.rpartition(".")[2] for alias in node.names if alias.name.startswith(PACKAGE))
            elif isinstance(node, ast.ImportFrom) and node.module:
                if node.module == PACKAGE:
                    targets.update(alias.name for alias in node.names)
                elif node.module.startswith(PACKAGE + "."):
                    targets.add(node.module[len(PACKAGE) + 1 :].partition(".")[0])
        graph[name] = {target for target in targets if target in known and target != name}
    return graph


def carried(graph: dict[str, set[str]], name: str) -> set[str]:
    """Every module_util that importing ``name`` brings along (what AnsiballZ packs with it)."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for target in graph[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_graph_holds_the_known_imports():
    graph = imports_graph()
    assert "_files" in graph["_run_state"] and "_files" in graph["_provenance"]
    assert "_source_verify" in graph["_provenance"]


def test_run_state_and_run_lock_carry_only_the_file_primitives():
    graph = imports_graph()
    assert carried(graph, "_run_state") == {"_files", "_run_layout"}
    assert carried(graph, "_run_lock") == {"_files", "_run_layout"}
    assert carried(graph, "_files") == {"_run_layout"}


def test_the_runpod_modules_do_not_carry_the_provenance_code():
    # runpod_pod, runpod_network_volume, ... import _runpod_base and _runpod_resources; the secret-name rule they
    # share with provenance is in _secrets.
    graph = imports_graph()
    for name in ("_runpod_base", "_runpod_resources"):
        assert "_provenance" not in carried(graph, name), (name, carried(graph, name))
    assert carried(graph, "_secrets") == set()


def test_the_pod_side_check_imports_no_module_util():
    # _source_verify.py is sent to the pod as ``python3 -c`` text: it cannot import the collection.
    assert imports_graph()["_source_verify"] == set()


def test_atomic_write_gives_the_mode_of_a_plain_open_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "out.json"
    target.write_bytes(b"old")
    assert _files.atomic_write(str(target), lambda handle: handle.write(b"new")) == 3
    assert target.read_bytes() == b"new"
    assert oct(target.stat().st_mode & 0o777) == oct(0o666 & ~_files.umask())
    assert os.listdir(str(tmp_path)) == ["out.json"]


def test_atomic_write_unless_keeps_an_unchanged_file(tmp_path):
    target = tmp_path / "out"
    target.write_bytes(b"same")
    before = target.stat()
    result, replaced = _files.atomic_write_unless(
        str(target), lambda handle: handle.write(b"same"), lambda written: target.read_bytes() == b"same"
    )
    assert (result, replaced) == (4, False)
    assert target.stat().st_ino == before.st_ino
    assert os.listdir(str(tmp_path)) == ["out"]


def test_fsync_dir_of_a_missing_directory_is_no_error(tmp_path):
    _files.fsync_dir(str(tmp_path / "missing"))


@pytest.mark.parametrize(
    ("check", "error"),
    [(_files.validate_run_id, ValueError), (validate_run_id, ProvenanceError), (check_run_id, RunStateError)],
)
def test_one_run_id_rule_each_callers_error(check, error):
    assert check("r1.a-b_c") == "r1.a-b_c"
    with pytest.raises(error, match=r"run_id '\.\./r1' must be 1-128 letters.* \(no path separators\)"):
        check("../r1")
