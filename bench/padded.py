"""The padded layout the trainer does not use, kept to measure and test the packed one against:
padded rows [prompt][response][pad] with their attention mask, micro-batches filled by count x
longest or by a fixed count, and the padding they carry. Imported by bench/bench_packing.py,
bench/bench_padding.py and tests/test_packing.py; the trainer packs (infra.policy.packed_inputs).
"""

from __future__ import annotations

import torch

from infra import data
from infra.policy import hf_model


def right_pad(seqs: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token lists -> input_ids (B, L) right-padded, attention_mask (B, L)."""
    L = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long)  # (B, L)
    mask = torch.zeros(len(seqs), L, dtype=torch.long)  # (B, L)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[b, : len(s)] = 1
    return ids, mask


def padded_inputs(prompt_ids, response_ids, pad_id: int) -> dict:
    """Rows [prompt][response][pad] (B, L) with their attention mask, and `predict`, `targets` over every
    (B, R) response slot, padding included: the arguments of infra.policy.Policy.forward."""
    input_ids, attention_mask = right_pad([p + r for p, r in zip(prompt_ids, response_ids)], pad_id)  # (B, L)
    B, L = input_ids.shape
    R = max(len(r) for r in response_ids)
    start = torch.tensor([len(p) - 1 for p in prompt_ids])[:, None]  # (B, 1): predicts the first response token
    positions = (start + torch.arange(R)[None, :]).clamp(max=L - 1)  # (B, R)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": None, "cu_seq_lens": None,
            "max_len": L, "predict": (positions + L * torch.arange(B)[:, None]).flatten(),
            "targets": right_pad(response_ids, pad_id)[0].flatten()}


def padded_response_logprobs(policy, prompt_ids, response_ids, temperature: float, pad_id: int = 0,
                             chunk_rows: int | None = None):
    """infra.policy.response_logprobs over padded rows: logp, entropy, mask (B, R)."""
    inputs = padded_inputs(prompt_ids, response_ids, pad_id)
    device = next(hf_model(policy).parameters()).device
    inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in inputs.items()}
    logp, entropy = policy(**inputs, temperature=temperature, chunk_rows=chunk_rows)  # (B*R,), (B*R,)
    mask = data.right_pad_float([torch.ones(len(r)) for r in response_ids])[1].to(device)  # (B, R)
    return logp.view(mask.shape), entropy.view(mask.shape), mask


def count_by_longest_micro_batches(lengths: list[int], max_tokens: int) -> list[list[int]]:
    """infra.data.token_budget_micro_batches for padded rows: a group's tokens are count x longest.

    >>> count_by_longest_micro_batches([5, 100, 7, 90, 6], max_tokens=200)
    [[1, 3], [2, 4, 0]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups, current = [], []
    for i in order:
        if current and (len(current) + 1) * lengths[current[0]] > max_tokens:
            groups.append(current)
            current = []
        current.append(i)
    if current:
        groups.append(current)
    return groups


def fixed_count_micro_batches(num: int, size: int) -> list[list[int]]:
    """The naive alternative: consecutive groups of `size` sequences."""
    return [list(range(i, min(i + size, num))) for i in range(0, num, size)]


def padding_fraction(lengths: list[int], groups: list[list[int]]) -> float:
    """Fraction of the padded (count x longest) slots of all groups that are padding."""
    slots = sum(len(g) * max(lengths[i] for i in g) for g in groups)
    return 1.0 - sum(lengths) / slots if slots else 0.0
