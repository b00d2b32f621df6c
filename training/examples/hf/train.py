"""A stock Hugging Face `Trainer` script, drilled as it is: a two-layer GPT-2 built from a config (nothing is
downloaded), a synthetic data set of token sequences, dropout on, AdamW with a linear schedule, checkpoints
every few steps, deterministic on CPU.

The lines marked `# trainops` are all it takes (docs/trainer_contract.md): the callback journals each step's
exact loss and lr, seals each `checkpoint-N`, turns SIGTERM into "save at the end of this step, stop, exit 75",
and names the checkpoint to resume from (the newest sealed one, never the Trainer's own pick).

    python train.py                          a run in ./trainops-run (TRAINOPS_RUN_DIR elsewhere)
    TRAINOPS_CONFIG=cfg.json python train.py  settings from a JSON file (the drill writes one)

HF_WRONG_RESUME shows what the drill catches (global, or per drill mode: `kill=data,sigterm=rng`):
- data: `ignore_data_skip=True`, the resumed epoch starts again from its first batch;
- rng: the resume leaves out rng_state.pth (the Trainer's RNG restore skipped), dropout draws other masks.
"""

from __future__ import annotations

import os
import sys

import torch
from trainops_train import hooks  # trainops
from trainops_train.hf import TrainopsCallback  # trainops
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

DEFAULTS = {
    "seed": 1234,
    "steps": 120,
    "samples": 256,
    "sequence": 16,
    "vocab": 64,
    "batch_size": 8,
    "lr": 1e-3,
    "warmup_steps": 10,
    "checkpoint_every": 20,
    "threads": 1,
}


def _wrong_resume(setting, mode):
    """The wrong resume asked for: one for every life, or one per drill mode (`kill=data,sigterm=rng`)."""
    if "=" in setting:
        setting = dict(item.split("=", 1) for item in setting.split(",") if item).get(mode, "")
    if setting not in ("", "rng", "data"):
        raise SystemExit(f"HF_WRONG_RESUME: {setting!r} is not rng or data")
    return setting


WRONG = _wrong_resume(os.environ.get("HF_WRONG_RESUME", ""), os.environ.get("TRAINOPS_DRILL_MODE", ""))


class Sequences(torch.utils.data.Dataset):
    """Token sequences from a seeded generator, the same on every machine: a map-style data set."""

    def __init__(self, config):
        generator = torch.Generator().manual_seed(config["seed"] + 1)
        self.ids = torch.randint(0, config["vocab"], (config["samples"], config["sequence"]), generator=generator)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


class RngDroppingTrainer(Trainer):
    """The wrong resume HF_WRONG_RESUME=rng: a resume that never restores rng_state.pth."""

    def _load_rng_state(self, checkpoint):
        return None


def main():
    config = hooks.load_config(DEFAULTS)  # trainops: TRAINOPS_CONFIG names a JSON file
    config = {**DEFAULTS, **{key: value for key, value in config.items() if key in DEFAULTS}}
    torch.set_num_threads(config["threads"])
    trainops = TrainopsCallback()  # trainops: journal, seals, SIGTERM -> save at the step's end, stop
    args = TrainingArguments(
        output_dir=trainops.ckpt_dir,  # trainops: checkpoints where they are sealed and resumed from
        max_steps=config["steps"],
        per_device_train_batch_size=config["batch_size"],
        learning_rate=config["lr"],
        warmup_steps=config["warmup_steps"],
        lr_scheduler_type="linear",
        logging_steps=1,  # trainops: one journal line per step, its own loss
        logging_nan_inf_filter=False,
        save_strategy="steps",
        save_steps=config["checkpoint_every"],
        seed=config["seed"],
        data_seed=config["seed"],
        full_determinism=True,
        use_cpu=True,
        dataloader_num_workers=0,
        report_to="none",
        disable_tqdm=True,
        ignore_data_skip=WRONG == "data",
    )
    torch.manual_seed(config["seed"])
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=config["vocab"],
            n_positions=config["sequence"],
            n_embd=32,
            n_layer=2,
            n_head=2,
            attn_implementation="eager",
        )
    )
    trainer_class = RngDroppingTrainer if WRONG == "rng" else Trainer
    trainer = trainer_class(model=model, args=args, train_dataset=Sequences(config), callbacks=[trainops])  # trainops
    trainer.train(resume_from_checkpoint=trainops.resume())  # trainops: the newest sealed checkpoint, or None
    return trainops.exit_code(trainer)  # trainops: 0 finished, 75 interrupted (result.json either way)


if __name__ == "__main__":
    sys.exit(main())
