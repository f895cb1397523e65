"""A ZeRO-3 checkpoint resumed on another number of processes: this rank's shard of the optimizer
state rebuilt from every saved rank's, one parameter at a time.

DeepSpeed ZeRO-3 (0.19.8, `partition_parameters._partition_param`) gives each of W ranks ceil(n / W)
elements of every trainable parameter of n elements: the flattened parameter, zero-padded to a
multiple of W, cut into W equal pieces, rank r holding piece r. A rank keeps its pieces of all
parameters, in the optimizer's parameter order, in flat fp32 tensors, one per sub-group; Adam's
`exp_avg` and `exp_avg_sq` have the same layout, and `step` is one number. Sub-groups hold whole
parameters but their boundaries depend on W (`sub_group_size` counts partition elements), so the
saved sub-groups are read as one sequence of pieces and the new ones cut at the live optimizer's sizes.

    saved rank r, W = 2:  [w0 piece r | w1 piece r | ...]  (one flat per sub-group)
    each parameter:       cat(piece 0, piece 1)[:n]         (the full fp32 weight, or moment)
    new rank r', W' = 3:  [w0 piece r' | w1 piece r' | ...] cut into the live sub-groups

Only one parameter's full tensor is in memory at a time (the saved files are memory-mapped), so a
rank holds about its own new shard. The data side needs nothing: kept groups are pooled over ranks
and dealt mini-batch by mini-batch (rollout.deal_groups), whatever the number of processes.

Choices:
1. A new rank beyond the saved ones takes rank 0's RNG state: every rank starts from the same seed
   (`set_seed(trainer.seed)`), and sampling seeds are per step and prompt, not per rank.
"""

from __future__ import annotations

import math

import torch

MOMENTS = ("exp_avg", "exp_avg_sq")


def pieces(flats: list[torch.Tensor], numels: list[int], world: int):
    """One saved rank's piece of each parameter, in order: views into its sub-group flats (no copy).

    >>> flats = [torch.tensor([1., 2., 5.]), torch.tensor([7.])]  # pieces of sizes 2, 1 | 1 for W = 2
    >>> [p.tolist() for p in pieces(flats, [3, 2, 1], world=2)]
    [[1.0, 2.0], [5.0], [7.0]]
    """
    group, offset = 0, 0
    for n in numels:
        size = math.ceil(n / world)
        while offset == flats[group].numel():  # a sub-group ends on a parameter boundary
            group, offset = group + 1, 0
        yield flats[group][offset:offset + size]
        offset += size


def my_piece(full: torch.Tensor, world: int, rank: int) -> torch.Tensor:
    """Rank `rank`'s piece of a flattened parameter `full` among `world` ranks (zero-padded at the end).

    >>> my_piece(torch.tensor([1., 2., 3., 4., 5.]), world=3, rank=2).tolist()
    [5.0, 0.0]
    """
    size = math.ceil(full.numel() / world)
    return torch.nn.functional.pad(full, (0, size * world - full.numel()))[rank * size:(rank + 1) * size]


def reshard_flats(saved: list[list[torch.Tensor]], numels: list[int], sizes: list[int], world: int,
                  rank: int) -> list[torch.Tensor]:
    """This rank's sub-group flats for `world` ranks from every saved rank's (`saved[r]`, rank order):
    each parameter rebuilt whole from the saved pieces, then cut for the new ranks."""
    mine = [my_piece(torch.cat(parts)[:n], world, rank)
            for n, *parts in zip(numels, *(pieces(flats, numels, len(saved)) for flats in saved))]
    return list(torch.cat(mine).split(sizes))


def reshard(saved: list[dict], optimizer, world: int, rank: int) -> dict:
    """This rank's plain ZeRO-3 state dict (infra/safe_state.py's form) for `world` ranks, from the saved
    ranks' (`saved`, rank order); `optimizer` is the live DeepSpeed optimizer as accelerate wraps it."""
    zero = optimizer.optimizer
    numels = [p.ds_numel for group in zero.fp16_groups for p in group]  # every trainable parameter, in order
    sizes = [flat.numel() for flat in zero.fp32_partitioned_groups_flat]  # this run's sub-groups
    assert sum(sizes) == sum(math.ceil(n / world) for n in numels), "ZeRO-3's partition layout is not the expected"
    groups = [s["optimizer_state_dict"]["param_groups"] for s in saved]
    if len(groups[0]) != 1 or len(zero.optimizer.param_groups) != 1:
        raise ValueError("resharding handles one optimizer parameter group; this optimizer has "
                         f"{len(zero.optimizer.param_groups)}, the checkpoint {len(groups[0])}")
    states = [[s["optimizer_state_dict"]["state"][i] for i in sorted(s["optimizer_state_dict"]["state"])]
              for s in saved]
    fp32 = reshard_flats([s["fp32_flat_groups"] for s in saved], numels, sizes, world, rank)
    moments = {k: reshard_flats([[g[k] for g in st] for st in states], numels, sizes, world, rank) for k in MOMENTS}
    step = states[0][0]["step"]  # one number, the same in every sub-group and rank
    return {**saved[0], "partition_count": world, "fp32_flat_groups": fp32, "optimizer_state_dict": {
        "state": {i: {"step": step.clone(), **{k: moments[k][i] for k in MOMENTS}} for i in range(len(sizes))},
        "param_groups": [{**groups[0][0], "params": list(range(len(sizes)))}]}}
