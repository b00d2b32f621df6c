"""A plain PyTorch training loop, drilled as it is: a small MLP with dropout, AdamW, a warm-up-then-cosine LR
schedule, a DataLoader over a synthetic data set with a seeded sampler, checkpoints by torch.save.

The lines marked `# trainops` are all it takes to be drilled (docs/trainer_contract.md shows them as a diff):
the journal of exact losses, resume from the newest checkpoint that verifies, sealed checkpoints, a graceful
stop on SIGTERM, result.json with the final weights' hash. Everything else is what such a script has anyway,
including what an exact resume needs: the RNG state in the checkpoint and the data position in the epoch.

    python train.py                          a run in ./trainops-run (TRAINOPS_RUN_DIR elsewhere)
    TRAINOPS_CONFIG=cfg.json python train.py  settings from a JSON file (the drill writes one)

Two switches show what the drill catches (tests/e2e/test_own_trainer_drill.py uses them):
- PLAIN_WRONG_RESUME=rng|optimizer|data makes the resume wrong on purpose (the RNG reseeded instead of
  restored, the optimizer state not restored, the epoch restarted from its first batch); the drill fails
  naming the first step that differs. `kill=rng,sigterm=data` picks one per drill mode (TRAINOPS_DRILL_MODE).
- PLAIN_SEAL=0 is this loop before it adopted sealing: torch.save alone, and its own resume (the file with
  the highest step number). The drill judges its journal and weights and names the unsealed checkpoint.
"""

from __future__ import annotations

import itertools
import math
import os
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from trainops_train import hooks  # trainops

DEFAULTS = {
    "seed": 1234,
    "steps": 120,
    "samples": 512,
    "batch_size": 16,
    "input_dim": 32,
    "hidden_dim": 64,
    "classes": 8,
    "dropout": 0.1,
    "lr": 3e-3,
    "warmup_steps": 10,
    "weight_decay": 0.01,
    "checkpoint_every": 20,
    "threads": 1,
}


def _wrong_resume(setting, mode):
    """The wrong resume asked for: one for every life, or one per drill mode (`kill=rng,sigterm=data`)."""
    if "=" in setting:
        setting = dict(item.split("=", 1) for item in setting.split(",") if item).get(mode, "")
    if setting not in ("", "rng", "optimizer", "data"):
        raise SystemExit(f"PLAIN_WRONG_RESUME: {setting!r} is not rng, optimizer or data")
    return setting


WRONG = _wrong_resume(os.environ.get("PLAIN_WRONG_RESUME", ""), os.environ.get("TRAINOPS_DRILL_MODE", ""))
SEAL = os.environ.get("PLAIN_SEAL", "1") != "0"


def build(config):
    torch.manual_seed(config["seed"])
    generator = torch.Generator().manual_seed(config["seed"] + 1)
    inputs = torch.randn(config["samples"], config["input_dim"], generator=generator)
    labels = torch.randint(0, config["classes"], (config["samples"],), generator=generator)
    model = nn.Sequential(
        nn.Linear(config["input_dim"], config["hidden_dim"]),
        nn.ReLU(),
        nn.Dropout(config["dropout"]),
        nn.Linear(config["hidden_dim"], config["classes"]),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])

    def factor(step):
        if step < config["warmup_steps"]:
            return (step + 1) / config["warmup_steps"]
        progress = (step - config["warmup_steps"]) / max(1, config["steps"] - config["warmup_steps"])
        return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
    return TensorDataset(inputs, labels), model, optimizer, scheduler


def epoch_batches(dataset, config, epoch, skip):
    """The epoch's batches in the order its seed gives, from batch `skip` on (a resume mid-epoch)."""
    order = torch.Generator().manual_seed(config["seed"] * 1000 + epoch)
    loader = DataLoader(dataset, batch_size=config["batch_size"], shuffle=True, generator=order, drop_last=True)
    return itertools.islice(iter(loader), skip, None)


def newest_by_step(ckpt_dir):
    """What a loop without sealing resumes from: the step-N.pt with the highest N, complete or not."""
    steps = [int(n[5:-3]) for n in os.listdir(ckpt_dir) if n.startswith("step-") and n.endswith(".pt")]
    if not steps:
        return None, 0
    return os.path.join(ckpt_dir, f"step-{max(steps)}.pt"), max(steps)


def main():
    config = hooks.load_config(DEFAULTS)  # trainops: TRAINOPS_CONFIG names a JSON file
    config = {**DEFAULTS, **{key: value for key, value in config.items() if key in DEFAULTS}}
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(config["threads"])
    run = hooks.Run()  # trainops: journal, SIGTERM flag, pacing, result.json
    dataset, model, optimizer, scheduler = build(config)
    steps_per_epoch = len(dataset) // config["batch_size"]
    step, epoch, batch_in_epoch = 0, 0, 0

    if SEAL:
        found = run.resume()  # trainops: the newest checkpoint that verifies
        resume_from = found.path if found else None
    else:
        resume_from, resumed_step = newest_by_step(run.ckpt_dir)
        if resume_from:
            run.resumed(resumed_step, resume_from)
    if resume_from:
        state = torch.load(resume_from, weights_only=True)
        model.load_state_dict(state["model"])
        if WRONG != "optimizer":
            optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        step, epoch, batch_in_epoch = state["step"], state["epoch"], state["batch_in_epoch"]
        if WRONG == "rng":
            torch.manual_seed(config["seed"])
        else:
            torch.set_rng_state(state["rng"])
        if WRONG == "data":
            batch_in_epoch = 0

    model.train()
    while step < config["steps"]:
        for inputs, labels in epoch_batches(dataset, config, epoch, batch_in_epoch):
            loss = nn.functional.cross_entropy(model(inputs), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            lr = scheduler.get_last_lr()[0]
            optimizer.step()
            scheduler.step()
            step += 1
            batch_in_epoch += 1
            if batch_in_epoch == steps_per_epoch:
                epoch, batch_in_epoch = epoch + 1, 0
            run.log_step(step, loss, lr=lr)  # trainops: exact loss and lr, then the drill's pacing
            if step % config["checkpoint_every"] == 0 or step == config["steps"] or run.stop_requested:
                state = {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "step": step,
                    "epoch": epoch,
                    "batch_in_epoch": batch_in_epoch,
                    "rng": torch.get_rng_state(),
                }
                path = os.path.join(run.ckpt_dir, f"step-{step}.pt")
                if SEAL:
                    with run.checkpoint(path, step):  # trainops: sealed once torch.save returns
                        torch.save(state, path)
                else:
                    torch.save(state, path)
            if run.stop_requested:  # trainops
                return run.interrupted(step)  # trainops: 75, run again to resume
            if step == config["steps"]:
                break
    return run.finish(model, step=step)  # trainops: result.json with the final weights' sha256


if __name__ == "__main__":
    sys.exit(main())
