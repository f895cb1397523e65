"""The policy: loading the model and tokenizer, and the one forward the update runs through.

    check_model(path, "model.name_or_path")    # before anything loads: a model folder, or a hub id (choice 4)
    tokenizer = load_tokenizer(path, chat_template=True)
    hf = load_policy(cfg.model, path)          # an HF causal LM (partitioned as it loads under ZeRO-3)
    policy = Policy(hf)                        # what accelerator.prepare wraps (DeepSpeed engine, DDP)
    logp, entropy, mask = response_logprobs(policy, prompt_ids, response_ids, T, pad_id, num_chunks)
    passes = plan_passes(micro_batches, response_lens, chunk_tokens, accelerator, filler)

`Policy.forward` returns, for every response token, log pi(o_t | q, o_<t) under the sampling
temperature T (logits / T before the log-softmax, paper section 2 / verl) and the entropy of
that distribution, projecting hidden states to the vocabulary chunk by chunk
(loss.token_logprobs_from_hidden), so no (B, T, V) tensor exists.

Choices, numbered:
1. The log-prob forward is a module that accelerate prepares, so every micro-batch goes through
   `DeepSpeedEngine.forward`. ZeRO-3 counts micro-steps there: at micro-step 0 it copies a
   gradient into its partition, later it adds. A forward that bypassed the engine (calling the
   inner model) would overwrite each micro-batch's gradient with the next one's.
2. Equal collective counts on every rank. Under ZeRO-3 every module call all-gathers its
   parameters, a collective: ranks must make the same number of forward passes and, in each, the
   same number of output-layer calls. `plan_passes` agrees on the largest pass count (a rank
   with fewer runs zero-weighted filler passes) and, per pass, on the largest chunk count (a
   rank with fewer rows pads its rows with zeros, whose outputs are dropped). With one process
   the plan is exactly the local one.
3. Tokenizers without a pad token pad with EOS; padded positions are masked everywhere.
4. A model path is checked before anything loads, so a bad one is one line (ModelError), not a
   library's traceback: an existing folder must hold config.json, readable weights (safetensors
   headers are checked against the file size) and a tokenizer; anything else must be a hub id
   (`name` or `owner/name`) that is cached or that the hub answers for, asked once, without retries.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

import data
import loss
from data_files import one_line


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
    """What keeps `folder` from holding a loadable model and tokenizer, starting with the file's name; None if nothing."""
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
        raise ModelError(f"{key} `{path}` is a file; give the folder that holds config.json, the weights and the tokenizer")
    where = "" if folder.is_absolute() else f" (relative to `{Path.cwd()}`)"
    if not is_hub_id(path):
        raise ModelError(f"{key}: local path `{path}` not found{where}, and it is not a hub id (`name` or `owner/name`) "
                         "either; give an existing model folder or a hub id")
    problem = hub_problem(path)
    if problem:
        raise ModelError(f"{key} `{path}` is not a local folder{where}, so it was read as a hub id, but {problem}; "
                         f"download it where the hub is reachable (`hf download {path} --local-dir DIR`) and set {key} to DIR")


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


class Policy(nn.Module):
    """The HF causal LM whose forward returns per-token log-probs and entropy of given tokens (choice 1)."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask, positions, targets, temperature: float, num_chunks: int | None = None):
        """input_ids, attention_mask (B, L); positions (B, R): the position whose hidden state predicts
        each target; targets (B, R) -> logp (B, R), entropy (B, R), both fp32."""
        hidden = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask,
                                       use_cache=False).last_hidden_state  # (B, L, H), after the final norm
        h = hidden.gather(1, positions[..., None].expand(-1, -1, hidden.shape[-1]))  # (B, R, H)
        return loss.token_logprobs_from_hidden(h, self.model.get_output_embeddings(), targets, temperature,
                                               num_chunks=num_chunks)


def hf_model(model):
    """The HF model inside whatever wraps it: a DeepSpeed engine or DDP (`.module`), then `Policy`."""
    model = getattr(model, "module", model)
    return model.model if isinstance(model, Policy) else model


def response_logprobs(policy, prompt_ids, response_ids, temperature: float, pad_id: int, num_chunks: int | None = None):
    """Log-prob and entropy of every response token for one micro-batch, through `policy` (a
    `Policy`, or the engine that wraps it).

    Sequences are laid out [prompt][response][pad]. Returns logp (B, R), entropy (B, R), mask
    (B, R), R = the longest response.
    """
    input_ids, attention_mask = data.right_pad([p + r for p, r in zip(prompt_ids, response_ids)], pad_id)  # (B, L)
    device = next(hf_model(policy).parameters()).device
    R = max(len(r) for r in response_ids)
    start = torch.tensor([len(p) - 1 for p in prompt_ids])[:, None]  # (B, 1): predicts the first response token
    positions = (start + torch.arange(R)[None, :]).clamp(max=input_ids.shape[1] - 1)  # (B, R)
    targets, mask = data.right_pad(response_ids, pad_id)  # (B, R), (B, R)
    logp, entropy = policy(input_ids.to(device), attention_mask.to(device), positions.to(device), targets.to(device),
                           temperature, num_chunks)
    return logp, entropy, mask.to(device)


def chunk_tokens(model, configured: int | None) -> int:
    """Rows per output-layer chunk: the config's `trainer.logprob_chunk_tokens`, or loss.CHUNK_ELEMENTS / V."""
    return configured or max(1, loss.CHUNK_ELEMENTS // model.config.vocab_size)  # config: a ZeRO-3 shard is empty


@dataclass
class Pass:
    """One forward (and backward) pass of a plan."""

    ids: list[int]  # responses in the pass
    weight: float  # 1.0, or 0.0 for a filler pass that only keeps collective counts equal (choice 2)
    num_chunks: int  # output-layer calls, the same on every rank


def plan_passes(micro: list[list[int]], response_lens, chunk_size: int, accelerator, filler: int,
                at_least_one: bool = True) -> list[Pass]:
    """The passes this rank runs over its micro-batches `micro` (lists of response indices), with
    pass and chunk counts agreed over ranks (choice 2). `filler` is a response index a filler pass
    may use; `at_least_one` keeps one pass where no rank has work (a gradient pass: the optimizer
    then sees zero gradients, not none). Two small all-gathers under several processes; none with one."""
    rows = [len(ids) * max(response_lens[i] for i in ids) for ids in micro]  # (B * R) per pass
    chunks = [max(1, math.ceil(r / chunk_size)) for r in rows]
    if accelerator is None or accelerator.num_processes == 1:
        return [Pass(ids, 1.0, c) for ids, c in zip(micro, chunks)] or [Pass([filler], 0.0, 1)] * at_least_one
    device = accelerator.device
    n = int(accelerator.gather(torch.tensor([len(micro)], device=device)).max().clamp(min=int(at_least_one)))
    if n == 0:
        return []
    mine = torch.ones(n, dtype=torch.long, device=device)  # a filler pass: one response, one chunk at most
    mine[: len(chunks)] = torch.tensor(chunks, dtype=torch.long)
    agreed = accelerator.gather(mine[None]).view(-1, n).amax(0).tolist()  # (n,) the largest count of each pass
    passes = [Pass(ids, 1.0, c) for ids, c in zip(micro, agreed)]
    return passes + [Pass([filler], 0.0, c) for c in agreed[len(micro):]]
