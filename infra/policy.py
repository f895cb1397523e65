"""The policy: loading the model and tokenizer, and the one forward the update runs through.

    check_model(path, "model.name_or_path")    # before anything loads: a model folder, or a hub id (choice 4)
    tokenizer = load_tokenizer(path, chat_template=True)
    hf = load_policy(cfg.model, path)          # an HF causal LM (partitioned as it loads under ZeRO-3)
    policy = Policy(hf)                        # what accelerator.prepare wraps (DeepSpeed engine, DDP)
    logp, entropy, mask = response_logprobs(policy, prompt_ids, response_ids, T, pad_id, chunk_rows)
    passes = plan_passes(micro_batches, accelerator, filler)

`Policy.forward` returns, for every response token, log pi(o_t | q, o_<t) under the sampling
temperature T (logits / T before the log-softmax, paper section 2 / verl) and the entropy of
that distribution, projecting hidden states to the vocabulary chunk by chunk
(logprobs.token_logprobs_from_hidden), so no (B, T, V) tensor exists.

Choices, numbered:
1. The log-prob forward is a module that accelerate prepares, so every micro-batch goes through
   `DeepSpeedEngine.forward`. ZeRO-3 counts micro-steps there: at micro-step 0 it copies a
   gradient into its partition, later it adds. A forward that bypassed the engine (calling the
   inner model) would overwrite each micro-batch's gradient with the next one's.
2. One call sequence per kind of pass. Under ZeRO-3 every module call gathers its parameters, a
   collective, and DeepSpeed records the sequence of module calls of a pass to prefetch and keep
   parameters by it. The vocabulary chunks all run inside one call of `OutputHead`, which holds
   the output layer's parameters as DeepSpeed external parameters: the output layer is gathered
   once per forward and once per backward, whatever the number of chunks, and a pass's module
   sequence does not depend on its lengths, so the recorded trace stays valid from one pass to the
   next (docs/algorithm.md says why this and not a fixed number of chunk calls). Ranks must still
   make the same number of passes: `plan_passes` agrees on the largest count, and a rank with
   fewer runs zero-weighted filler passes. With one process the plan is exactly the local one.
3. Tokenizers without a pad token pad with EOS; padded positions are masked everywhere.
4. A model path is checked before anything loads, so a bad one is one line (ModelError), not a
   library's traceback: an existing folder must hold config.json, readable weights (safetensors
   headers are checked against the file size) and a tokenizer; anything else must be a hub id
   (`name` or `owner/name`) that is cached or that the hub answers for, asked once, without retries.
5. Packed micro-batches: a micro-batch's sequences are one row (1, N), N their total length, with
   position_ids restarting at 0 for each sequence and the sequence bounds (cu_seq_lens), as
   transformers' DataCollatorWithFlattening(return_flash_attn_kwargs=True) lays them out; no padding
   is computed. transformers reads that format itself: flash attention runs varlen on the bounds,
   and eager and flex attention get a block-diagonal mask from the restarting positions
   (masking_utils.find_packed_sequence_indices). For `sdpa` (transformers' default, and the one on
   a CPU), `Policy` switches the model to PACKED_SDPA: SDPA with flash attention's handling of
   packed rows, one causal SDPA call per sequence and no (N, N) mask; anything unpacked (the HF
   sampler's padded prompts and KV cache) is plain `sdpa`, unchanged. The padded layout is kept
   for comparison (`packed=False`: tests, bench/bench_packing.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from infra import data, logprobs
from infra.readers import one_line

# ----------------------------------------------------------------------------------------------
# Checking a model path before anything loads: a local model folder, or a hub id the hub or the cache can serve.
# ----------------------------------------------------------------------------------------------


class ModelError(ValueError):
    """A model path that cannot be loaded; the message names the path, the config key or flag, and the fix."""


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
HUB_ID = re.compile(r"(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}", re.ASCII)


def is_hub_id(name: str) -> bool:
    """`name` or `owner/name` in the hub's characters (letters, digits, - _ .), as the hub accepts them.

    >>> is_hub_id("Qwen/Qwen3-8B-Base"), is_hub_id("/no/such/dir"), is_hub_id("a/b/c"), is_hub_id("x..y")
    (True, False, False, False)
    """
    return bool(HUB_ID.fullmatch(name)) and "--" not in name and ".." not in name and not name.endswith((".", "-"))


def safetensors_problem(file: Path) -> str | None:
    """Why a .safetensors file cannot be read, from its header alone (the tensors' byte ranges must
    end where the file ends); None if it reads."""
    size = file.stat().st_size
    with open(file, "rb") as f:
        n = int.from_bytes(f.read(8), "little")  # the header's length in bytes
        if size < 8 or n > size - 8:
            return f"is truncated ({size} bytes, less than its header)"
        try:
            header = json.loads(f.read(n))
            expected = 8 + n + max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return "has an unreadable header"
    if expected != size:
        return f"holds {size} bytes but its header describes {expected} (truncated or corrupt)"
    return None


def model_dir_problem(folder: Path) -> str | None:
    """What keeps `folder` from holding a loadable model and tokenizer, starting with the file's
    name; None if nothing."""
    config_file = folder / "config.json"
    if not config_file.is_file():
        return "config.json is missing"
    try:
        json.loads(config_file.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        return f"config.json is not valid JSON ({one_line(e, 80)})"
    weights = [*folder.glob("*.safetensors"), *folder.glob("pytorch_model*.bin")]
    for index in folder.glob("*.index.json"):  # sharded weights: every shard the index names
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
            return f"{index.name} is not a valid weight index"
        missing = sorted(s for s in shards if not (folder / s).is_file())
        if missing:
            return f"{missing[0]} is missing (named in {index.name})"
    if not weights:
        return "model.safetensors is missing (no *.safetensors or pytorch_model*.bin weights)"
    for file in sorted(folder.glob("*.safetensors")):
        problem = safetensors_problem(file)
        if problem:
            return f"{file.name} {problem}"
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return f"{TOKENIZER_FILES[0]} is missing (no tokenizer file: {', '.join(TOKENIZER_FILES)})"
    return None


def hub_problem(repo_id: str) -> str | None:
    """Why the hub id `repo_id` cannot be fetched: one request (no retries) unless it is cached; None if it can."""
    from huggingface_hub import HfApi, constants, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    if isinstance(try_to_load_from_cache(repo_id, "config.json"), str):
        return None  # in the local hub cache: transformers loads it from there
    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set and it is not in the local hub cache"
    try:
        HfApi().model_info(repo_id, timeout=10)
    except GatedRepoError:
        return None  # the load says what access it needs
    except RepositoryNotFoundError:
        return "the hub has no such model (or it is private: log in with `hf auth login`)"
    except HfHubHTTPError:
        return None
    except Exception as e:  # offline, DNS, proxy, timeout: the hub cannot be reached
        return f"the hub ({constants.ENDPOINT}) could not be reached ({one_line(e, 100)})"
    return None


def check_model(path: str, key: str) -> None:
    """Before anything loads: `path` (from config key or flag `key`) must be a local folder holding a
    model, or a hub id that the hub or the local cache can serve. Raises ModelError naming what is wrong."""
    folder = Path(path)
    if folder.is_dir():
        problem = model_dir_problem(folder)
        if problem:
            raise ModelError(f"{key} `{path}` is a folder without a usable model: {problem}; give a folder written by "
                             "save_pretrained (e.g. a train.py checkpoint's model/)")
        return
    if folder.exists():
        raise ModelError(f"{key} `{path}` is a file; give the folder that holds config.json, the weights and the "
                         "tokenizer")
    where = "" if folder.is_absolute() else f" (relative to `{Path.cwd()}`)"
    if not is_hub_id(path):
        raise ModelError(f"{key}: local path `{path}` not found{where}, and it is not a hub id "
                         "(`name` or `owner/name`) either; give an existing model folder or a hub id")
    problem = hub_problem(path)
    if problem:
        raise ModelError(f"{key} `{path}` is not a local folder{where}, so it was read as a hub id, but {problem}; "
                         f"download it where the hub is reachable (`hf download {path} --local-dir DIR`) and set "
                         f"{key} to DIR")


def load_tokenizer(path: str, chat_template: bool = False):
    """The tokenizer at `path`; `chat_template` (the config's data.chat_template) requires it to have one."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except Exception as e:  # a corrupt or unknown tokenizer: say which, in one line
        raise ModelError(f"the tokenizer of `{path}` cannot be loaded ({one_line(e, 150)}); "
                         "save it again with tokenizer.save_pretrained") from None
    if chat_template and not tokenizer.chat_template:
        raise ModelError(f"the tokenizer of `{path}` has no chat template and config key `data.chat_template` is true; "
                         "set data.chat_template=false to give the model plain-text prompts, or use a model whose "
                         "tokenizer has one")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # choice 3
    return tokenizer


def load_policy(model_cfg, path: str):
    """The HF causal LM at `path` in `model.dtype`; under a ZeRO-3 accelerator it is partitioned as it loads."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, model_cfg.dtype), attn_implementation=model_cfg.attn_implementation
    )
    if model_cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


# ----------------------------------------------------------------------------------------------
# Packed rows (choice 5): a micro-batch's sequences concatenated into one row, positions restarting
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


def padded_inputs(prompt_ids, response_ids, pad_id: int) -> dict:
    """The padded layout, for comparison (tests, bench/bench_packing.py): rows [prompt][response][pad]
    (B, L) with their attention mask, and `predict`, `targets` over every (B, R) response slot,
    padding included, as the trainer ran before packing."""
    input_ids, attention_mask = data.right_pad([p + r for p, r in zip(prompt_ids, response_ids)], pad_id)  # (B, L)
    B, L = input_ids.shape
    R = max(len(r) for r in response_ids)
    start = torch.tensor([len(p) - 1 for p in prompt_ids])[:, None]  # (B, 1): predicts the first response token
    positions = (start + torch.arange(R)[None, :]).clamp(max=L - 1)  # (B, R)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "position_ids": None, "cu_seq_lens": None,
            "max_len": L, "predict": (positions + L * torch.arange(B)[:, None]).flatten(),
            "targets": data.right_pad(response_ids, pad_id)[0].flatten()}


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
        """`packed_inputs` or `padded_inputs` -> logp (M,), entropy (M,), fp32, of the M targets."""
        packed = {} if cu_seq_lens is None else {"cu_seq_lens_q": cu_seq_lens, "cu_seq_lens_k": cu_seq_lens,
                                                 "max_length_q": max_len, "max_length_k": max_len}
        hidden = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                       use_cache=False, **packed).last_hidden_state  # (B, L, H), after the final norm
        return self.head(hidden.flatten(0, 1)[predict], targets, temperature, chunk_rows)  # (M, H) -> (M,), (M,)


def hf_model(model):
    """The HF model inside whatever wraps it: a DeepSpeed engine or DDP (`.module`), then `Policy`."""
    model = getattr(model, "module", model)
    return model.model if isinstance(model, Policy) else model


def response_logprobs(policy, prompt_ids, response_ids, temperature: float, pad_id: int, chunk_rows: int | None = None,
                      packed: bool = True):
    """Log-prob and entropy of every response token for one micro-batch, through `policy` (a
    `Policy`, or the engine that wraps it), in one packed row (or padded rows, `packed=False`).

    Returns logp (B, R), entropy (B, R), mask (B, R), R = the longest response.
    """
    inputs = packed_inputs(prompt_ids, response_ids) if packed else padded_inputs(prompt_ids, response_ids, pad_id)
    device = next(hf_model(policy).parameters()).device
    inputs = {k: v.to(device) if torch.is_tensor(v) else v for k, v in inputs.items()}
    logp, entropy = policy(**inputs, temperature=temperature, chunk_rows=chunk_rows)  # (M,), (M,)
    mask = data.right_pad_float([torch.ones(len(r)) for r in response_ids])[1].to(device)  # (B, R)
    if not packed:
        return logp.view(mask.shape), entropy.view(mask.shape), mask
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


def eos_token_ids(tokenizer, model) -> list[int]:
    """Every id that ends a response: the generation config's EOS ids and the tokenizer's."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("the tokenizer and the model's generation config name no EOS token")
    return ids
