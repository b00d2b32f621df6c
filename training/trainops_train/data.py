"""A synthetic classification dataset generated from the seed, and a resumable sharded sampler."""

from __future__ import annotations

import dataclasses

import torch

from .config import DataConfig, ModelConfig

# Keeps the per-epoch permutation seeds apart from the dataset and model seeds.
_EPOCH_SEED_STRIDE = 1_000_003


def make_dataset(data: DataConfig, model: ModelConfig, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs from N(0, 1) and labels from a random linear teacher: learnable, no download."""
    generator = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randn(data.samples, model.input_dim, generator=generator)
    teacher = torch.randn(model.input_dim, model.classes, generator=generator)
    labels = (inputs @ teacher).argmax(dim=1)
    return inputs, labels


@dataclasses.dataclass
class DataPosition:
    """Where the sampler stands: the next batch is batch `index` of epoch `epoch`."""

    epoch: int
    index: int
    sampler_seed: int

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class ShardedSampler:
    """Global batches from a per-epoch permutation derived from (sampler_seed, epoch); each rank takes
    the slice rank::world_size of the global batch. The permutation is a pure function of the position,
    so saving (epoch, index, sampler_seed) restores the data stream exactly."""

    def __init__(self, samples: int, batch_size: int, rank: int, world_size: int, position: DataPosition) -> None:
        if batch_size % world_size:
            raise ValueError(f"data.batch_size {batch_size} is not divisible by world size {world_size}")
        self.samples = samples
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.position = position
        self.batches_per_epoch = samples // batch_size
        self._permutation = self._permute(position.epoch)

    def _permute(self, epoch: int) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.position.sampler_seed + _EPOCH_SEED_STRIDE * epoch)
        return torch.randperm(self.samples, generator=generator)

    def next_indices(self) -> torch.Tensor:
        if self.position.index >= self.batches_per_epoch:
            self.position.epoch += 1
            self.position.index = 0
            self._permutation = self._permute(self.position.epoch)
        start = self.position.index * self.batch_size
        batch = self._permutation[start : start + self.batch_size]
        self.position.index += 1
        return batch[self.rank :: self.world_size]
