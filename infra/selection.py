"""A selection of a mini-batch's tokens over every rank: a loss's covariance pick (Clip-Cov, KL-Cov) reads every
response token of a mini-batch, whichever rank holds it (train.pick_tokens).

    tokens = mini_batch_tokens(old, adv, idx, first, key, max_len)   # this rank's tokens, flat, with ids and keys
    picked = lowest_over_ranks(priority, tokens.ids, n, accelerator)  # (N,) bool: the n lowest over every rank

A token's id is its place in the whole mini-batch and its random key is drawn from that place alone, so the pick is
the same on any number of ranks and in a resumed run; each rank sends the all-gather only its own n best.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from infra.passes import Logprobs, seeded


@dataclass(frozen=True)
class Tokens:
    """A mini-batch's response tokens on this rank, flat in response order, for a selection over every rank."""

    adv: torch.Tensor  # (N,) float64: each token's response advantage
    logp: torch.Tensor  # (N,) float64: the old (sampling-time) log-probs
    uniform: torch.Tensor  # (N,) float64 in [0, 1): a random key per token, seeded by the token's place alone
    ids: torch.Tensor  # (N,) int64: the token's place in the whole mini-batch, the same on any number of ranks
    lengths: list  # tokens of each response


def mini_batch_tokens(old: Logprobs, adv: torch.Tensor, idx: list[int], first: int, key: tuple, max_len: int) -> Tokens:
    """The tokens of this rank's responses `idx` of a mini-batch, whose first is response `first` of the whole
    mini-batch (rollout.deal_groups gives each rank a contiguous share): response first + j holds ids
    (first + j) * max_len + t, and keys drawn from seeded(key + (first + j,)).

    >>> old = Logprobs({4: (torch.tensor([-1.0, -2.0]), None), 5: (torch.tensor([-3.0]), None)})
    >>> t = mini_batch_tokens(old, torch.tensor([0, 0, 0, 0, 1.0, -1.0]), [4, 5], first=2, key=(0,), max_len=10)
    >>> t.adv.tolist(), t.ids.tolist(), t.lengths
    ([1.0, 1.0, -1.0], [20, 21, 30], [2, 1])
    """
    logp = [old.rows[i][0].double() for i in idx]
    lengths = [len(x) for x in logp]
    place = torch.arange(first, first + len(idx)).repeat_interleave(torch.tensor(lengths, dtype=torch.long))  # (N,)
    position = torch.cat([torch.arange(n) for n in lengths]) if idx else torch.zeros(0, dtype=torch.long)  # (N,)
    return Tokens(torch.cat([adv[i].double().expand(n) for i, n in zip(idx, lengths)]), torch.cat(logp),
                  torch.cat([torch.rand(n, generator=seeded(key + (first + j,)), dtype=torch.float64)
                             for j, n in enumerate(lengths)]), place * max_len + position, lengths)


def lowest(priority: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Indices in the order of (priority, id), lowest first."""
    by_id = torch.argsort(ids, stable=True)
    return by_id[torch.argsort(priority[by_id], stable=True)]


def lowest_over_ranks(priority: torch.Tensor, ids: torch.Tensor, n: int, accelerator) -> torch.Tensor:
    """(N,) bool: this rank's tokens among the n lowest (priority, id) of every rank's, never an infinite priority.
    Each rank sends only its own n lowest, so the all-gather holds n per rank whatever N is."""
    mine = lowest(priority, ids)[:n]
    pad = n - len(mine)  # fewer tokens than n on this rank: never-picked fillers
    send_p = torch.cat([priority[mine], torch.full((pad,), float("inf"), dtype=priority.dtype)])  # (n,)
    send_i = torch.cat([ids[mine], torch.full((pad,), -1, dtype=ids.dtype)])  # (n,)
    all_p, all_i = (accelerator.gather(x.to(accelerator.device)).cpu() for x in (send_p, send_i))  # (W*n,)
    best = lowest(all_p, all_i)[:n]
    chosen = all_i[best][torch.isfinite(all_p[best])]
    return torch.isin(ids, chosen) & torch.isfinite(priority)
