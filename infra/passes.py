"""The update's passes: which responses get a forward, cut into packed micro-batches, and the
log-probs those forwards leave for later phases of the step (train.py's steps 5-6 plan them).

    todo = needs_old_pass(cfg, batch, adv, first, world, key)  # the responses the no-grad pass covers
    active = gradient_responses(cfg, adv, idx)                # the responses of idx in gradient passes
    old = Logprobs({i: (logp, entropy)})                      # under the sampling-time policy, detached
    micro = micro_batches(batch, ids, budget)                 # lists of responses, each one packed row
    old_logp, fresh = reused_old_logp(old, ids, logp, entropy, lengths(batch, ids), keep)  # (B, R), Logprobs
    sample = entropy_sample(candidates, fraction_or_count, world, key)

Each is one of train.py's shortcuts, its reason in docs/algorithm.md: micro-batches filled by a token
budget over packed rows, longest first (`micro_batches`); the first mini-batch's old log-probs its own
forward's, detached (`reused_old_logp`, `trainer.reuse_logprobs`, as TRL); with vLLM a forward of the
A = 0 responses for the entropy metrics only in a sample (`entropy_sample`, `logging.entropy_sample`).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import torch

from infra import data


@dataclass(frozen=True)
class Logprobs:
    """Per-token log-probs and entropy of responses under the sampling-time policy, detached fp32 on
    the CPU: {response: (logp (T,), entropy (T,))}; and the filler passes their forward needed."""

    rows: dict = field(default_factory=dict)
    fillers: int = 0

    def merged(self, other: Logprobs) -> Logprobs:
        """These rows and `other`'s, as a new record."""
        return Logprobs(self.rows | other.rows, self.fillers + other.fillers)

    @staticmethod
    def of_pass(ids: list[int], lengths: list[int], logp: torch.Tensor, entropy: torch.Tensor, wanted) -> Logprobs:
        """The rows of a pass over responses `ids` (each `lengths` tokens; logp, entropy (B, R)) whose
        response is in `wanted`, cut to its length, detached, fp32 on the CPU."""
        return Logprobs({i: (logp[row, :n].detach().float().cpu(), entropy[row, :n].detach().float().cpu())
                         for row, (i, n) in enumerate(zip(ids, lengths)) if i in wanted})


def needs_old_pass(cfg, batch, adv: torch.Tensor, first: int, world: int = 1, key: tuple = (),
                   reads_zero_adv: str = "no") -> list[int]:
    """The responses whose log-probs under the sampling-time policy no other pass provides (`trainer.reuse_logprobs`).

    Gradient passes need `old_logp`: the first mini-batch's own forward (its `first` responses) gives it
    (the policy has not moved yet); later mini-batches need it from before the first optimizer step.
    The metrics need log-prob and entropy: the HF sampler reports them for every response; with vLLM,
    the responses outside every gradient pass get a forward for them: a `logging.entropy_sample` of
    them (entropy_sample, drawn with `key` out of this rank's share of a `world` of ranks). `reads_zero_adv`:
    what the loss reads of the A = 0 responses (gradient_responses).
    """
    everything = range(len(batch.response_ids))
    if not cfg.trainer.reuse_logprobs:
        return list(everything)  # the plain way: one pass over every response
    in_grad = set(gradient_responses(cfg, adv, everything, reads_zero_adv))
    sample = [] if batch.policy_logp is not None else entropy_sample([i for i in everything if i not in in_grad],
                                                                     cfg.logging.entropy_sample, world, key)
    return sorted([i for i in in_grad if i >= first] + sample)


def gradient_responses(cfg, adv: torch.Tensor, idx, reads_zero_adv: str = "no", picked: dict | None = None) -> list:
    """The responses of `idx` in gradient passes: those whose loss can have a gradient (`trainer.sparse_update`; all
    of them without). An A = 0 response's loss has none unless the loss reads A = 0 tokens (loss.POLICY_LOSSES'
    reads_zero_adv: "all" of them, or the "selected" ones its priority `picked`; before the pick, every response it
    could pick); train.loss_weights keeps every response in the normaliser's counts, so the update is exact."""
    def needed(i) -> bool:
        if adv[i] != 0 or not cfg.trainer.sparse_update or reads_zero_adv == "all":
            return True
        return reads_zero_adv == "selected" and (picked is None or bool(picked[i].any()))

    return [i for i in idx if needed(i)]


def micro_batches(batch, ids: list[int], budget: int) -> list[list[int]]:
    """The responses `ids` cut into packed micro-batches of at most `budget` prompt + response tokens, longest first."""
    lens = [len(batch.prompt_ids[i]) + len(batch.response_ids[i]) for i in ids]
    return [[ids[j] for j in mb] for mb in data.token_budget_micro_batches(lens, budget)]


def lengths(batch, ids: list[int]) -> list[int]:
    """The response lengths of responses `ids`."""
    return [len(batch.response_ids[i]) for i in ids]


def reused_old_logp(old: Logprobs, ids: list[int], logp: torch.Tensor, entropy: torch.Tensor, lengths: list[int],
                    keep: bool) -> tuple[torch.Tensor, Logprobs]:
    """old_logp (B, R) of a pass over responses `ids` (each `lengths` tokens): from `old`, and for a response
    missing from it (the first mini-batch: the policy has not moved yet) this pass's own `logp`, detached
    (`trainer.reuse_logprobs`). Returns it, and those reused rows as a new Logprobs when `keep` (not a filler pass)."""
    fresh = Logprobs.of_pass(ids, lengths, logp, entropy, wanted=[i for i in ids if keep and i not in old.rows])
    rows = [old.rows[i][0] if i in old.rows else logp[row, :n].detach().float().cpu()
            for row, (i, n) in enumerate(zip(ids, lengths))]
    return data.right_pad_float(rows)[0].to(logp.device), fresh  # (B, R)


def entropy_sample(candidates: list[int], sample: float, world: int, key: tuple) -> list[int]:
    """The responses out of `candidates` (this rank's, outside every gradient pass) that get a
    forward for the entropy metrics (`logging.entropy_sample`): a fraction `sample` <= 1 of
    them, rounded up, or a count `sample` > 1 per step, split over the `world` ranks; drawn uniformly,
    seeded by `key` (seed, step, rank). All of them, in order, when the sample covers them.

    >>> entropy_sample([3, 5, 8, 9], 1.0, 1, (0, 1, 0)), len(entropy_sample([3, 5, 8, 9], 0.3, 1, (0, 1, 0)))
    ([3, 5, 8, 9], 2)
    >>> len(entropy_sample(list(range(100)), 8, 2, (0, 1, 0)))
    4
    """
    k = math.ceil(sample * len(candidates)) if sample <= 1 else math.ceil(sample / world)
    if k >= len(candidates):
        return list(candidates)
    return sorted(candidates[j] for j in torch.randperm(len(candidates), generator=seeded(key))[:k].tolist())


def seeded(key: tuple) -> torch.Generator:
    """A generator seeded by `key` alone: the same draws on any rank, in any run."""
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
