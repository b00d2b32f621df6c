# Copyright: trainops.gpu maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The provenance module and its module_utils, on real git repositories made in temporary directories."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import tarfile

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.trainops.gpu.plugins.module_utils import _provenance as prov
from ansible_collections.trainops.gpu.plugins.modules import provenance as module

SECRET = "hf_s3cr3t-Value-0123456789"
PASSWORD = "pa55word-xyz"


def git(repo, *args):
    command = ["git", "-C", str(repo), "-c", "user.name=Test", "-c", "user.email=test@example.invalid"]
    command += ["-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


def write(path, text, mode=None):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        path.chmod(mode)


@pytest.fixture
def repo(tmp_path):
    """A committed git work tree: tracked files (one executable, one in a subdirectory), a .gitignore."""
    root = tmp_path / "src"
    root.mkdir()
    git(root, "init", "-q")
    write(root / "train.py", "print('train')\n")
    write(root / "run.sh", "#!/bin/sh\necho run\n", 0o755)
    write(root / "pkg" / "model.py", "W = 1\n")
    write(root / "name with space.txt", "spaces\n")
    write(root / ".gitignore", "*.log\nignored_dir/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "first")
    return root


@pytest.fixture
def runs(tmp_path):
    return tmp_path / "runs"


def record(src, runs_dir, run_id="r1", **kwargs):
    kwargs.setdefault("command", ["python", "train.py", "--lr", "0.1"])
    return prov.record(str(src), run_id, runs_dir=str(runs_dir), **kwargs)


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_hashes(root, skip=(".git",)):
    """{relative path: sha256} of every regular file under root (not following links), .git left out."""
    found = {}
    for top, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in skip and not os.path.islink(os.path.join(top, d))]
        for name in files:
            path = os.path.join(top, name)
            if not os.path.islink(path):
                found[os.path.relpath(path, root)] = sha256(pathlib.Path(path))
    return found


def manifest_hashes(text):
    return dict((line[66:], line[:64]) for line in text.splitlines())


def make_dirty(repo):
    write(repo / "train.py", "print('changed')\n")  # tracked change
    write(repo / "notes" / "new.txt", "untracked\n")  # untracked, not ignored
    write(repo / "debug.log", "ignored\n")  # ignored by *.log
    write(repo / "ignored_dir" / "big.bin", "ignored too\n")


def extract(archive, dest):
    with tarfile.open(archive) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest, filter="fully_trusted")
        else:
            tar.extractall(dest)


# --- clean and dirty trees ---------------------------------------------------------------------------------


def test_clean_tree_records_commit_and_branch_without_archive(repo, runs):
    result = record(repo, runs)
    source = result["provenance"]["source"]
    assert source["vcs"] == "git"
    assert source["commit"] == git(repo, "rev-parse", "HEAD")
    assert source["branch"] == "main"
    assert source["dirty"] is False
    assert source["untracked"] == []
    assert source["archive"] is None
    assert result["archive_path"] is None and result["archive_sha256"] is None
    assert not (runs / "r1" / "source.tar").exists()
    paths = [entry["path"] for entry in source["files"]]
    assert paths == sorted([".gitignore", "name with space.txt", "pkg/model.py", "run.sh", "train.py"])
    by_path = dict((entry["path"], entry) for entry in source["files"])
    assert by_path["run.sh"]["mode"] == "0755" and by_path["train.py"]["mode"] == "0644"
    assert by_path["train.py"]["sha256"] == sha256(repo / "train.py")
    assert by_path["train.py"]["size"] == len("print('train')\n")
    assert result["files"] == 5 and result["bytes"] == sum(e["size"] for e in source["files"])
    assert result["changed"] is True
    written = json.loads((runs / "r1" / "provenance.json").read_text())
    assert written == result["provenance"]


def test_manifest_is_coreutils_format_and_verifies_with_sha256sum(repo, runs):
    result = record(repo, runs)
    manifest = runs / "r1" / "source.sha256"
    assert result["source_manifest_path"] == str(manifest)
    assert manifest_hashes(manifest.read_text()) == tree_hashes(repo)
    done = subprocess.run(
        ["sha256sum", "--strict", "-c", str(manifest)], cwd=repo, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (runs / "r1" / "source.files").read_text().splitlines() == sorted(tree_hashes(repo))
    # A changed byte is caught by the same command.
    write(repo / "pkg" / "model.py", "W = 2\n")
    done = subprocess.run(["sha256sum", "-c", str(manifest)], cwd=repo, capture_output=True, text=True, check=False)
    assert done.returncode == 1 and "pkg/model.py: FAILED" in done.stdout


def test_dirty_tree_lists_untracked_excludes_ignored_and_is_archived(repo, runs):
    make_dirty(repo)
    result = record(repo, runs)
    source = result["provenance"]["source"]
    assert source["dirty"] is True
    assert source["untracked"] == ["notes/new.txt"]
    paths = [entry["path"] for entry in source["files"]]
    assert "notes/new.txt" in paths and "train.py" in paths
    assert "debug.log" not in paths and not any(p.startswith("ignored_dir/") for p in paths)
    archive = runs / "r1" / "source.tar"
    assert result["archive_path"] == str(archive)
    assert result["archive_sha256"] == sha256(archive) == source["archive"]["sha256"]
    assert source["archive"]["bytes"] == archive.stat().st_size
    with tarfile.open(archive) as tar:
        assert tar.getnames() == paths


def test_only_a_tracked_change_or_only_an_untracked_file_makes_a_tree_dirty(repo, runs):
    write(repo / "train.py", "print('changed')\n")
    assert record(repo, runs, "a")["provenance"]["source"]["dirty"] is True
    git(repo, "checkout", "--", "train.py")
    write(repo / "debug.log", "ignored\n")
    assert record(repo, runs, "b")["provenance"]["source"]["dirty"] is False
    write(repo / "extra.py", "x = 1\n")
    assert record(repo, runs, "c")["provenance"]["source"]["dirty"] is True


def test_dirty_tree_is_rebuilt_from_its_archive_bit_for_bit(repo, runs, tmp_path):
    make_dirty(repo)
    os.symlink("train.py", repo / "link_to_train")
    result = record(repo, runs)
    source = result["provenance"]["source"]
    rebuilt = tmp_path / "rebuilt"
    extract(runs / "r1" / "source.tar", rebuilt)
    # Every rebuilt file hashes as the manifest says and as the original working tree (ignored files excepted).
    expected = dict((e["path"], e["sha256"]) for e in source["files"] if e["type"] == "file")
    assert tree_hashes(rebuilt) == expected == manifest_hashes((runs / "r1" / "source.sha256").read_text())
    original = tree_hashes(repo)
    assert dict((p, original[p]) for p in expected) == expected
    assert set(original) - set(expected) == {"debug.log", "ignored_dir/big.bin"}
    assert os.readlink(rebuilt / "link_to_train") == "train.py"
    for entry in source["files"]:
        if entry["type"] == "file":
            assert "%04o" % (os.stat(rebuilt / entry["path"]).st_mode & 0o7777) == entry["mode"]
    # GNU tar and sha256sum, with no tool of ours, rebuild and verify the same tree.
    by_tar = tmp_path / "by_tar"
    by_tar.mkdir()
    subprocess.run(["tar", "-xpf", str(runs / "r1" / "source.tar"), "-C", str(by_tar)], check=True)
    done = subprocess.run(["sha256sum", "--strict", "-c", str(runs / "r1" / "source.sha256")], cwd=by_tar, check=False)
    assert done.returncode == 0
    # Recording the rebuilt tree (not in git) archives the same files into the same bytes.
    again = record(rebuilt, tmp_path / "runs2", "rebuilt")
    assert again["provenance"]["source"]["vcs"] is None
    assert again["archive_sha256"] == result["archive_sha256"]


def test_archive_is_deterministic(repo, runs, tmp_path):
    make_dirty(repo)
    first = record(repo, runs, "a")["archive_sha256"]
    second = record(repo, runs, "b")["archive_sha256"]
    assert first == second == sha256(runs / "a" / "source.tar") == sha256(runs / "b" / "source.tar")
    # A copy of the tree with other mtimes (and written later) gives the same archive.
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    for top, _dirs, files in os.walk(copy):
        for name in files:
            os.utime(os.path.join(top, name), (1000000, 1000000))
    assert record(copy, runs, "c")["archive_sha256"] == first
    with tarfile.open(runs / "a" / "source.tar") as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == sorted(m.name for m in members)
        for member in members:
            assert (member.mtime, member.uid, member.gid, member.uname, member.gname) == (0, 0, 0, "", "")
            assert member.pax_headers == {}
    raw = (runs / "a" / "source.tar").read_bytes()
    assert b"mtime=" not in raw and b"atime=" not in raw and b"ctime=" not in raw


def test_long_names_are_archived_without_pax_headers(repo, runs, tmp_path):
    deep = "d" * 60 + "/" + "e" * 60 + "/" + "f" * 90 + ".txt"
    write(repo / deep, "deep\n")
    result = record(repo, runs)
    raw = (runs / "r1" / "source.tar").read_bytes()
    assert b"PaxHeader" not in raw and b"././@LongLink" in raw
    rebuilt = tmp_path / "rebuilt"
    extract(runs / "r1" / "source.tar", rebuilt)
    assert (rebuilt / deep).read_text() == "deep\n"
    assert record(repo, runs, "r2")["archive_sha256"] == result["archive_sha256"]


def reference_tar(src, entries):
    """The same archive built by Python's tarfile (GNU format, same fixed fields)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT, encoding="utf-8") as tar:
        for entry in entries:
            info = tarfile.TarInfo(entry["path"])
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if entry["type"] == "symlink":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry["target"], 0o777
                tar.addfile(info)
            else:
                info.mode, info.size = int(entry["mode"], 8), entry["size"]
                with open(os.path.join(src, entry["path"]), "rb") as handle:
                    tar.addfile(info, handle)
    return buffer.getvalue()


def test_archive_bytes_are_pythons_gnu_tar(repo, runs, tmp_path):
    # Written by our own header code (tarfile's bytes vary with the Python version); the same bytes as
    # tarfile's GNU format on Python >= 3.9, long names and long link targets included.
    make_dirty(repo)
    write(repo / ("long-" + "n" * 120) / "file.txt", "long\n", 0o600)
    os.symlink("../" + "t" * 130, repo / "long_link")
    os.symlink("train.py", repo / "short_link")
    result = record(repo, runs)
    entries = result["provenance"]["source"]["files"]
    assert {e["type"] for e in entries} == {"file", "symlink"}
    assert (runs / "r1" / "source.tar").read_bytes() == reference_tar(str(repo), entries)
    listing = subprocess.run(
        ["tar", "-tvf", str(runs / "r1" / "source.tar")], capture_output=True, text=True, check=True
    )
    assert "long_link -> ../" + "t" * 130 in listing.stdout
    assert "long-" + "n" * 120 + "/file.txt" in listing.stdout


def test_deleted_tracked_file_is_skipped_and_the_tree_dirty(repo, runs):
    (repo / "pkg" / "model.py").unlink()
    source = record(repo, runs)["provenance"]["source"]
    assert source["dirty"] is True
    assert {"path": "pkg/model.py", "reason": "deleted"} in source["skipped"]
    assert "pkg/model.py" not in [e["path"] for e in source["files"]]


def test_archive_always_and_never(repo, runs):
    assert record(repo, runs, "a", archive="always")["archive_sha256"]
    make_dirty(repo)
    result = record(repo, runs, "b", archive="never")
    assert result["archive_sha256"] is None and not (runs / "b" / "source.tar").exists()


def test_a_stale_archive_of_the_same_run_is_removed_when_the_tree_is_clean_again(repo, runs):
    write(repo / "extra.py", "x = 1\n")
    assert record(repo, runs)["archive_sha256"]
    (repo / "extra.py").unlink()
    result = record(repo, runs)
    assert result["changed"] is True and result["archive_sha256"] is None
    assert not (runs / "r1" / "source.tar").exists()


def test_subdirectory_of_a_work_tree(repo, runs):
    write(repo / "train.py", "print('changed')\n")  # outside src: src stays clean
    source = record(repo / "pkg", runs)["provenance"]["source"]
    assert source["subdir"] == "pkg" and source["toplevel"] == str(repo)
    assert [e["path"] for e in source["files"]] == ["model.py"]
    assert source["dirty"] is False


def test_repository_without_commits_is_dirty(tmp_path, runs):
    root = tmp_path / "fresh"
    root.mkdir()
    git(root, "init", "-q")
    write(root / "a.py", "a = 1\n")
    source = record(root, runs)["provenance"]["source"]
    assert source["commit"] is None and source["dirty"] is True and source["archive"] is not None


def test_non_git_directory_lists_all_files_and_is_archived(tmp_path, runs):
    root = tmp_path / "plain"
    write(root / "a.py", "a = 1\n")
    write(root / "sub" / "b.log", "b\n")
    write(root / ".hidden", "h\n")
    result = record(root, runs)
    source = result["provenance"]["source"]
    assert source["vcs"] is None and source["commit"] is None and source["dirty"] is None
    assert [e["path"] for e in source["files"]] == [".hidden", "a.py", "sub/b.log"]
    assert result["archive_sha256"] == sha256(runs / "r1" / "source.tar")


def test_runs_dir_inside_the_source_is_left_out(repo):
    runs_inside = repo / "runs"  # not ignored by the repo's .gitignore
    make_dirty(repo)
    first = record(repo, runs_inside)
    source = first["provenance"]["source"]
    assert source["excluded"] == ["runs"]
    assert not any(e["path"].startswith("runs/") for e in source["files"])
    assert source["untracked"] == ["notes/new.txt"]
    second = record(repo, runs_inside)
    assert second["changed"] is False and second["archive_sha256"] == first["archive_sha256"]


def test_remote_url_is_recorded_without_credentials(repo, runs):
    git(repo, "remote", "add", "origin", "https://user:" + SECRET + "@git.example.invalid/team/repo.git")
    source = record(repo, runs)["provenance"]["source"]
    assert source["remote"] == "https://git.example.invalid/team/repo.git"


# --- command, config, env, pod ---------------------------------------------------------------------------


def test_command_as_list_and_as_string(repo, runs):
    listed = record(repo, runs, "a", command=["python", "-m", "x", "--name", "a b"])["provenance"]["command"]
    assert listed == {"argv": ["python", "-m", "x", "--name", "a b"], "shell": "python -m x --name 'a b'"}
    given = "python -m x --name 'a b'"
    as_string = record(repo, runs, "b", command=given)["provenance"]["command"]
    assert as_string == {"argv": listed["argv"], "shell": listed["shell"], "given": given}
    with pytest.raises(prov.ProvenanceError, match="empty"):
        record(repo, runs, "c", command=[])


def test_config_path_and_sha256(repo, runs, tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"steps": 10}\n')
    recorded = record(repo, runs, config=str(config))["provenance"]["config"]
    assert recorded == {"path": str(config), "sha256": sha256(config), "bytes": config.stat().st_size}
    with pytest.raises(prov.ProvenanceError, match="cannot read config"):
        record(repo, runs, "b", config=str(tmp_path / "missing.json"))


def test_trainer_config_hash_is_recorded_and_bad_configs_refused(repo, runs, tmp_path):
    config = tmp_path / "train.json"
    config.write_text(json.dumps({"steps": 10, "optim": {"lr": 1}, "run_id": "x"}))
    recorded = record(repo, runs, config=str(config), config_is_trainer=True)["provenance"]["config"]
    raw = json.loads(config.read_text())
    assert recorded["trainer_config_hash"] == prov.builtin_trainer_config_hash(raw)
    assert recorded["trainer_config_hash"].startswith("sha256:")
    config.write_text(json.dumps({"steps": 0}))
    with pytest.raises(prov.ProvenanceError, match="steps must be >= 1"):
        record(repo, runs, "b", config=str(config), config_is_trainer=True)
    with pytest.raises(prov.ProvenanceError, match="needs config"):
        record(repo, runs, "c", config_is_trainer=True)


def test_builtin_trainer_hash_covers_only_the_training_math():
    base = prov.builtin_trainer_config_hash({})
    assert base == prov.builtin_trainer_config_hash(
        {"run_id": "other", "device": "cpu", "checkpoint": {"keep_last": 9}}
    )
    assert base == prov.builtin_trainer_config_hash({"optim": {"lr": 0.01}, "model": {"depth": 2}})
    assert base != prov.builtin_trainer_config_hash({"seed": 1})
    assert prov.builtin_trainer_config_hash({"optim": {"lr": 1}}) == prov.builtin_trainer_config_hash(
        {"optim": {"lr": 1.0}}
    )
    for bad, message in (
        ({"stepz": 1}, "unknown config key"),
        ({"model": {"depth": True}}, "model.depth must be an integer"),
        ({"model": []}, "model must be a mapping"),
        ({"data": {"samples": 8, "batch_size": 16}}, "data.samples must be >= data.batch_size"),
    ):
        with pytest.raises(prov.ProvenanceError, match=message):
            prov.builtin_trainer_config_hash(bad)


def test_trainer_config_hash_equals_trainops_train_when_importable(tmp_path):
    trainer_config = pytest.importorskip("trainops_train.config")  # also tested in training/tests
    config = tmp_path / "train.json"
    config.write_text(json.dumps({"seed": 7, "model": {"dropout": 0}, "checkpoint": {"mode": "auto"}}))
    expected = trainer_config.config_hash(trainer_config.load(config))
    assert prov.trainer_config_hash(str(config), config.read_bytes()) == expected
    assert prov.builtin_trainer_config_hash(json.loads(config.read_text())) == expected


def test_env_secrets_are_redacted_by_name():
    env = {
        "HF_TOKEN": SECRET,
        "wandb_api_key": "k" * 10,
        "DB_PASSWORD": PASSWORD,
        "AWS_SECRET_ACCESS_KEY": "s" * 12,
        "GIT_PASSWD": "p" * 8,
        "GOOGLE_APPLICATION_CREDENTIALS": "/c.json",
        "HTTP_AUTH": "a" * 7,
        "PRIVATE_THING": "q" * 9,
        "OMP_NUM_THREADS": 8,
        "DEBUG": True,
    }
    recorded, names, values = prov.redact_env(env)
    plain = {"OMP_NUM_THREADS": "8", "DEBUG": "True"}
    assert recorded == dict(dict((name, prov.REDACTED) for name in env if name not in plain), **plain)
    assert names == sorted(set(env) - set(plain))
    assert SECRET in values and "/c.json" in values


def test_secret_env_values_are_never_written(repo, runs):
    make_dirty(repo)
    # The secret also appears in the command and a file of the tree: the record never holds it anywhere.
    result = record(
        repo,
        runs,
        command=["python", "train.py", "--token=" + SECRET],
        env={"HF_TOKEN": SECRET, "DB_PASSWORD": PASSWORD, "USE_AUTH": "1", "OMP_NUM_THREADS": "1"},
        pod={"id": "pod-" + PASSWORD},
    )
    provenance = result["provenance"]
    assert provenance["env"] == {
        "DB_PASSWORD": prov.REDACTED,
        "HF_TOKEN": prov.REDACTED,
        "OMP_NUM_THREADS": "1",
        "USE_AUTH": prov.REDACTED,
    }
    assert provenance["command"]["argv"][-1] == "--token=" + prov.REDACTED
    assert provenance["pod"] == {"id": "pod-" + prov.REDACTED}
    assert SECRET not in json.dumps(provenance) and PASSWORD not in json.dumps(provenance)
    written = list((runs / "r1").iterdir())
    assert {p.name for p in written} == {"provenance.json", "source.sha256", "source.files", "source.tar"}
    for path in written:
        data = path.read_bytes()
        assert SECRET.encode() not in data and PASSWORD.encode() not in data, path


def test_a_secret_value_in_a_source_path_is_refused_not_rewritten(repo, runs):
    write(repo / ("cache-" + SECRET) / "x.py", "x\n")
    with pytest.raises(prov.ProvenanceError, match="secret env HF_TOKEN"):
        record(repo, runs, env={"HF_TOKEN": SECRET})
    assert not runs.exists()


def test_pod_is_recorded_as_given(repo, runs):
    pod = {"id": "abc123", "gpu_type": "NVIDIA H100 80GB HBM3", "gpu_count": 2, "data_center": "EU-RO-1"}
    assert record(repo, runs, pod=pod)["provenance"]["pod"] == pod
    with pytest.raises(prov.ProvenanceError, match="unknown key"):
        record(repo, runs, "b", pod={"id": "x", "region": "y"})


def test_timestamps_host_and_tools(repo, runs):
    provenance = record(repo, runs)["provenance"]
    assert provenance["recorded_at"].endswith("+00:00") and "T" in provenance["recorded_at"]
    assert provenance["source"]["commit_time"].endswith("+00:00")
    assert provenance["controller"]["hostname"]
    assert provenance["tools"]["collection"] == prov.COLLECTION_VERSION
    assert provenance["tools"]["git"] and provenance["tools"]["python"]
    assert provenance["result"] == {"exit_code": None, "status": "unknown"}


# --- idempotence, check mode, run ids ----------------------------------------------------------------------


def test_second_run_is_unchanged_and_keeps_the_first_timestamps(repo, runs):
    make_dirty(repo)
    first = record(repo, runs, now="2026-12-03T00:15:02.123456+00:00")
    before = dict((p.name, (p.read_bytes(), p.stat().st_mtime_ns)) for p in (runs / "r1").iterdir())
    second = record(repo, runs)
    assert first["changed"] is True and second["changed"] is False
    assert second["provenance"] == first["provenance"]
    assert second["provenance"]["recorded_at"] == "2026-12-03T00:15:02.123456+00:00"
    assert dict((p.name, (p.read_bytes(), p.stat().st_mtime_ns)) for p in (runs / "r1").iterdir()) == before
    # A changed file is a changed record, with a new timestamp.
    write(repo / "notes" / "new.txt", "edited\n")
    third = record(repo, runs)
    assert third["changed"] is True and third["provenance"]["recorded_at"] != first["provenance"]["recorded_at"]
    assert third["archive_sha256"] != first["archive_sha256"]
    # So is a changed command, env value or pod.
    assert record(repo, runs, command=["python", "other.py"])["changed"] is True
    assert record(repo, runs, command=["python", "other.py"], env={"A": "1"})["changed"] is True
    assert record(repo, runs, command=["python", "other.py"], env={"A": "1"})["changed"] is False


def test_a_recorded_result_is_kept(repo, runs):
    record(repo, runs)
    path = runs / "r1" / "provenance.json"
    data = json.loads(path.read_text())
    data["result"] = {"exit_code": 0, "status": "finished"}
    path.write_text(json.dumps(data))
    again = record(repo, runs)
    assert again["provenance"]["result"] == {"exit_code": 0, "status": "finished"}
    assert json.loads(path.read_text())["result"] == {"exit_code": 0, "status": "finished"}


def test_check_mode_computes_everything_and_writes_nothing(repo, runs):
    make_dirty(repo)
    predicted = record(repo, runs, check_mode=True)
    assert predicted["changed"] is True and not runs.exists()
    real = record(repo, runs)
    assert predicted["archive_sha256"] == real["archive_sha256"]
    assert predicted["provenance"]["source"] == real["provenance"]["source"]
    assert record(repo, runs, check_mode=True)["changed"] is False
    write(repo / "notes" / "new.txt", "edited\n")
    before = dict((p.name, p.read_bytes()) for p in (runs / "r1").iterdir())
    assert record(repo, runs, check_mode=True)["changed"] is True
    assert dict((p.name, p.read_bytes()) for p in (runs / "r1").iterdir()) == before


@pytest.mark.parametrize("run_id", ["", "../x", "a/b", ".", "..", ".hidden", "a b", "x" * 129, "r\n", "-r", None])
def test_bad_run_id_fails_before_anything_is_read_or_written(tmp_path, runs, run_id):
    with pytest.raises(prov.ProvenanceError, match=r"^run_id .*must be (a string of )?1-128 letters, digits"):
        prov.record(str(tmp_path / "does-not-exist"), run_id, runs_dir=str(runs), command=["x"])
    assert not runs.exists()


def test_atomic_write_leaves_no_temporary_file_on_failure(tmp_path):
    target = tmp_path / "out.json"

    def fail(handle):
        handle.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        prov.atomic_write(str(target), fail)
    assert list(tmp_path.iterdir()) == []


def test_file_changing_while_archived_fails(repo, tmp_path):
    write(repo / "extra.py", "x = 1\n")
    found = prov.collect(str(repo), "r1", str(tmp_path / "runs"), ["x"])
    write(repo / "extra.py", "x = 2\n")
    with pytest.raises(prov.ProvenanceError, match=r"extra\.py changed while archiving"):
        prov.write_archive(found.src, found.entries, io.BytesIO())


def test_manifest_escapes_backslashes_like_coreutils(tmp_path, runs):
    root = tmp_path / "plain"
    write(root / "a\\b.txt", "x\n")
    record(root, runs)
    manifest = runs / "r1" / "source.sha256"
    assert manifest.read_text().startswith("\\")
    assert subprocess.run(["sha256sum", "--strict", "-c", str(manifest)], cwd=root, check=False).returncode == 0


def test_file_names_with_line_breaks_are_refused(tmp_path, runs):
    root = tmp_path / "plain"
    write(root / "a\nb.txt", "x\n")
    with pytest.raises(
        prov.ProvenanceError, match=r"line break: the source record \(source.files, one path a line.*rename the file"
    ):
        record(root, runs)
    assert not runs.exists()


# --- the module --------------------------------------------------------------------------------------------


def run_module(capsys, args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args), pytest.raises(SystemExit) as exited:
        module.main()
    return exited.value.code, json.loads(capsys.readouterr().out)


def test_module_hides_secret_values_and_only_those(repo, runs, capsys):
    make_dirty(repo)
    args = {
        "src": str(repo),
        "run_id": "m1",
        "runs_dir": str(runs),
        "command": "python train.py",
        "env": {"HF_TOKEN": SECRET, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "0"},
        "pod": {"id": "abc", "gpu_count": 1},
    }
    rc, result = run_module(capsys, args)
    assert rc == 0, result
    assert SECRET not in json.dumps(result)
    assert result["invocation"]["module_args"]["env"] == {
        "HF_TOKEN": prov.REDACTED,
        "OMP_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "0",
    }
    # Non-secret values ("1", "0") are not masked inside the hashes of the result.
    assert "********" not in json.dumps(result)
    assert result["archive_sha256"] == sha256(runs / "m1" / "source.tar")
    assert result["provenance"]["pod"] == {"id": "abc", "gpu_count": 1}
    assert result["changed"] is True
    rc, again = run_module(capsys, args)
    assert again["changed"] is False


def test_module_check_mode_writes_nothing(repo, runs, capsys):
    rc, result = run_module(capsys, {"src": str(repo), "run_id": "m1", "runs_dir": str(runs), "command": ["x"]}, True)
    assert rc == 0 and result["changed"] is True and not runs.exists()
    assert result["path"] == str(runs / "m1" / "provenance.json")


def test_module_bad_run_id_fails_before_writing(repo, runs, capsys):
    rc, result = run_module(capsys, {"src": str(repo), "run_id": "../escape", "runs_dir": str(runs), "command": "x"})
    assert rc == 1 and result["failed"] and "run_id '../escape' must be 1-128 letters" in result["msg"]
    assert not runs.exists() and not (runs.parent / "escape").exists()


# --- the hash cache ---------------------------------------------------------------------------------------


def cached_record(src, runs_dir, **kwargs):
    return record(src, runs_dir, hash_cache=prov.hash_cache_path(str(runs_dir), str(src)), **kwargs)


def test_hash_cache_reads_only_changed_files_and_records_the_same(repo, runs, monkeypatch):
    # The first record reads the files in the tick they were written (pinned: a loaded machine reaches the read
    # later), so none is kept: racy.
    newest = max(os.stat(path).st_ctime_ns for path in repo.rglob("*") if ".git" not in path.parts)
    monkeypatch.setattr(prov.time, "time_ns", lambda: newest)
    first = cached_record(repo, runs)
    assert first["hash_stats"] == {"cached": 0, "read": 5}
    cache_file = pathlib.Path(prov.hash_cache_path(str(runs), str(repo)))
    assert cache_file.parent == runs / ".cache" / "source-hashes"
    # Files written just now are racy: not kept until their ctime is a tick in the past.
    monkeypatch.setattr(prov.time, "time_ns", lambda: os.stat(repo).st_ctime_ns + 5 * 10**9)
    second = cached_record(repo, runs)
    assert second["hash_stats"] == {"cached": 0, "read": 5}
    third = cached_record(repo, runs)
    assert third["hash_stats"] == {"cached": 5, "read": 0}
    assert third["provenance"]["source"] == first["provenance"]["source"]
    assert not third["changed"]
    uncached = record(repo, runs)
    assert uncached["provenance"]["source"]["manifest_sha256"] == first["provenance"]["source"]["manifest_sha256"]
    assert uncached["hash_stats"] is None


def test_hash_cache_sees_an_edit_with_size_and_mtime_restored(repo, runs, monkeypatch):
    monkeypatch.setattr(prov.time, "time_ns", lambda: os.stat(repo / "train.py").st_ctime_ns + 5 * 10**9)
    cached_record(repo, runs)
    assert cached_record(repo, runs)["hash_stats"]["read"] == 0
    target = repo / "train.py"
    before = target.stat()
    target.write_text("print('TRAIN')\n")  # same size
    os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert target.stat().st_size == before.st_size and target.stat().st_mtime_ns == before.st_mtime_ns
    monkeypatch.setattr(prov.time, "time_ns", lambda: target.stat().st_ctime_ns + 5 * 10**9)
    again = cached_record(repo, runs)
    assert again["hash_stats"] == {"cached": 4, "read": 1}
    entry = next(e for e in again["provenance"]["source"]["files"] if e["path"] == "train.py")
    assert entry["sha256"] == sha256(target)


def test_racy_files_are_not_cached(repo, runs, monkeypatch):
    newest = max(os.stat(path).st_ctime_ns for path in repo.rglob("*") if ".git" not in path.parts)
    cache_file = pathlib.Path(prov.hash_cache_path(str(runs), str(repo)))
    # Read 50 ms after the newest change: within a tick of it (0.1 s on a filesystem with sub-second times).
    monkeypatch.setattr(prov.time, "time_ns", lambda: newest + 50 * 10**6)
    assert cached_record(repo, runs)["hash_stats"] == {"cached": 0, "read": 5}
    assert not cache_file.exists() or "train.py" not in json.loads(cache_file.read_text())["files"]
    monkeypatch.setattr(prov.time, "time_ns", lambda: newest + 150 * 10**6)
    assert cached_record(repo, runs)["hash_stats"] == {"cached": 0, "read": 5}
    assert len(json.loads(cache_file.read_text())["files"]) == 5
    assert cached_record(repo, runs)["hash_stats"] == {"cached": 5, "read": 0}


def test_a_damaged_or_foreign_cache_costs_a_full_read_only(repo, runs, monkeypatch):
    monkeypatch.setattr(prov.time, "time_ns", lambda: os.stat(repo).st_ctime_ns + 5 * 10**9)
    first = cached_record(repo, runs)
    cache_file = pathlib.Path(prov.hash_cache_path(str(runs), str(repo)))
    for damage in ("{not json", json.dumps({"version": 99, "files": {}}), json.dumps({"version": 1, "files": []})):
        cache_file.write_text(damage)
        again = cached_record(repo, runs)
        assert again["hash_stats"] == {"cached": 0, "read": 5}
        assert again["provenance"]["source"] == first["provenance"]["source"]
    # A wrong hash under the right identity would be trusted: the cache is keyed by what no user call can
    # forge back (ctime), so only a hand edit of the cache file makes one. The record then says so.
    data = json.loads(cache_file.read_text())
    assert set(data["files"]) == {"train.py", "run.sh", "pkg/model.py", ".gitignore", "name with space.txt"}


def test_check_mode_does_not_write_the_cache(repo, runs):
    cached_record(repo, runs, check_mode=True)
    assert not (runs / ".cache").exists()


def test_the_requirements_venv_is_recorded_with_its_freeze_not_how_this_bootstrap_got_it(repo, runs):
    venv = {
        "requirements": "requirements.txt",
        "state": "built",
        "seconds": 12.5,
        "key": "ab12" * 4,
        "python": "/workspace/cache/venvs/ab12/bin/python",
        "venv_dir": "/workspace/cache/venvs/ab12",
        "freeze": ["tinydep==1.0"],
        "installed": ["tinydep==1.0"],
    }
    first = record(repo, runs, venv=venv)
    recorded = json.loads((runs / "r1" / "provenance.json").read_text())["venv"]
    assert recorded == {k: venv[k] for k in ("requirements", "key", "python", "venv_dir", "freeze")}
    assert first["provenance"]["venv"] == recorded
    # The same venv reused by a later bootstrap records the same thing: nothing changes.
    assert record(repo, runs, venv=dict(venv, state="reused", seconds=0.3, installed=[]))["changed"] is False
    assert record(repo, runs, venv=dict(venv, freeze=["tinydep==1.1"]))["changed"] is True
    assert record(repo, runs, run_id="r2")["provenance"]["venv"] is None
    with pytest.raises(prov.ProvenanceError, match=r"venv\.freeze must be a list of strings"):
        record(repo, runs, venv=dict(venv, freeze="tinydep==1.0"))
    with pytest.raises(prov.ProvenanceError, match=r"venv\.key must be a non-empty string"):
        record(repo, runs, venv=dict(venv, key=""))
