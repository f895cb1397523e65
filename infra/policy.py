"""The policy's log-prob forward: the module DeepSpeed wraps, packed rows, the output layer in one call.

    policy = Policy(hf)                        # what accelerator.prepare wraps (DeepSpeed engine, DDP)
    logp, entropy, mask = response_logprobs(policy, prompt_ids, response_ids, T, chunk_rows)
    passes = plan_passes(micro_batches, accelerator, filler)

`Policy.forward` returns, for every response token, log pi(o_t | q, o_<t) under the sampling
temperature T (logits / T before the log-softmax, paper section 2 / verl) and the entropy of
that distribution, projecting hidden states to the vocabulary chunk by chunk
(logprobs.token_logprobs_from_hidden), so no (B, T, V) tensor exists.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. The forward is a module that accelerate prepares (`Policy`), so every micro-batch goes through the engine.
2. Every vocabulary chunk runs inside one `OutputHead` call, and `plan_passes` gives every rank the same passes.
3. A micro-batch is one packed row, positions restarting per sequence (`packed_inputs`); no padding is computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from infra import data, logprobs

# ----------------------------------------------------------------------------------------------
# Packed rows (choice 3): a micro-batch's sequences concatenated into one row, positions restarting
# per sequence, as transformers' DataCollatorWithFlattening lays them out.
# ----------------------------------------------------------------------------------------------

PACKED_SDPA = "packed_sdpa"  # torch SDPA, one causal call per packed sequence (registered below)


def packed_sdpa_attention(module, query, key, value, attention_mask, cu_seq_lens_q=None, position_ids=None, **kwargs):
    """transformers' `sdpa` attention, with packed rows handled as its flash-attention path handles
    them: sequence bounds from `cu_seq_lens_q`, else from `position_ids` restarting in a single row,
    and then one causal SDPA call per sequence, so nothing crosses a sequence and no (N, N) mask
    exists. Anything else (the HF sampler's padded prompts, its KV cache) is plain `sdpa`."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.modeling_flash_attention_utils import _is_packed_sequence, prepare_fa_kwargs_from_position_ids

    one_row = attention_mask is None and query.shape[0] == 1 and query.shape[2] > 1  # what can be packed
    if cu_seq_lens_q is None and one_row and _is_packed_sequence(position_ids, 1):
        cu_seq_lens_q = prepare_fa_kwargs_from_position_ids(position_ids)[0][0]
    if cu_seq_lens_q is None or attention_mask is not None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if getattr(module, "sliding_window", None):
        raise NotImplementedError(f"{PACKED_SDPA}: sliding-window attention over packed rows; use flash_attention_2")
    lens = cu_seq_lens_q.diff().tolist()  # split, not sliced: its backward is one cat, not a zero tensor per slice
    parts = [sdpa_attention_forward(module, q, k, v, None, **kwargs)[0]  # each (1, length, heads, head_dim)
             for q, k, v in zip(query.split(lens, 2), key.split(lens, 2), value.split(lens, 2))]
    return torch.cat(parts, dim=1), None


def packed_sdpa_mask(batch_size, q_length, kv_length, q_offset=0, kv_offset=0, attention_mask=None, **kwargs):
    """The mask for PACKED_SDPA: none for one row without padding or cache (causality is applied in the
    attention, per sequence), else `sdpa`'s mask."""
    from transformers.masking_utils import sdpa_mask

    no_cache = isinstance(q_offset, int) and q_offset == 0 and kv_offset == 0 and q_length == kv_length
    if batch_size == 1 and attention_mask is None and no_cache:
        return None
    return sdpa_mask(batch_size=batch_size, q_length=q_length, kv_length=kv_length, q_offset=q_offset,
                     kv_offset=kv_offset, attention_mask=attention_mask, **kwargs)


def use_packed_attention(model) -> None:
    """Switch an HF model on `sdpa` to PACKED_SDPA (flash attention and the rest read packed rows themselves)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    if model.config._attn_implementation == "sdpa":
        AttentionInterface.register(PACKED_SDPA, packed_sdpa_attention)
        AttentionMaskInterface.register(PACKED_SDPA, packed_sdpa_mask)
        model.set_attn_implementation(PACKED_SDPA)  # not saved: config.json keeps no attention implementation


def packed_inputs(prompt_ids, response_ids) -> dict:
    """One packed row: input_ids and position_ids (1, N), N = all prompt and response tokens; the
    sequence bounds cu_seq_lens (B + 1,) and longest sequence, as DataCollatorWithFlattening(
    return_flash_attn_kwargs=True) gives them; `predict` (M,): the position whose hidden state
    predicts each of the M response tokens; `targets` (M,)."""
    seqs = [p + r for p, r in zip(prompt_ids, response_ids)]
    lens = torch.tensor([len(s) for s in seqs])  # (B,)
    starts = torch.cumsum(lens, 0) - lens  # (B,) where each sequence begins in the row
    predict = torch.cat([s + len(p) - 1 + torch.arange(len(r))
                         for s, p, r in zip(starts.tolist(), prompt_ids, response_ids)])  # (M,)
    return {"input_ids": torch.tensor([t for s in seqs for t in s])[None], "attention_mask": None,
            "position_ids": torch.cat([torch.arange(n) for n in lens.tolist()])[None],
            "cu_seq_lens": torch.cat([starts, lens.sum()[None]]).int(), "max_len": int(lens.max()),
            "predict": predict, "targets": torch.tensor([t for r in response_ids for t in r])}


# ----------------------------------------------------------------------------------------------
# The log-prob forward.
# ----------------------------------------------------------------------------------------------


class OutputHead(nn.Module):
    """Log-prob and entropy of target tokens from hidden states: every vocabulary chunk in one call
    of this module (choice 2). It holds no parameter of its own; the output layer stays the HF
    model's (checkpoints and the vLLM sync see the model unchanged). Under ZeRO-3 the output layer's
    parameters are registered as this module's external parameters, so DeepSpeed gathers them once
    per forward and once per backward of this call."""

    def __init__(self, lm_head):
        super().__init__()
        self.lm_head = [lm_head]  # a list: not a registered child module
        if hasattr(lm_head.weight, "ds_id"):  # partitioned by ZeRO-3 as the model loaded
            import deepspeed

            for p in lm_head.parameters():
                deepspeed.zero.register_external_parameter(self, p)

    def forward(self, hidden, targets, temperature: float, chunk_rows: int | None = None):
        """hidden (M, H), targets (M,) -> logp (M,), entropy (M,), fp32."""
        head = self.lm_head[0]
        project = lambda h: F.linear(h, head.weight, head.bias)  # noqa: E731  not head(h): no ZeRO-3 hooks per chunk
        chunk_rows = chunk_rows or max(1, logprobs.CHUNK_ELEMENTS // head.weight.shape[0])
        logp, entropy = logprobs.token_logprobs_from_hidden(hidden[None], project, targets[None], temperature,
                                                            chunk_rows)
        return logp[0], entropy[0]


class Policy(nn.Module):
    """The HF causal LM whose forward returns per-token log-probs and entropy of given tokens (choice 1)."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.head = OutputHead(model.get_output_embeddings())
        use_packed_attention(model)

    def forward(self, input_ids, attention_mask, position_ids, cu_seq_lens, max_len: int, predict, targets,
                temperature: float, chunk_rows: int | None = None):
        """`packed_inputs` (or padded rows, bench/padded.py) -> logp (M,), entropy (M,), fp32, of the M targets."""
        packed = {} if cu_seq_lens is None else {"cu_seq_lens_q": cu_seq_lens, "cu_seq_lens_k": cu_seq_lens,
                                                 "max_length_q": max_len, "max_length_k": max_len}
        hidden = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                       use_cache=False, **packed).last_hidden_state  # (B, L, H), after the final norm
        return self.head(hidden.flatten(0, 1)[predict], targets, temperature, chunk_rows)  # (M, H) -> (M,), (M,)


def hf_model(model):
    """The HF model inside whatever wraps it: a DeepSpeed engine or DDP (`.module`), then `Policy`."""
    model = getattr(model, "module", model)
    return model.model if isinstance(model, Policy) else model


def response_logprobs(policy, prompt_ids, response_ids, temperature: float, chunk_rows: int | None = None):
    """Log-prob and entropy of every response token for one micro-batch, through `policy` (a
    `Policy`, or the engine that wraps it), in one packed row.

    Returns logp (B, R), entropy (B, R), mask (B, R), R = the longest response.
    """
    inputs = packed_inputs(prompt_ids, response_ids)
    device = next(hf_model(policy).parameters()).device
    inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in inputs.items()}
    logp, entropy = policy(**inputs, temperature=temperature, chunk_rows=chunk_rows)  # (M,), (M,)
    mask = data.right_pad_float([torch.ones(len(r)) for r in response_ids])[1].to(device)  # (B, R)
    lens = [len(r) for r in response_ids]
    rows = lambda x: torch.nn.utils.rnn.pad_sequence(x.split(lens), batch_first=True)  # noqa: E731
    return rows(logp), rows(entropy), mask  # (B, R) each, 0 past each response


@dataclass
class Pass:
    """One forward (and backward) pass of a plan."""

    ids: list[int]  # responses in the pass
    weight: float  # 1.0, or 0.0 for a filler pass that only keeps collective counts equal (choice 2)


def plan_passes(micro: list[list[int]], accelerator, filler: int, at_least_one: bool = True) -> list[Pass]:
    """The passes this rank runs over its micro-batches `micro` (lists of response indices), as many
    as the busiest rank's (choice 2). `filler` is a response index a filler pass may use;
    `at_least_one` keeps one pass where no rank has work (a gradient pass: the optimizer then sees
    zero gradients, not none). One small all-gather under several processes; none with one."""
    n = len(micro)
    if accelerator is not None and accelerator.num_processes > 1:
        n = int(accelerator.gather(torch.tensor([n], device=accelerator.device)).max())
    n = max(n, int(at_least_one))
    return [Pass(ids, 1.0) for ids in micro] + [Pass([filler], 0.0)] * (n - len(micro))
