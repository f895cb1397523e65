"""Group sampling: G responses for each prompt, from the current policy.

Every backend has the same shape; train.py drives it once per training step:

    engine = make_rollout(cfg.rollout, model, tokenizer, max_model_len)  # model: the HF model
    engine.sync_weights(model)                      # once per step: the policy's current weights
    out = engine.generate(prompt_ids, n=G, seed=s)  # -> Rollout, prompt-major; any number of calls
    engine.sleep()                                  # once per step, before the update
    engine.weight_syncs                             # weight copies so far (logged per step)

`Rollout` holds, for each of the P*G responses (response j of prompt i at index i*G + j), the
response token ids (ending in EOS unless cut at max_response_len), whether it was truncated,
and, where the sampler reports them, its log-probabilities of the sampled tokens. The HF backend
also reports the policy's own log-probs and entropies of the response (choice 4).

Backends:
- "hf" (here): a sampling loop over the training model itself (CPU runs, tests, the demo; choice
  5). No weight copy exists, so `sync_weights` and `sleep` have nothing to do.
- "vllm" (`rollout_vllm.py`): a colocated vLLM engine, one per rank, holding its own copy of
  the weights, which `sync_weights` overwrites with the policy's; it reports `rollout_logp`.

Choices, numbered:
1. Token ids at or above len(tokenizer) are never sampled: Qwen pads its embedding past the
   tokenizer, and those rows are untrained (HF: `SuppressTokensLogitsProcessor`; vLLM:
   rollout_vllm.py choice 1).
2. Sampling is seeded per call from (trainer seed, step, global call index, generation batch),
   so a run is reproducible and a resumed run samples exactly what the uninterrupted one did.
3. HF: one prefill per prompt, not G. `shared_prefill` encodes the P left-padded prompts, all but
   their last column, once, and repeats that KV cache G times along the batch; the sampling
   loop continues from it with each prompt's last token, so its first forward is one token per
   row. Every row sees the logits it would have seen with `num_return_sequences=G` (to float
   rounding), so the sampling distribution is unchanged; only the prompt's compute is shared.
4. HF: `policy_logp` and `policy_entropy`, one value per response token (EOS included, nothing
   after it), are the trainer's definitions (loss.token_logprobs): log softmax(z)[token] and
   lse(z) - sum softmax(z) z, with z = raw logits / T over the WHOLE vocabulary, in fp32. They
   are not the log-probs of the distribution actually sampled (after choice 1 and top-k/top-p).
   They equal a separate forward of the policy on prompt + response to the rounding of the
   model's dtype (fp32: ~1e-5; bf16 decode and full-sequence kernels differ more), so the
   trainer can reuse them instead of its own no-grad pass. They come from each decoding step's
   raw logits, which are dropped once read: no (T, B, V) tensor is ever kept. Set
   `report_policy_logp = False` on the engine where nothing reads them (evaluation): both fields
   then stay None. vLLM leaves them None.
5. HF: our own decoding loop (`sample`), not transformers' `generate`, which spent about a fifth
   of a call on per-step bookkeeping at this model size and kept computing rows that had ended.
   A row leaves the batch (and its KV cache) at its EOS, so later steps cost only the rows still
   going. It draws exactly what `generate` with `do_sample=True` draws for the same seed and
   settings: one `torch.multinomial` over all P*G rows per step, an ended row drawing its pad
   id, so the random stream is consumed as there (tests/test_rollout_hf.py checks it token for
   token). It reads only `rollout.temperature`, `top_k` and `top_p`: the model's own generation
   config (a repetition penalty, say) never changes what the policy samples. Under ZeRO-3 with
   several processes every forward is a collective, so each rank steps, keeping at least one
   row, until the rows of every rank have ended, as `generate` does with `synced_gpus`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
from transformers import (
    LogitsProcessorList,
    SuppressTokensLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.integrations import is_deepspeed_zero3_enabled

import loss


@dataclass
class Rollout:
    """P*G sampled responses, prompt-major: response k belongs to prompt k // G."""

    response_ids: list[list[int]]  # (P*G) token lists, EOS included when generated
    truncated: list[bool]  # (P*G) hit max_response_len before EOS
    # (P*G) sampler's log-prob of each response token (EOS too), if reported
    rollout_logp: list[list[float]] | None = None
    policy_logp: list[list[float]] | None = None  # (P*G) HF only: log softmax(logits / T)[token] (choice 4)
    policy_entropy: list[list[float]] | None = None  # (P*G) HF only: entropy of softmax(logits / T) (choice 4)


def concat(parts: list[Rollout]) -> Rollout:
    """Several calls' rollouts as one, in order; an optional field is kept only if every part has it."""
    joined = {}
    for field in dataclasses.fields(Rollout):
        values = [getattr(p, field.name) for p in parts]
        joined[field.name] = None if any(v is None for v in values) else [x for v in values for x in v]
    return Rollout(**joined)


class HFRollout:
    """Sampling from the training model itself, left-padded prompts (choices 3-5)."""

    def __init__(self, model, tokenizer, rollout_cfg):
        self.model, self.tokenizer, self.cfg = model, tokenizer, rollout_cfg
        self.eos_ids = eos_token_ids(tokenizer, model)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        vocab = model.config.vocab_size  # not the weight's shape: a ZeRO-3 shard is empty
        self.suppress = list(range(len(tokenizer), vocab)) or None  # choice 1

    weight_syncs = 0  # `generate` runs on the training model itself: nothing is ever copied
    report_policy_logp = True  # fill policy_logp / policy_entropy (choice 4); False keeps no logits

    def sync_weights(self, model) -> None:
        """Nothing to copy: `generate` runs on the training model (the HF model) itself."""
        self.model = model

    def sleep(self) -> None:
        """Nothing to free: there is no second copy of the weights."""

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], n: int, seed: int) -> Rollout:
        torch.manual_seed(seed)  # choice 2
        device = next(self.model.parameters()).device
        input_ids, attention_mask = left_pad(prompt_ids, self.pad_id)  # (P, L) each
        was_training = self.model.training
        self.model.eval()
        try:
            tokens, logp, entropy = sample(self.model, input_ids.to(device), attention_mask.to(device), n, self.cfg,
                                           self.eos_ids, self.pad_id, self.suppress, self.report_policy_logp)
        finally:
            self.model.train(was_training)
        result = split_responses(tokens.tolist(), self.eos_ids)
        if logp is None:
            return result
        lengths = [len(r) for r in result.response_ids]
        result.policy_logp = [row[:k] for row, k in zip(logp.tolist(), lengths)]  # choice 4
        result.policy_entropy = [row[:k] for row, k in zip(entropy.tolist(), lengths)]
        return result


def sample(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, n: int, cfg, eos_ids: list[int], pad_id: int,
           suppress: list[int] | None, report_logp: bool):
    """n responses per prompt, one token per step for each row still going (choice 5).

    input_ids, attention_mask (P, L) left-padded -> tokens (P*n, T) prompt-major; with
    report_logp, logp and entropy (P*n, T) fp32 from the raw logits (choice 4), else None and
    None. What follows a row's EOS means nothing (split_responses cuts it). T <=
    cfg.max_response_len: the loop stops once every row has ended.
    """
    rows, T, device = input_ids.shape[0] * n, cfg.max_response_len, input_ids.device
    cache = shared_prefill(model, input_ids, attention_mask, n)  # choice 3: all but the last column
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
            logp[going, t : t + 1], entropy[going, t : t + 1] = loss.token_logprobs(logits[:, None], token[:, None],
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
    collective), on every process (choice 5)."""
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
    the batch (row i*n + j holds prompt i), for `sample` to continue from (choice 3).

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


def split_responses(new_tokens: list[list[int]], eos_ids: list[int]) -> Rollout:
    """Cut each generated row after its first EOS; a row without one is truncated.

    >>> split_responses([[5, 6, 2, 0, 0], [7, 8, 9]], eos_ids=[2]).response_ids
    [[5, 6, 2], [7, 8, 9]]
    """
    responses, truncated = [], []
    eos = set(eos_ids)
    for row in new_tokens:
        end = next((t + 1 for t, tok in enumerate(row) if tok in eos), None)
        responses.append(row[:end] if end is not None else row)
        truncated.append(end is None)
    return Rollout(response_ids=responses, truncated=truncated)


def eos_token_ids(tokenizer, model) -> list[int]:
    """Every id that ends a response: the generation config's EOS ids and the tokenizer's."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("the tokenizer and the model's generation config name no EOS token")
    return ids


def make_rollout(rollout_cfg, model, tokenizer, max_model_len: int):
    """The sampler named by `rollout.backend`; `model` is the HF model, `max_model_len` the longest
    prompt plus response it must hold (vLLM sizes its KV cache by it)."""
    if rollout_cfg.backend == "hf":
        return HFRollout(model, tokenizer, rollout_cfg)
    from rollout_vllm import VLLMRollout  # vLLM is imported only where its engine is built

    return VLLMRollout(model, tokenizer, rollout_cfg, max_model_len)
