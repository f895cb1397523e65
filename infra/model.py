"""The policy model and its tokenizer, checked and loaded: a bad path is one line before anything loads.

    check_model(path, "model.name_or_path")    # a model folder, or a hub id the hub or its cache serves (choice 1)
    tokenizer = load_tokenizer(path, chat_template=True)
    hf = load_policy(cfg.model, path)          # an HF causal LM (partitioned as it loads under ZeRO-3)
    shell = policy_shell(cfg.model, path)      # the same without weights, for a vLLM engine that reads them itself
    eos = eos_token_ids(tokenizer, hf)         # every id that ends a response
    blocks = moe_blocks(path)                  # a mixture of experts' sparse blocks, from config.json: ZeRO-3 leaves

A mixture of experts (Qwen3-30B-A3B-Base) has its sparse block class (router + experts) named in `MOE_BLOCKS` by model
type, so that infra.launch.deepspeed_plugin makes each block one ZeRO-3 leaf module; an MoE model of a type it does
not name is refused in one line (docs/gpu.md, "Mixture of experts").

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. A model path is checked before anything loads and a bad one raises ModelError, one line naming the key and the fix.
2. Tokenizers without a pad token pad with EOS; padded positions are masked everywhere.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

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
        tokenizer.pad_token = tokenizer.eos_token  # choice 2
    return tokenizer


def load_policy(model_cfg, path: str):
    """The HF causal LM at `path` in `model.dtype`; under a ZeRO-3 accelerator it is partitioned as it loads.
    ModelError if the checkpoint does not fill every weight: transformers would leave those at random initial values
    with a warning (a block whose per-expert tensors are missing loads so, under ZeRO-3 or not)."""
    from transformers import AutoModelForCausalLM

    model, info = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, model_cfg.dtype), attn_implementation=model_cfg.attn_implementation,
        output_loading_info=True)
    unloaded = sorted(map(str, [*info["missing_keys"], *info["mismatched_keys"], *info["error_msgs"]]))
    if unloaded:
        raise ModelError(f"`{path}` does not fill every weight of its model ({len(unloaded)} not loaded: "
                         f"{', '.join(unloaded[:3])}{' ...' if len(unloaded) > 3 else ''}); training would start "
                         "them from random values: give a complete checkpoint")
    if model_cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def policy_shell(model_cfg, path: str):
    """The HF causal LM at `path` on the meta device, no weights read: its name, config, dtype and generation
    config, all a vLLM engine that loads the checkpoint itself needs from it (evaluation)."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    config = AutoConfig.from_pretrained(path)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, model_cfg.dtype))
    try:
        model.generation_config = GenerationConfig.from_pretrained(path)  # its EOS ids, as from_pretrained reads them
    except OSError:  # no generation_config.json: the config's own
        pass
    return model


# ----------------------------------------------------------------------------------------------
# Mixture-of-experts blocks: which modules ZeRO-3 gathers, prefetches and reduces as one unit.
# ----------------------------------------------------------------------------------------------

# model_type -> the class of its sparse MoE block (router + experts), as DeepSpeed's leaf-module setting names classes.
# transformers 5.19 holds a Qwen3-MoE block's 128 experts fused in one module (two 3D parameters); docs/gpu.md,
# "Mixture of experts", says what the leaf setting changes for it.
MOE_BLOCKS = {"qwen3_moe": "transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock"}
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")  # how HF configs name the expert count


def moe_blocks(path: str) -> list[str]:
    """The sparse MoE block classes of the model at `path` (its config.json alone): [] for a dense model.
    Raises ModelError for a mixture of experts whose type `MOE_BLOCKS` does not name."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path)
    if config.model_type in MOE_BLOCKS:
        return [MOE_BLOCKS[config.model_type]]
    experts = num_experts(config)
    if experts:
        raise ModelError(f"`{path}` is a mixture of experts (model type {config.model_type}, {experts} experts) "
                         "that this trainer has not been set up for: add its sparse block's class to "
                         "infra.model.MOE_BLOCKS, so that ZeRO-3 gathers and reduces each block as one leaf module "
                         "(docs/gpu.md, \"Mixture of experts\")")
    return []


def num_experts(hf_config) -> int:
    """The experts of each sparse block of an HF config; 0 for a dense model."""
    return next((getattr(hf_config, k) for k in EXPERT_COUNT_KEYS if getattr(hf_config, k, None)), 0)


def eos_token_ids(tokenizer, model) -> list[int]:
    """Every id that ends a response: the generation config's EOS ids and the tokenizer's."""
    ids = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("the tokenizer and the model's generation config name no EOS token")
    return ids
