"""Resharding a ZeRO-3 optimizer state for another number of ranks (infra/reshard.py), against the
plain construction: shards cut directly from the full tensors for the new number of ranks.

Synthetic states in DeepSpeed's layout (ceil(n / W) elements of each parameter per rank, sub-groups
cut by `sub_group_size` over partition elements, so they differ between W = 2 and W = 3) test the
arithmetic exactly; the resumes of real 2-process and 1-process ZeRO-3 checkpoints are in test_zero3.py.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from infra.reshard import my_piece, reshard

NUMELS = [5, 3, 8, 1, 6, 7]  # odd sizes: padding in every piece


def sub_groups(world: int, sub_group_size: int) -> list[list[int]]:
    """Parameter indices per sub-group, as DeepSpeed's `_create_fp16_sub_groups` cuts them for `world` ranks."""
    groups, group, size = [], [], 0
    for i, n in enumerate(NUMELS):
        group.append(i)
        size += math.ceil(n / world)
        if size >= sub_group_size or i == len(NUMELS) - 1:
            groups.append(group)
            group, size = [], 0
    return groups


def shards(full: dict, world: int, rank: int, sub_group_size: int) -> dict:
    """The plain construction: rank `rank`'s state for `world` ranks, cut from the full tensors."""
    groups = sub_groups(world, sub_group_size)

    def flats(name):
        return [torch.cat([my_piece(full[name][i], world, rank) for i in g]) for g in groups]

    moments = {k: flats(k) for k in ("exp_avg", "exp_avg_sq")}
    return {"zero_stage": 3, "loss_scaler": {"type": "LossScaler", "cur_scale": 1.0, "dynamic": False},
            "partition_count": world, "fp32_flat_groups": flats("w"),
            "optimizer_state_dict": {
                "state": {i: {"step": torch.tensor(4.0), "exp_avg": moments["exp_avg"][i],
                              "exp_avg_sq": moments["exp_avg_sq"][i]} for i in range(len(groups))},
                "param_groups": [{"lr": 1e-3, "params": list(range(len(groups)))}]}}


def live_optimizer(world: int, rank: int, sub_group_size: int):
    """What reshard reads of DeepSpeed's live optimizer: parameter sizes per sub-group and the flats' sizes."""
    groups = sub_groups(world, sub_group_size)
    return SimpleNamespace(optimizer=SimpleNamespace(
        fp16_groups=[[SimpleNamespace(ds_numel=NUMELS[i]) for i in g] for g in groups],
        fp32_partitioned_groups_flat=[torch.empty(sum(math.ceil(NUMELS[i] / world) for i in g)) for g in groups],
        optimizer=SimpleNamespace(param_groups=[{}])))


@pytest.fixture
def full():
    torch.manual_seed(0)
    return {name: [torch.randn(n) for n in NUMELS] for name in ("w", "exp_avg", "exp_avg_sq")}


def same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("old, new", [(2, 3), (3, 2), (2, 1), (1, 2), (2, 2), (4, 3)])
def test_reshard_equals_cutting_the_full_tensors(full, old, new):
    size = 5  # partition elements per sub-group: several sub-groups, cut differently for each W
    saved = [shards(full, old, r, size) for r in range(old)]
    for rank in range(new):
        got = reshard(saved, live_optimizer(new, rank, size), new, rank)
        assert same(got, shards(full, new, rank, size)), (old, new, rank)


def test_the_check_fails_on_a_wrong_layout(full):
    """The comparison can fail: pieces read with the wrong number of saved ranks give other shards."""
    saved = [shards(full, 2, r, 5) for r in range(2)]
    wrong = reshard(saved[:1] * 2, live_optimizer(3, 2, 5), 3, 2)  # rank 0's shard twice; new rank 2 reads rank 1's
    assert not same(wrong, shards(full, 3, 2, 5))
