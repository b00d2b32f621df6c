"""The trainer imports its checkpoint format and run layout, trains and verifies its checkpoints however it
is installed: from a wheel, from an sdist, from the source tree, and from a training/ copied alone. The
two modules it shares with the collection stay standard-library-only Python 3.8, and train.py reaches
them without importing torch. Everything here is offline: no package index is asked for anything."""

from __future__ import annotations

import ast
import glob
import json
import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

import pytest
from trainer_harness import PROCESS_TIMEOUT, ROOT, TRAINING, write_config

CONFIG = {"run_id": "install", "steps": 10, "checkpoint": {"every_steps": 5, "keep_last": 2}}
SHARED_MODULES = ("checkpoint_format.py", "run_layout.py")

# Runs in the interpreter under test: train, then verify what was written, with the installed modules.
CHECK_SCRIPT = r"""
import json, sys
import trainops_train
from trainops_train import checkpoint_format, run_layout, train

rc = train.main(["--config", sys.argv[1], "--run-dir", sys.argv[2]])
layout = run_layout.RunLayout.from_run_dir(sys.argv[2])
report = checkpoint_format.verify_root(layout.ckpt)
with open(layout.result) as handle:
    status = json.load(handle)["status"]
print(json.dumps({
    "rc": rc,
    "package": trainops_train.__file__,
    "modules": [checkpoint_format.__file__, run_layout.__file__],
    "steps": [checkpoint.step for checkpoint in report.checkpoints],
    "all_valid": all(checkpoint.valid for checkpoint in report.checkpoints),
    "status": status,
}))
"""


def _run(command: list[str], cwd: pathlib.Path, env: dict[str, str] | None = None) -> str:
    completed = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=PROCESS_TIMEOUT * 2, check=False
    )
    assert completed.returncode == 0, (command, completed.stdout[-3000:], completed.stderr[-3000:])
    return completed.stdout


def _clean_env(pythonpath: pathlib.Path | None = None) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "RANK", "WORLD_SIZE")}
    env["OMP_NUM_THREADS"] = "1"
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return env


def _copy_training(target: pathlib.Path) -> pathlib.Path:
    """training/ alone, as a sync of that directory or an unpacked source archive would have it."""
    shutil.copytree(TRAINING, target, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    return target


@pytest.fixture(scope="module")
def distributions(tmp_path_factory) -> dict[str, pathlib.Path]:
    """A wheel and an sdist, built (PEP 517, setuptools, no isolation) from a copy of training/ so that
    the build leaves nothing in the checkout."""
    base = tmp_path_factory.mktemp("dist")
    source = _copy_training(base / "training")
    out = base / "out"
    out.mkdir()
    script = (
        "import sys; from setuptools import build_meta as backend; out = sys.argv[1]; "  # the backend rewrites sys.argv
        "wheel = backend.build_wheel(out); sdist = backend.build_sdist(out); print('built', wheel, sdist)"
    )
    built = _run([sys.executable, "-c", script, str(out)], cwd=source).splitlines()
    _word, wheel, sdist = built[-1].split()
    return {"wheel": out / wheel, "sdist": out / sdist}


def _venv_with(distribution: pathlib.Path, directory: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """A fresh virtualenv with only `distribution` installed in it; torch, numpy and setuptools come from
    this interpreter's site-packages through a .pth file (a venv made with --system-site-packages from a
    venv would see the base interpreter's packages, which lack torch). Returns (python, site-packages)."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(directory)], cwd=directory.parent)
    python = directory / "bin" / "python"
    site_packages = pathlib.Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=directory).strip()
    )
    (site_packages / "trainops_test_parent.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = ["-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation", "--quiet"]
    _run([str(python), *install, str(distribution)], cwd=directory, env=_clean_env())
    return python, site_packages


def _check_installation(python: pathlib.Path, env: dict[str, str], home: pathlib.Path, tmp_path: pathlib.Path):
    """Train and verify with `python`; every module must come from under `home`, as a regular file."""
    config = write_config(tmp_path, **CONFIG)
    run_dir = tmp_path / "run"
    # cwd is empty: nothing is importable from it
    out = json.loads(_run([str(python), "-c", CHECK_SCRIPT, str(config), str(run_dir)], tmp_path, env).splitlines()[-1])
    assert out["rc"] == 0 and out["status"] == "finished", out
    assert out["steps"] == [10, 5] and out["all_valid"], out
    for path in [out["package"], *out["modules"]]:
        module = pathlib.Path(path)
        assert module.is_file() and not module.is_symlink(), path
        assert module.resolve().is_relative_to(home.resolve()), (path, home)
    assert [pathlib.Path(path).name for path in out["modules"]] == list(SHARED_MODULES)


@pytest.mark.parametrize("kind", ["wheel", "sdist"])
def test_installed_package_trains_and_verifies(tmp_path, distributions, kind):
    python, site_packages = _venv_with(distributions[kind], tmp_path / "venv")
    _check_installation(python, _clean_env(), site_packages / "trainops_train", tmp_path)


def test_source_tree_trains_and_verifies(tmp_path):
    _check_installation(pathlib.Path(sys.executable), _clean_env(TRAINING), TRAINING / "trainops_train", tmp_path)


def test_training_copied_alone_trains_and_verifies(tmp_path):
    copy = _copy_training(tmp_path / "elsewhere" / "training")
    work = tmp_path / "work"
    work.mkdir()
    _check_installation(pathlib.Path(sys.executable), _clean_env(copy), copy / "trainops_train", work)


def test_train_reaches_the_run_layout_before_torch():
    """train.py installs its signal handlers and knows its exit statuses before torch is imported."""
    script = (
        "import sys; import trainops_train.train, trainops_train.run_layout, trainops_train.signals; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    _run([sys.executable, "-c", script], cwd=ROOT, env=_clean_env(TRAINING))


@pytest.mark.parametrize("name", SHARED_MODULES)
def test_shared_modules_are_python_3_8_standard_library(name):
    tree = ast.parse((TRAINING / "trainops_train" / name).read_text(), feature_version=(3, 8))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{name}: relative import (the collection imports it under another name)"
            imported.add(node.module.split(".")[0])
    assert imported <= sys.stdlib_module_names | {"__future__"}, imported - sys.stdlib_module_names


def _python38() -> str | None:
    candidates = [
        shutil.which("python3.8"),
        *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3.8"))),
    ]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "pass"], capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def test_shared_modules_verify_under_python_3_8(reference_runs):
    """What a target host with Python 3.8 runs through AnsiballZ: the format verifies a real run's
    checkpoints, and the layout finds them."""
    python38 = _python38()
    if python38 is None:
        pytest.skip("no Python 3.8 interpreter here")
    run_dir = reference_runs(1)
    script = (
        "import sys; from trainops_train import checkpoint_format, run_layout; "
        "report = checkpoint_format.verify_root(run_layout.RunLayout.from_run_dir(sys.argv[1]).ckpt); "
        "assert report.checkpoints and all(c.valid for c in report.checkpoints), report.to_dict(); "
        "print(report.newest_valid.step, run_layout.status_for_exit(run_layout.EXIT_INTERRUPTED))"
    )
    out = _run([python38, "-c", script, str(run_dir)], cwd=ROOT, env=_clean_env(TRAINING))
    assert out.split() == ["200", "interrupted"]
