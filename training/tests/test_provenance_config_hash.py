"""The provenance module records the reference trainer's config hash: the collection's standard-library copy
(plugins/module_utils/_provenance.py, used where trainops_train is not importable) must give exactly
trainops_train.config's hash, and refuse exactly the configs the trainer refuses."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys

import pytest
from trainer_harness import write_config
from trainops_train import config as config_lib

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def prov(monkeypatch):
    """plugins/module_utils/_provenance.py, imported through the collection's path for this test only."""
    monkeypatch.syspath_prepend(str(ROOT / "collections"))
    from ansible_collections.trainops.gpu.plugins.module_utils import _provenance

    return _provenance


def trainer_hash(raw: dict) -> str:
    return config_lib.config_hash(config_lib.from_dict(raw))


def test_builtin_schema_is_the_trainers(prov):
    def fields(cls):
        return tuple((f.name, f.type, f.default_factory() if f.default is dataclasses.MISSING else f.default)
                     for f in dataclasses.fields(cls))  # fmt: skip

    top = list(fields(config_lib.TrainConfig))
    builtin = list(prov.TRAINER_FIELDS)
    assert [name for name, _k, _d in builtin] == [name for name, _k, _d in top]
    for (name, kind, default), (_n, trainer_kind, trainer_default) in zip(builtin, top, strict=True):
        if kind == "section":
            section = type(trainer_default)
            assert config_lib._SECTIONS[name] is section
            assert prov.TRAINER_SECTIONS[name] == fields(section), name
        else:
            assert (kind, default) == (trainer_kind, trainer_default), name
    assert prov.TRAINER_UNHASHED_KEYS == config_lib.UNHASHED_KEYS


def non_default_configs():
    """The defaults, then one config per field set to another valid value, then a few mixed ones."""
    yield {}
    others = {"str": None, "int": 3, "float": 0.25, "bool": True, "tuple[str, ...]": ["mod:fn"]}
    strings = {"run_id": "r-2", "device": "cpu", "mode": "seconds"}
    for field in dataclasses.fields(config_lib.TrainConfig):
        if field.name in config_lib._SECTIONS:
            for sub in dataclasses.fields(config_lib._SECTIONS[field.name]):
                value = strings.get(sub.name, others[sub.type])
                if sub.name == "samples":
                    value = 4096
                yield {field.name: {sub.name: value}}
        else:
            yield {field.name: strings.get(field.name, others[field.type])}
    yield {"optim": {"lr": 1, "weight_decay": 0}, "model": {"dropout": 0}, "data": {"noise": 1}}
    yield {"run_id": "test", "steps": 200, "checkpoint": {"every_steps": 20, "keep_last": 3}}
    yield {"seed": 0, "model": {"input_dim": 5, "hidden_dim": 7, "depth": 1, "classes": 2, "dropout": 0.999999}}


@pytest.mark.parametrize("raw", list(non_default_configs()), ids=lambda raw: json.dumps(raw, sort_keys=True))
def test_builtin_hash_equals_the_trainers(prov, raw):
    assert prov.builtin_trainer_config_hash(json.loads(json.dumps(raw))) == trainer_hash(raw)


def test_hashes_differ_where_the_trainers_differ(prov):
    hashes = {}
    for raw in non_default_configs():
        hashes.setdefault(trainer_hash(raw), set()).add(prov.builtin_trainer_config_hash(raw))
    assert all(len(values) == 1 for values in hashes.values())
    assert len(hashes) > 10  # fields in the hashed view change it


@pytest.mark.parametrize(
    "raw",
    [
        {"unknown": 1},
        {"model": {"nope": 1}},
        {"steps": 0},
        {"steps": 1.5},
        {"steps": True},
        {"device": "tpu"},
        {"run_id": ""},
        {"run_id": "a/b"},
        {"model": None},
        {"model": {"classes": 1}},
        {"model": {"dropout": 1.0}},
        {"data": {"samples": 8, "batch_size": 16}},
        {"optim": {"lr": 0}},
        {"optim": {"lr": "0.1"}},
        {"optim": {"min_lr_ratio": 1.5}},
        {"checkpoint": {"mode": "never"}},
        {"checkpoint": {"save_on_finish": 1}},
        {"telemetry_hooks": ["no-colon"]},
        {"telemetry_hooks": "mod:fn"},
        [],
    ],
    ids=json.dumps,
)
def test_builtin_refuses_what_the_trainer_refuses(prov, raw):
    with pytest.raises(config_lib.ConfigError):
        config_lib.from_dict(raw)
    with pytest.raises(prov.ProvenanceError):
        prov.builtin_trainer_config_hash(raw)


def test_the_module_records_the_trainers_hash_with_and_without_trainops_train(prov, tmp_path, monkeypatch):
    config = write_config(tmp_path, seed=99, optim={"lr": 0.5})
    expected = config_lib.config_hash(config_lib.load(config))
    assert prov.trainer_config_hash(str(config), config.read_bytes()) == expected
    # As where the package is not installed: the standard-library copy gives the same hash.
    monkeypatch.setitem(sys.modules, "trainops_train", None)
    with pytest.raises(ImportError):
        import trainops_train  # noqa: F401
    used = []
    builtin = prov.builtin_trainer_config_hash
    monkeypatch.setattr(prov, "builtin_trainer_config_hash", lambda raw: used.append(raw) or builtin(raw))
    assert prov.trainer_config_hash(str(config), config.read_bytes()) == expected
    assert prov.config_record(str(config), True)["trainer_config_hash"] == expected
    assert len(used) == 2
    bad = tmp_path / "bad.json"
    bad.write_text('{"steps": 0}')
    with pytest.raises(prov.ProvenanceError, match="steps must be >= 1"):
        prov.trainer_config_hash(str(bad), bad.read_bytes())
    yaml_config = tmp_path / "c.yml"
    yaml_config.write_text("steps: 3\n")
    with pytest.raises(prov.ProvenanceError, match="only JSON"):
        prov.trainer_config_hash(str(yaml_config), yaml_config.read_bytes())
