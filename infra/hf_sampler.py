"""The HF sampler: G responses per prompt drawn by the training model itself (CPU runs, tests, the
demo). rollout.py drives it through the same three calls as the vLLM sampler:

    engine = HFSampler(model, tokenizer, cfg.rollout)
    rows, per_token = engine.sample(prompt_ids, n=G, seed=s)   # raw token rows; rollout.generate splits them
    engine.sync_weights(model); engine.sleep()                  # nothing to copy or free: one set of weights

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. Token ids at or above len(tokenizer) are never sampled (`SuppressTokensLogitsProcessor`).
2. One prefill per prompt, not G: `shared_prefill` encodes each prompt but its last column once and
   repeats that KV cache G times along the batch.
3. `policy_logp` / `policy_entropy` per response token are `infra.logprobs.token_logprobs` of each step's
   raw logits / T, not of the distribution sampled; `report_policy_logp = False` (evaluation) skips them.
4. Our own loop (`sampling_loop`), not `generate`, draws token for token what transformers' `generate` draws.
"""

from __future__ import annotations

import torch
from transformers import (
    LogitsProcessorList,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.integrations import is_deepspeed_zero3_enabled

from infra import logprobs
from infra.model import eos_token_ids


class HFSampler:
    """Sampling from the training model itself, left-padded prompts (choices 2-4)."""

    def __init__(self, model, tokenizer, rollout_cfg):
        self.model, self.tokenizer, self.cfg = model, tokenizer, rollout_cfg
        self.eos_ids = eos_token_ids(tokenizer, model)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        vocab = model.config.vocab_size  # not the weight's shape: a ZeRO-3 shard is empty
        self.suppress = list(range(len(tokenizer), vocab)) or None  # choice 1

    weight_syncs = 0  # it samples from the training model itself: nothing is ever copied
    report_policy_logp = True  # report policy_logp / policy_entropy (choice 3); False keeps no logits

    def sync_weights(self, model) -> None:
        """Nothing to copy: sampling runs on the training model (the HF model) itself."""
        self.model = model

    def sleep(self) -> None:
        """Nothing to free: there is no second copy of the weights."""

    def close(self) -> None:
        """Nothing to shut down."""

    @torch.no_grad()
    def sample(self, prompt_ids: list[list[int]], n: int, seed: int) -> tuple[list[list[int]], dict]:
        """n responses per prompt: (P*n) raw token rows, prompt-major (what follows an EOS means
        nothing), and the per-token values of each row, {"policy_logp": rows, "policy_entropy": rows}
        (choice 3; empty when report_policy_logp is off)."""
        torch.manual_seed(seed)  # a call is seeded by its place in the run (rollout.sampling_seed)
        device = next(self.model.parameters()).device
        input_ids, attention_mask = left_pad(prompt_ids, self.pad_id)  # (P, L) each
        was_training = self.model.training
        self.model.eval()
        try:
            tokens, logp, entropy = sampling_loop(self.model, input_ids.to(device), attention_mask.to(device), n,
                                                  self.cfg, self.eos_ids, self.pad_id, self.suppress,
                                                  self.report_policy_logp)
        finally:
            self.model.train(was_training)
        per_token = {} if logp is None else {"policy_logp": logp.tolist(), "policy_entropy": entropy.tolist()}
        return tokens.tolist(), per_token


def sampling_loop(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, n: int, cfg, eos_ids: list[int],
                  pad_id: int, suppress: list[int] | None, report_logp: bool):
    """n responses per prompt, one token per step for each row still going (choice 4).

    input_ids, attention_mask (P, L) left-padded -> tokens (P*n, T) prompt-major; with
    report_logp, logp and entropy (P*n, T) fp32 from the raw logits (choice 3), else None and
    None. What follows a row's EOS means nothing (split_responses cuts it). T <=
    cfg.max_response_len: the loop stops once every row has ended.
    """
    rows, T, device = input_ids.shape[0] * n, cfg.max_response_len, input_ids.device
    cache = shared_prefill(model, input_ids, attention_mask, n)  # choice 2: all but the last column
    mask = attention_mask.repeat_interleave(n, dim=0)  # (A, L) of the A rows still going, one column more per step
    position = mask.sum(-1, keepdim=True) - 1  # (A, 1) of the last prompt token
    step_ids = input_ids[:, -1:].repeat_interleave(n, dim=0)  # (A, 1) the column the cache lacks
    warp = LogitsProcessorList([SuppressTokensLogitsProcessor(suppress, device=device)] if suppress else [])
    warp += [TemperatureLogitsWarper(cfg.temperature)] if cfg.temperature != 1.0 else []
    warp += [TopKLogitsWarper(cfg.top_k)] if cfg.top_k > 0 else []
    warp += [TopPLogitsWarper(cfg.top_p)] if cfg.top_p < 1.0 else []
    eos = torch.tensor(eos_ids, device=device)
    going = torch.arange(rows, device=device)  # (A,) the rows still going, indices into the P*n
    done = torch.zeros(rows, dtype=torch.bool, device=device)  # (P*n,)
    synced = (is_deepspeed_zero3_enabled() and torch.distributed.is_initialized()
              and torch.distributed.get_world_size() > 1)
    tokens = torch.full((rows, T), pad_id, dtype=torch.long, device=device)  # (P*n, T)
    logp, entropy = (torch.zeros(rows, T, device=device) for _ in range(2)) if report_logp else (None, None)
    steps = 0
    for t in range(T):
        logits = model(input_ids=step_ids, attention_mask=mask, position_ids=position, past_key_values=cache,
                       use_cache=True).logits[:, -1].float()  # (A, V)
        # Every row draws, an ended one its pad id, as in `generate`: the random stream is consumed alike.
        probs = torch.zeros(rows, logits.shape[1], device=device)  # (P*n, V)
        probs[:, pad_id] = 1.0
        probs[going] = warp(None, logits.clone()).softmax(dim=-1)
        token = torch.multinomial(probs, num_samples=1).squeeze(1)[going]  # (A,)
        tokens[going, t] = token
        if report_logp:
            logp[going, t : t + 1], entropy[going, t : t + 1] = logprobs.token_logprobs(logits[:, None], token[:, None],
                                                                                    cfg.temperature)  # (A, 1) each
        done[going] |= torch.isin(token, eos)
        steps = t + 1
        if everyone_finished(done, synced):
            break
        keep = ~done[going]  # (A,) the rows that go on
        keep[0] |= synced and not keep.any()  # a rank with nothing left keeps one row for ZeRO-3's collectives
        if not keep.all():
            going, keep = going[keep], keep.nonzero().squeeze(1)
            cache.batch_select_indices(keep)
            mask, position, token = mask[keep], position[keep], token[keep]
        step_ids, position = token[:, None], position + 1
        mask = torch.cat([mask, mask.new_ones(len(going), 1)], dim=1)
    if not report_logp:
        return tokens[:, :steps], None, None
    return tokens[:, :steps], logp[:, :steps], entropy[:, :steps]


def everyone_finished(done: torch.Tensor, synced: bool) -> bool:
    """Every row has ended: on this process, or, when synced (ZeRO-3, where each forward is a
    collective), on every process (choice 4)."""
    if not synced:
        return bool(done.all())
    left = (~done).sum().to(torch.float32).reshape(1)  # rows still going on this rank
    torch.distributed.all_reduce(left)
    return left.item() == 0


def left_pad(prompt_ids: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts left-padded to one length, at least 2 so every row has a column to prefill.

    >>> left_pad([[5, 6, 7], [8]], pad_id=0)
    (tensor([[5, 6, 7],
            [0, 0, 8]]), tensor([[1, 1, 1],
            [0, 0, 1]]))
    """
    L = max(2, *(len(p) for p in prompt_ids))
    input_ids = torch.full((len(prompt_ids), L), pad_id, dtype=torch.long)  # (P, L)
    attention_mask = torch.zeros_like(input_ids)  # (P, L)
    for i, p in enumerate(prompt_ids):
        input_ids[i, L - len(p) :] = torch.tensor(p, dtype=torch.long)
        attention_mask[i, L - len(p) :] = 1
    return input_ids, attention_mask


def shared_prefill(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, n: int):
    """KV cache of each prompt without its last column, computed once and repeated n times along
    the batch (row i*n + j holds prompt i), for `sampling_loop` to continue from (choice 2).

    input_ids, attention_mask (P, L) left-padded -> a transformers Cache of P*n rows, L - 1 columns.
    Positions are numbered as transformers numbers them: cumsum of the mask - 1, 0 on padding.
    Always one forward, even for one-token prompts (left_pad), so ZeRO-3 ranks stay in step.
    """
    position_ids = (attention_mask.cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)  # (P, L)
    out = model(input_ids=input_ids[:, :-1], attention_mask=attention_mask[:, :-1],
                position_ids=position_ids[:, :-1], use_cache=True, logits_to_keep=1)  # prompt logits unused
    cache = out.past_key_values
    cache.batch_repeat_interleave(n)  # (P, L-1) -> (P*n, L-1) keys and values per layer
    return cache
