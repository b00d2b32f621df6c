"""The runbook (docs/runpod_execution.md) cannot drift from the code: its emulator commands are extracted and run,
in order and in one bash session, against a podman emulator (smoke.yml end to end, the same run again with no
change, the audit); its RunPod commands are checked for names that exist (playbooks, modules and their options,
playbook variables, make targets). docs/gotchas.md is checked the same way: every test, role, playbook and
molecule scenario it cites exists.

One emulator and one pod for the module (about 60 s on an idle 2-core machine).
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RUNBOOK = ROOT / "docs" / "runpod_execution.md"
GOTCHAS = ROOT / "docs" / "gotchas.md"
BIN = Path(sys.executable).parent

MARKER = re.compile(r"^<!-- runbook: (emulator|runpod)(?: (setup|not-run: .+?))? -->$")


def option_names(arguments: str) -> set[str]:
    """The option names of an ad-hoc `-a "k=v k2=v2"` string. (Not ansible's parse_kv: importing ansible in this
    process patches sys.intern, which breaks torch._dynamo in the training tests of the same pytest run.)"""
    return {word.split("=", 1)[0] for word in shlex.split(arguments) if "=" in word}


RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


@dataclass
class Block:
    """One ```console block of the runbook and the marker above it."""

    line: int
    target: str  # emulator | runpod
    mode: str  # run | setup | not-run
    reason: str = ""
    commands: list[str] = field(default_factory=list)


def parse_runbook(text: str) -> list[Block]:
    """Every ```console block with its marker; a block without a marker is returned with target ''."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        above = lines[i - 1].strip() if i > 0 else ""
        found = MARKER.match(above)
        mode_text = (found.group(2) or "run") if found else ""
        block = Block(
            line=i + 1,
            target=found.group(1) if found else "",
            mode=mode_text.split(":")[0],
            reason=mode_text.split(":", 1)[1].strip() if ":" in mode_text else "",
        )
        i += 1
        pending = ""
        while i < len(lines) and lines[i].strip() != "```":
            raw = lines[i]
            if pending:
                pending += " " + raw.strip()
            elif raw.startswith("$ "):
                pending = raw[2:].strip()
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
            elif pending:
                block.commands.append(pending)
                pending = ""
            i += 1
        blocks.append(block)
        i += 1
    return blocks


BLOCKS = parse_runbook(RUNBOOK.read_text())


def emulator_commands() -> list[str]:
    return [c for b in BLOCKS if b.target == "emulator" and b.mode == "run" for c in b.commands]


def argument_spec_options(path: Path, key: str | None = None) -> set[str]:
    document = yaml.safe_load(path.read_text())
    if key is not None:
        return set(document[key])
    return {name for spec in document["argument_specs"].values() for name in spec.get("options", {})}


def module_options(name: str) -> set[str]:
    """Options of plugins/modules/<name>.py from its DOCUMENTATION plus every RunPod doc fragment."""
    options: set[str] = set()
    sources = [ROOT / "plugins" / "modules" / f"{name}.py", ROOT / "plugins" / "doc_fragments" / "runpod.py"]
    for source in sources:
        for node in ast.walk(ast.parse(source.read_text())):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)):
                continue
            if isinstance(node.value.value, str) and any(
                isinstance(t, ast.Name) and t.id.isupper() for t in node.targets
            ):
                document = yaml.safe_load(node.value.value)
                if isinstance(document, dict):
                    options |= set(document.get("options") or {})
    return options


def make_targets() -> set[str]:
    targets = set()
    for path in [ROOT / "Makefile", *sorted((ROOT / "mk").glob("*.mk"))]:
        targets |= set(re.findall(r"^([A-Za-z][A-Za-z0-9_-]*):(?!=)", path.read_text(), re.M))
    return targets


# A shell variable set from a command's output: `NAME=$(command | filter)`; the command's names are checked.
CAPTURED = re.compile(r"^[A-Z][A-Z0-9_]*=\$\((.+)\)$", re.S)


def names_problems(command: str) -> list[str]:
    """What a command names that does not exist: playbooks, modules and their -a options, -e variables, targets."""
    captured = CAPTURED.match(command)
    if captured:
        return names_problems(captured.group(1).split(" | ", 1)[0])
    words = shlex.split(command)
    problems = []
    specs = {
        "smoke_": argument_spec_options(ROOT / "roles" / "smoke" / "meta" / "argument_specs.yml"),
        "teardown_": argument_spec_options(ROOT / "roles" / "teardown" / "meta" / "argument_specs.yml"),
        "resume_drill_": argument_spec_options(ROOT / "roles" / "resume_drill" / "meta" / "argument_specs.yml"),
        "audit_": {
            name for play in yaml.safe_load((ROOT / "playbooks" / "audit.yml").read_text()) for name in play["vars"]
        },
    }
    for word in words:
        if re.fullmatch(r"playbooks/[\w.-]+\.yml|inventories/[\w.-]+\.yml", word) and not (ROOT / word).is_file():
            problems.append(f"{word} does not exist")
    ansible = words[:1] in (["ansible"], ["ansible-playbook"], ["ansible-inventory"])
    for flag, value in itertools.pairwise(words) if ansible else ():
        if flag == "-m":
            module = value.removeprefix("trainops.gpu.")
            if not (ROOT / "plugins" / "modules" / f"{module}.py").is_file():
                problems.append(f"module {value} does not exist")
                continue
            arguments = next((v for f, v in itertools.pairwise(words) if f == "-a"), "")
            unknown = option_names(arguments) - module_options(module)
            problems += [f"{value} has no option {name}" for name in sorted(unknown)]
        if flag == "-e" and not value.startswith("@"):
            names = list(json.loads(value)) if value.startswith("{") else [value.split("=", 1)[0]]
            for name, (prefix, options) in itertools.product(names, specs.items()):
                if name.startswith(prefix) and name not in options:
                    problems.append(f"{name} is not a variable of the {prefix.rstrip('_')} playbook/role")
    if words[:1] == ["make"]:
        for target in (w for w in words[1:] if "=" not in w and not w.startswith("-")):
            if target not in make_targets():
                problems.append(f"make target {target} does not exist")
    return problems


def test_every_command_block_is_marked_and_the_flow_is_complete():
    unmarked = [b.line for b in BLOCKS if not b.target]
    assert not unmarked, f"```console blocks without a <!-- runbook: ... --> marker at lines {unmarked}"
    assert all(b.commands for b in BLOCKS), [b.line for b in BLOCKS if not b.commands]
    for block in (b for b in BLOCKS if b.mode == "not-run"):
        named = re.findall(r"tests/[\w/]+\.py", block.reason)
        assert named and all((ROOT / n).is_file() for n in named), f"line {block.line}: name the test that runs it"
    smoke_runs = [c for c in emulator_commands() if "playbooks/smoke.yml" in c]
    assert len(smoke_runs) >= 2 and smoke_runs[0] == smoke_runs[1], smoke_runs
    # Each step that has a RunPod command has its emulator variant, and the reverse.
    sections = re.split(r"^## ", RUNBOOK.read_text(), flags=re.M)
    for section in sections[1:]:
        kinds = {b.target for b in parse_runbook(section)}
        assert kinds in (set(), {"emulator", "runpod"}) or section.startswith("0."), (section[:40], kinds)


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: f"line{b.line}-{b.target}")
def test_commands_name_what_exists(block: Block):
    problems = [f"{command}: {p}" for command in block.commands for p in names_problems(command)]
    assert not problems, "\n".join(problems)


def test_the_data_center_comes_from_the_catalog_not_the_runbook():
    # Step 3 picks the data center where the GPU type has stock (runpod_catalog_info's placement, a fallback list
    # of candidates) into $TRAINOPS_DATA_CENTER; every later command takes it from there, none names one itself.
    commands = [(b.target, c) for b in BLOCKS for c in b.commands]
    for target in ("emulator", "runpod"):
        picks = [c for t, c in commands if t == target and c.startswith("TRAINOPS_DATA_CENTER=$(")]
        assert len(picks) == 1, (target, picks)
        words = shlex.split(CAPTURED.match(picks[0]).group(1).split(" | ", 1)[0])
        assert words[words.index("-m") + 1] == "trainops.gpu.runpod_catalog_info", picks[0]
        options = dict(w.split("=", 1) for w in shlex.split(words[words.index("-a") + 1]) if "=" in w)
        assert options["availability"] == "true" and len(options["data_center_ids"].split(",")) >= 2, options
        assert any(c == "export TRAINOPS_DATA_CENTER" for t, c in commands if t == target)
        volumes = [c for t, c in commands if t == target and "runpod_network_volume" in c and "state=absent" not in c]
        assert volumes and all("data_center=$TRAINOPS_DATA_CENTER" in c for c in volumes), volumes
    pinned = [c for _t, c in commands if re.search(r"data_center=(?!\"?\$TRAINOPS_DATA_CENTER)|data_center_ids=\[", c)]
    assert not pinned, f"commands that name a data center themselves: {pinned}"
    drill = [c for t, c in commands if t == "runpod" and "playbooks/resume_drill.yml" in c]
    assert drill and all('resume_drill_data_center="$TRAINOPS_DATA_CENTER"' in c for c in drill), drill


def test_the_runbook_says_where_ssh_keys_and_the_api_key_reach():
    text = " ".join(RUNBOOK.read_text().split())
    assert "an account key reaches only the pods created after it was registered" in text
    assert "`RUNPOD_API_KEY` carries the key" in text
    assert "inventories/runpod.runpod.yml" in text and (ROOT / "inventories" / "runpod.runpod.yml").is_file()
    config = yaml.safe_load((ROOT / "inventories" / "runpod.runpod.yml").read_text())
    assert config["plugin"] == "trainops.gpu.runpod" and "'RUNPOD_API_KEY'" in config["api_key"], config
    runpod_inventories = [c for b in BLOCKS if b.target == "runpod" for c in b.commands if "runpod.runpod.yml" in c]
    assert any(c.startswith("ansible-inventory ") for c in runpod_inventories), runpod_inventories


def test_gotchas_cite_real_code():
    text = GOTCHAS.read_text()
    sources = "\n".join(
        p.read_text(errors="replace")
        for top in ("tests", "emulator", "training", "extensions")
        for p in (ROOT / top).rglob("*.py")
        if ".venv" not in p.parts
    )
    defined = set(re.findall(r"^\s*def (test_\w+)", sources, re.M))
    cited = set(re.findall(r"`(test_\w+)`", text)) | set(re.findall(r"::(test_\w+)", text))
    assert cited, "docs/gotchas.md cites no test"
    assert not cited - defined, f"tests cited in docs/gotchas.md that do not exist: {sorted(cited - defined)}"
    paths = set(re.findall(r"`((?:roles|playbooks|extensions/molecule|plugins/module_utils)/[\w./-]+)`", text))
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"paths cited in docs/gotchas.md that do not exist: {missing}"
    modules = set(re.findall(r"`(runpod_\w+|checkpoint_verify|run_state|pod_facts|job)`", text))
    missing = sorted(m for m in modules if not (ROOT / "plugins" / "modules" / f"{m}.py").is_file())
    assert not missing, f"modules cited in docs/gotchas.md that do not exist: {missing}"


# The emulator run -------------------------------------------------------------------------------------------


def snapshot_checkout(dest: Path) -> Path:
    """A copy of the working tree as git sees it (tracked and untracked-not-ignored files, links kept), with its
    own collections/ link: the commands run in a checkout that nothing edits while they run."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source, target = ROOT / name, dest / name
        if not source.is_symlink() and not source.is_file():
            continue  # deleted in the work tree
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)
    link = dest / "collections" / "ansible_collections" / "trainops" / "gpu"
    link.parent.mkdir(parents=True)
    link.symlink_to(dest)
    return dest


@dataclass
class Session:
    emulator: Any
    checkout: Path
    home: Path
    runs: Path
    outputs: list[tuple[str, int, str]]

    def pod(self, pod_id: str) -> tuple[int, Any]:
        status, _headers, body = self.emulator.api("GET", f"/v2/pods/{pod_id}")
        return status, body


def recap(output: str) -> dict[str, dict[str, int]]:
    return {
        host: {"ok": int(ok), "changed": int(changed), "unreachable": int(unreachable), "failed": int(failed)}
        for host, ok, changed, unreachable, failed in RECAP.findall(output)
    }


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory, pod_image: str):
    """The runbook's emulator commands, run in one bash session against a private podman emulator."""
    from runpod_emulator.testing import EmulatorProcess

    tmp = tmp_path_factory.mktemp("runbook")
    checkout = snapshot_checkout(tmp / "checkout")
    home, runs, out = tmp / "home", checkout / "runs", tmp / "out"
    for directory in (home, runs, out):
        directory.mkdir()
    commands = emulator_commands()
    # What `make emulator-start` leaves in its state directory: emulator.json (the emulator writes it) and api-key.
    with EmulatorProcess(
        backend="podman", state_dir=tmp / "emulator", extra_args=["--container-prefix", "rpbook"]
    ) as emulator:
        (emulator.state_dir / "api-key").write_text(emulator.api_key + "\n")
        script = ["set -u"]
        for index, command in enumerate(commands):
            # A brace group runs in this shell, so an export carries to the next command as it would for a reader.
            script += [
                f"start=$(date +%s.%N); {{ {command}\n}} > {out}/{index}.log 2>&1 < /dev/null",
                f"rc=$?; echo $rc $start $(date +%s.%N) > {out}/{index}.rc; [ $rc -eq 0 ] || exit $rc",
            ]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNPOD_", "ANSIBLE_", "TRAINOPS_"))}
        env.update(
            HOME=str(home),
            PATH=f"{BIN}:{env.get('PATH', '')}",
            ANSIBLE_COLLECTIONS_PATH=str(checkout / "collections"),
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_FORCE_COLOR="0",
            RUNPOD_EMULATOR_STATE_DIR=str(emulator.state_dir),
        )
        subprocess.run(["bash", "-c", "\n".join(script)], cwd=checkout, env=env, timeout=600, check=False)
        outputs = []
        for index, command in enumerate(commands):
            rc_file = out / f"{index}.rc"
            if not rc_file.exists():
                break
            rc, started, ended = rc_file.read_text().split()
            outputs.append((command, int(rc), (out / f"{index}.log").read_text()))
            print(f"runbook: {float(ended) - float(started):6.1f} s  {command[:100]}")
        yield Session(emulator, checkout, home, runs, outputs)


def explain(output: str) -> str:
    return output[-6000:]


def run_smoke(session: Session, extra_vars: dict[str, Any], *args: str) -> subprocess.CompletedProcess[str]:
    """ansible-playbook playbooks/smoke.yml in the session's checkout, as the runbook's shell runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNPOD_", "ANSIBLE_", "TRAINOPS_"))}
    env.update(
        HOME=str(session.home),
        PATH=f"{BIN}:{env.get('PATH', '')}",
        ANSIBLE_COLLECTIONS_PATH=str(session.checkout / "collections"),
        ANSIBLE_NOCOLOR="1",
        RUNPOD_EMULATOR_STATE_DIR=str(session.emulator.state_dir),
        RUNPOD_API_URL=session.emulator.url,
        RUNPOD_API_KEY=session.emulator.api_key,
    )
    command = [str(BIN / "ansible-playbook"), "-i", "inventories/local.runpod.yml", "playbooks/smoke.yml"]
    return subprocess.run(
        [*command, "-e", json.dumps(extra_vars), *args],
        cwd=session.checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.podman
@pytest.mark.slow
def test_runbook_commands_run_on_the_emulator(session: Session):
    commands = emulator_commands()
    for command, rc, output in session.outputs:
        assert rc == 0, f"runbook command failed (rc {rc}): {command}\n{explain(output)}"
    assert len(session.outputs) == len(commands), "the session stopped early"

    smoke = [(c, out) for c, _rc, out in session.outputs if "playbooks/smoke.yml" in c]
    first, again = smoke[0][1], smoke[1][1]
    assert recap(first)["localhost"]["changed"] > 0, explain(first)
    assert "Smoke run smoke-1 passed" in first, explain(first)

    # The same run again: checked, not redone, nothing changed anywhere.
    totals = recap(again)
    assert totals and all(h["changed"] == 0 and h["failed"] == 0 for h in totals.values()), explain(again)
    assert "already passed" in again, explain(again)

    run_id = re.search(r"smoke_run_id=(\S+)", smoke[0][0]).group(1)
    state = json.loads((session.runs / run_id / "state.json").read_text())
    assert state["smoke"]["result"] == "passed", state
    pods = [r for r in state["resources"] if r["kind"] == "pod"]
    assert len(pods) == 1 and pods[0]["action"] == "created" and pods[0]["final"]["status"] == "TERMINATED", pods
    assert {r["kind"] for r in state["resources"]} >= {"pod", "ssh_key", "network_volume"}, state
    status, body = session.pod(pods[0]["id"])
    assert status == 404 or body["status"] == "TERMINATED", body

    # The pulled checkpoint verifies with coreutils alone.
    checkpoint = Path(state["smoke"]["checkpoint"]["path"])
    assert checkpoint.parent == session.runs / run_id / "ckpt"
    done = subprocess.run(
        ["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=checkpoint, capture_output=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert state["smoke"]["checkpoint"]["step"] == json.loads((checkpoint / "manifest.json").read_text())["step"]

    # The audit saw the volume, still there then, unattached, and the smoke pod gone with its termination recorded.
    audits = sorted(session.runs.glob("audit-*/audit.json"))
    assert len(audits) == 1, audits
    audit = json.loads(audits[0].read_text())
    volumes = [v for v in audit["network_volumes"] if v["name"] == "trainops-smoke-vol"]
    assert len(volumes) == 1 and volumes[0]["ours"] and volumes[0]["unattached"], audit["network_volumes"]
    # Where step 3's catalog request put it: among its candidates, the emulator has RTX 4090 stock HIGH in EU-SE-1
    # (MEDIUM in EU-RO-1, which the list names first); the smoke pod went there with it.
    assert volumes[0]["data_center"] == "EU-SE-1", volumes[0]
    assert pods[0]["data_center_id"] == "EU-SE-1", pods[0]
    gone = [p for p in audit["recorded_but_gone"] if p["id"] == pods[0]["id"]]
    assert gone and gone[0]["terminate_recorded"] and gone[0]["run_id"] == run_id, audit["recorded_but_gone"]
    assert audit["orphans"] == [], audit["orphans"]

    # Nothing left running, and the API key is in no output and no run file.
    _status, _headers, body = session.emulator.api("GET", "/v2/pods")
    assert [p["id"] for p in body["pods"] if p["status"] != "TERMINATED"] == []
    key = session.emulator.api_key
    assert all(key not in output for _c, _rc, output in session.outputs)
    leaked = [p for p in session.runs.rglob("*") if p.is_file() and key.encode() in p.read_bytes()]
    assert not leaked, leaked


@pytest.mark.podman
@pytest.mark.slow
def test_smoke_bad_input_fails_before_creating_anything(session: Session):
    before = session.emulator.api("GET", "/v2/pods")[2]["pods"]
    extra = {"smoke_run_id": "bad-1", "smoke_train_steps": 0, "smoke_volume_size": 5, "smoke_min_cuda_version": "12"}
    done = run_smoke(session, extra)
    assert done.returncode != 0
    for expected in ("nothing was created", "smoke_train_steps 0", "smoke_volume_size 5", "smoke_min_cuda_version 12"):
        assert expected in done.stdout, explain(done.stdout)
    assert session.emulator.api("GET", "/v2/pods")[2]["pods"] == before
    assert not (session.runs / "bad-1").exists()


@pytest.mark.podman
@pytest.mark.slow
def test_smoke_check_mode_creates_nothing(session: Session):
    before = session.emulator.api("GET", "/v2/pods")[2]["pods"]
    done = run_smoke(session, {"smoke_run_id": "check-1"}, "--check")
    assert done.returncode == 0, explain(done.stdout + done.stderr)
    assert recap(done.stdout)["localhost"]["changed"] > 0, explain(done.stdout)  # what a real run would do
    assert session.emulator.api("GET", "/v2/pods")[2]["pods"] == before
    assert not (session.runs / "check-1").exists()


@pytest.mark.parametrize("doc", [RUNBOOK, GOTCHAS], ids=lambda p: p.name)
def test_relative_links_resolve(doc: Path):
    targets = re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", doc.read_text())
    missing = sorted({t for t in targets if not (doc.parent / t).exists()})
    assert not missing, f"{doc.name} links to files that do not exist: {missing}"
