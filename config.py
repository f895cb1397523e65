"""The one typed config: dataclasses, loaded from YAML, overridden from the command line.

    python train.py --config qwen3_8b_qae.yaml algorithm.K=0.6 trainer.total_steps=3

- `--config NAME` is a path, or a bare file name looked up in `configs/` (".yaml" optional).
- Each `section.key=value` override is read as YAML (`null`, `true`, `1e-6`, `[0.9, 0.999]`),
  or as plain text for a text field, and type-checked against the field it sets.
- Unknown keys and wrong types are rejected, naming the key and the closest valid one; then
  the cross-field checks of `validate` run. All before any model is loaded.
- `dump(cfg)` writes the resolved config as YAML; `loads(dump(cfg)) == cfg`.

Defaults are the paper's Qwen3-8B-Base setting (QAE_SPEC section 7); `configs/` quote the
source next to each value.

>>> cfg = from_dict({"algorithm": {"K": 0.6}}, overrides=["rollout.n=8"])
>>> cfg.algorithm.K, cfg.rollout.n, loads(dump(cfg)) == cfg
(0.6, 8, True)
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

CONFIG_DIR = Path(__file__).resolve().parent / "configs"

DAPO_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


class ConfigError(ValueError):
    """A config that cannot run; the message names the key and how to fix it."""


# ----------------------------------------------------------------------------------------------
# The config: one dataclass per section, a one-line doc under every field.
# ----------------------------------------------------------------------------------------------


@dataclass
class ModelConfig:
    name_or_path: str = "Qwen/Qwen3-8B-Base"
    """Hugging Face hub name or local folder of the policy (train.py checkpoints included)."""
    dtype: Literal["float32", "bfloat16", "float16"] = "bfloat16"
    """Parameter dtype of the policy; float32 on CPU."""
    attn_implementation: str | None = None
    """transformers attention backend (sdpa, flash_attention_2, eager); null = transformers' choice."""
    gradient_checkpointing: bool = True
    """Recompute activations in backward to save memory."""


@dataclass
class DataConfig:
    train_files: str = "BytedTsinghua-SIA/DAPO-Math-17k"
    """Training prompts: a hub dataset name, or a local .jsonl / .parquet file."""
    prompt_key: str = "prompt"
    """Column holding the problem text (dotted for nested fields)."""
    answer_key: str = "reward_model.ground_truth"
    """Column holding the ground-truth answer (dotted for nested fields)."""
    prompt_template: str = DAPO_TEMPLATE
    """User message; `{problem}` is replaced by the problem text (DAPO's template by default)."""
    chat_template: bool = True
    """Wrap the user message in the tokenizer's chat template."""
    max_prompt_len: int = 2048
    """Prompts longer than this many tokens are dropped from the dataset."""
    shuffle: bool = True
    """Shuffle the prompts each epoch (seeded by trainer.seed)."""


@dataclass
class RolloutConfig:
    backend: Literal["hf", "vllm"] = "vllm"
    """Sampler: transformers `generate` (CPU, tests) or a colocated vLLM engine."""
    n: int = 16
    """G, responses sampled per prompt (the group of the group baseline)."""
    temperature: float = 1.0
    """Sampling temperature T; training log-probs use logits / T too."""
    top_p: float = 1.0
    """Nucleus sampling threshold (1.0 = off)."""
    top_k: int = -1
    """Top-k sampling (-1 = off)."""
    max_response_len: int = 20480
    """Maximum new tokens per response; longer ones are truncated and flagged."""
    gpu_memory_utilization: float = 0.35
    """vLLM: fraction of accelerator memory its engine may hold (weights + KV cache), next to training."""
    max_num_batched_tokens: int = 16384
    """vLLM: tokens per engine step (the chunked-prefill budget)."""
    prompts_per_call: int = 0
    """Prompts per generate call (0 = a rank's whole share). Calls are seeded by their global index,
    so when this divides the per-rank share the samples do not depend on the number of processes."""
    enforce_eager: bool = False
    """vLLM: no CUDA graphs or torch.compile (starts faster, decodes slower; tests and CPU use true)."""


@dataclass
class RewardConfig:
    timeout_s: float = 2.0
    """Wall-clock bound per verified answer, enforced in a worker process."""
    workers: int | None = None
    """Verifier worker processes; null = one per CPU core."""
    overlong_buffer_len: int = 4096
    """DAPO overlong shaping: penalise the last this many tokens of the budget; 0 = off."""
    overlong_penalty_factor: float = 1.0
    """Largest overlong penalty, reached at max_response_len."""


@dataclass
class AlgorithmConfig:
    K: float | None = 0.4
    """Quantile level of the baseline (QAE); null = group mean (DAPO/GRPO)."""
    quantile_rule: Literal["linear", "right_continuous"] = "linear"
    """torch.quantile interpolation (authors' code) or the paper's inf{x : F(x) >= K}."""
    norm_adv_by_std: bool = True
    """Divide advantages by the group std (verl default); false = Dr. GRPO style."""
    adv_mask: Literal["none", "pos", "neg"] = "none"
    """Paper ablations: pos = POS-MASK, neg = NEG-MASK."""
    regime_K: float | None = None
    """K that defines hard (p <= 1 - K) and easy prompts for masks and logged regime fractions; null = K, or 0.4 under the mean baseline."""
    dynamic_sampling: bool = True
    """DAPO: drop groups whose correctness all agrees and sample more until the batch is full."""
    max_num_gen_batches: int = 10
    """Give up after this many generation batches in one step (DAPO: 10)."""
    clip_eps_low: float = 0.2
    """Lower clip range, rho >= 1 - eps_low."""
    clip_eps_high: float = 0.28
    """Upper clip range, rho <= 1 + eps_high (DAPO clip-higher)."""
    clip_c: float = 10.0
    """Dual-clip bound for negative advantages (verl clip_ratio_c)."""
    tis_cap: float | None = None
    """Truncated importance sampling: weight each token's loss by min(p_trainer / p_rollout, cap),
    correcting the sampler/trainer mismatch (vLLM backend); null = off (paper: off)."""
    loss_agg: Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    """Loss aggregation; token-mean divides by the mini-batch's global token count."""


@dataclass
class OptimConfig:
    lr: float = 1e-6
    """AdamW learning rate."""
    betas: tuple[float, float] = (0.9, 0.999)
    """AdamW betas."""
    weight_decay: float = 0.1
    """AdamW decoupled weight decay."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value."""
    warmup_steps: int = 0
    """Linear warmup over this many optimizer steps (paper: none; verl scripts: 10)."""
    lr_schedule: Literal["constant", "cosine"] = "constant"
    """Learning-rate schedule after warmup."""


@dataclass
class TrainerConfig:
    train_batch_size: int = 512
    """Prompts per training step (after dynamic sampling)."""
    gen_batch_size: int | None = 1536
    """Prompts per generation batch under dynamic sampling; null = train_batch_size."""
    mini_batch_size: int = 32
    """Prompts per optimizer step; train_batch_size / mini_batch_size steps per rollout batch."""
    ppo_epochs: int = 1
    """Passes over each rollout batch."""
    micro_batch_max_tokens: int = 32768
    """Token budget of one micro-batch (prompt + response tokens, per rank)."""
    sparse_update: bool = True
    """Skip zero-advantage responses in gradient passes (exact: they add no gradient)."""
    total_steps: int = 300
    """Training steps (rollout batches)."""
    seed: int = 42
    """Seed of everything: data order, sampling, initialisation."""
    output_dir: str = "runs/qae"
    """Where metrics, samples and checkpoints go."""
    save_every: int = 50
    """Checkpoint every this many steps (and at the end); 0 = only at the end."""
    keep_last: int = 2
    """Checkpoints kept on disk."""
    require_cuda: bool = False
    """Stop at once on a machine without CUDA GPUs (the paper-scale configs set it)."""


@dataclass
class EvalConfig:
    every: int = 0
    """Evaluate inside training every this many steps (and at the last step); 0 = off."""
    benchmarks: str = "aime24,aime25,amc23"
    """Comma-separated benchmark names (data/: aime24, aime25, amc23, math500) or .jsonl files."""
    n: int = 32
    """Samples per problem (paper: 32); pass@k is logged for k = 1, 2, 4, ... up to n."""
    temperature: float = 0.7
    """Paper: 0.7 (verl's DAPO scripts validate at 1.0 with top_p 0.7)."""
    top_p: float = 1.0
    """Nucleus threshold of evaluation sampling."""
    max_tokens: int | None = None
    """Longest evaluated response; null = rollout.max_response_len."""
    limit: int | None = None
    """Evaluate only the first this many problems of each benchmark; null = all."""


@dataclass
class LoggingConfig:
    wandb: bool = False
    """Also log to Weights & Biases (offline mode when no API key is set)."""
    project: str = "qae"
    """wandb project."""
    run_name: str | None = None
    """Run name; null = the output directory's name."""
    num_completions: int = 2
    """Sampled completions written as text each step."""


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


# ----------------------------------------------------------------------------------------------
# Cross-field checks.
# ----------------------------------------------------------------------------------------------


def validate(cfg: Config) -> Config:
    """Reject what cannot run, naming the key and the fix. Returns cfg."""
    a, r, t, o = cfg.algorithm, cfg.rollout, cfg.trainer, cfg.optim

    def need(ok: bool, msg: str):
        if not ok:
            raise ConfigError(msg)

    for key, K in (("algorithm.K", a.K), ("algorithm.regime_K", a.regime_K)):
        need(K is None or 0.0 < K < 1.0, f"config key `{key}` must be null or strictly between 0 and 1, got {K}")
    need(r.n >= 2, f"config key `rollout.n` must be >= 2 for a group baseline, got {r.n}")
    for key in ("train_batch_size", "mini_batch_size", "ppo_epochs", "total_steps", "micro_batch_max_tokens"):
        need(getattr(t, key) >= 1, f"config key `trainer.{key}` must be >= 1, got {getattr(t, key)}")
    need(
        t.train_batch_size % t.mini_batch_size == 0,
        f"config key `trainer.mini_batch_size` ({t.mini_batch_size}) must divide "
        f"`trainer.train_batch_size` ({t.train_batch_size})",
    )
    if a.dynamic_sampling:
        need(t.gen_batch_size is None or t.gen_batch_size >= 1, f"config key `trainer.gen_batch_size` must be >= 1, got {t.gen_batch_size}")
    else:
        need(
            t.gen_batch_size in (None, t.train_batch_size),
            f"config key `trainer.gen_batch_size` ({t.gen_batch_size}) is only used with dynamic sampling; "
            "set it to null or to trainer.train_batch_size",
        )
    for key, value in (("data.max_prompt_len", cfg.data.max_prompt_len), ("rollout.max_response_len", r.max_response_len)):
        need(value >= 1, f"config key `{key}` must be a positive length, got {value}")
    need(
        t.micro_batch_max_tokens >= cfg.data.max_prompt_len + r.max_response_len,
        f"config key `trainer.micro_batch_max_tokens` ({t.micro_batch_max_tokens}) must hold one full sequence, "
        f"data.max_prompt_len + rollout.max_response_len = {cfg.data.max_prompt_len + r.max_response_len}",
    )
    need(
        0 <= cfg.reward.overlong_buffer_len < r.max_response_len,
        f"config key `reward.overlong_buffer_len` must be in [0, rollout.max_response_len = {r.max_response_len}), "
        f"got {cfg.reward.overlong_buffer_len}",
    )
    need(cfg.reward.timeout_s > 0, f"config key `reward.timeout_s` must be > 0, got {cfg.reward.timeout_s}")
    need(cfg.reward.workers is None or cfg.reward.workers >= 1, f"config key `reward.workers` must be null or >= 1, got {cfg.reward.workers}")
    need(r.temperature > 0, f"config key `rollout.temperature` must be > 0, got {r.temperature}")
    need(0 < r.top_p <= 1, f"config key `rollout.top_p` must be in (0, 1], got {r.top_p}")
    need(r.top_k == -1 or r.top_k >= 1, f"config key `rollout.top_k` must be -1 (off) or >= 1, got {r.top_k}")
    need(0 < a.clip_eps_low < 1, f"config key `algorithm.clip_eps_low` must be in (0, 1), got {a.clip_eps_low}")
    need(a.clip_eps_high > 0, f"config key `algorithm.clip_eps_high` must be > 0, got {a.clip_eps_high}")
    need(a.clip_c > 1, f"config key `algorithm.clip_c` must be > 1, got {a.clip_c}")
    need(a.max_num_gen_batches >= 1, f"config key `algorithm.max_num_gen_batches` must be >= 1, got {a.max_num_gen_batches}")
    need(o.lr >= 0 and o.weight_decay >= 0 and o.warmup_steps >= 0, "config keys `optim.lr`, `optim.weight_decay`, `optim.warmup_steps` must be >= 0")
    need(o.grad_clip > 0, f"config key `optim.grad_clip` must be > 0, got {o.grad_clip}")
    need(all(0 <= b < 1 for b in o.betas), f"config key `optim.betas` must be two numbers in [0, 1), got {list(o.betas)}")
    e = cfg.eval
    need(e.every >= 0, f"config key `eval.every` must be >= 0 (0 = off), got {e.every}")
    need(e.n >= 1 and 0 < e.top_p <= 1 and e.temperature > 0, "config keys `eval.n` >= 1, `eval.top_p` in (0, 1], `eval.temperature` > 0")
    need(e.limit is None or e.limit >= 1, f"config key `eval.limit` must be null or >= 1, got {e.limit}")
    need(r.prompts_per_call >= 0, f"config key `rollout.prompts_per_call` must be >= 0 (0 = all at once), got {r.prompts_per_call}")
    need(a.tis_cap is None or a.tis_cap >= 1, f"config key `algorithm.tis_cap` must be null (off) or >= 1, got {a.tis_cap}")
    need(t.save_every >= 0 and t.keep_last >= 1, "config keys `trainer.save_every` must be >= 0 and `trainer.keep_last` >= 1")
    need("{problem}" in cfg.data.prompt_template, "config key `data.prompt_template` must contain `{problem}`")
    return cfg


# ----------------------------------------------------------------------------------------------
# Building a Config from plain data, with typed checks and suggestions.
# ----------------------------------------------------------------------------------------------


def _all_keys() -> list[str]:
    """Every valid `section.key`."""
    sections = typing.get_type_hints(Config)
    return [f"{name}.{f.name}" for name, cls in sections.items() for f in dataclasses.fields(cls)]


def _suggest(key: str, options: list[str]) -> str:
    """' (did you mean `x`?)' for the closest option, case-insensitively, or ''."""
    lower = {o.lower(): o for o in options}
    leaf = key.split(".")[-1].lower()  # a right name in the wrong section: `trainer.K` -> `algorithm.K`
    match = [o for o in lower if o.split(".")[-1] == leaf][:1]
    match = match or difflib.get_close_matches(key.lower(), list(lower), n=1, cutoff=0.5)
    return f" (did you mean `{lower[match[0]]}`?)" if match else ""


def _typename(tp) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


@dataclass(frozen=True)
class _Override:
    """A command-line value, parsed once its field's type is known: text for a str field, else YAML."""

    text: str

    def parse(self, tp):
        if (tp is str or str in typing.get_args(tp)) and self.text not in ("null", "~"):
            return self.text
        try:
            return yaml.safe_load(self.text)
        except yaml.YAMLError:
            return self.text


def _coerce(value, tp, key: str):
    """Check `value` against the annotation `tp`; return it converted (int -> float, list -> tuple)."""
    if isinstance(value, _Override):
        value = value.parse(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [x for x in args if x is not type(None)]
        return _coerce(value, inner, key)
    if origin is Literal:
        if value not in args:
            raise ConfigError(f"config key `{key}` must be one of {list(args)}, got {value!r}{_suggest(str(value), [str(x) for x in args])}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"config key `{key}` must be a list of {len(args)} numbers, got {value!r}")
        return tuple(_coerce(v, t, f"{key}[{i}]") for i, (v, t) in enumerate(zip(value, args)))
    if tp is float and isinstance(value, str):  # YAML 1.1 reads `1e-6` (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    ok = {
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, (int, float)) and not isinstance(value, bool),
        str: isinstance(value, str),
    }[tp]
    if not ok:
        raise ConfigError(f"config key `{key}` must be {_typename(tp)}, got {value!r} ({type(value).__name__})")
    return float(value) if tp is float else value


def _build(cls, data, prefix: str):
    if not isinstance(data, dict):
        raise ConfigError(f"config section `{prefix}` must be a mapping of keys to values, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in data:
        if key not in names:
            where = f"{prefix}.{key}" if prefix else str(key)
            scope = ([f"{prefix}.{n}" for n in names] if prefix else names) + _all_keys()
            raise ConfigError(f"unknown config key `{where}`{_suggest(where, scope)}")
    kwargs = {}
    for name in names:
        if name not in data:
            continue
        key = f"{prefix}.{name}" if prefix else name
        if dataclasses.is_dataclass(hints[name]):
            kwargs[name] = _build(hints[name], data[name] or {}, key)
        else:
            kwargs[name] = _coerce(data[name], hints[name], key)
    return cls(**kwargs)


def _set_dotted(data: dict, dotted: str, value) -> None:
    parts = dotted.split(".")
    if len(parts) != 2 or not all(parts):
        raise ConfigError(f"override `{dotted}=...` must name `section.key`{_suggest(dotted, _all_keys())}")
    section = data.setdefault(parts[0], {})
    if not isinstance(section, dict):
        raise ConfigError(f"config section `{parts[0]}` must be a mapping")
    section[parts[1]] = value


def from_dict(data: dict | None, overrides: list[str] = ()) -> Config:
    """Config from a nested dict plus `section.key=value` overrides, checked and validated."""
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in (data or {}).items()}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise ConfigError(f"override `{item}` must look like `section.key=value`")
        _set_dotted(data, key.strip(), _Override(raw))
    return validate(_build(Config, data, ""))


def resolve_path(name: str) -> Path:
    """A config file given as a path, or as a bare name in configs/ ('.yaml' optional)."""
    candidates = [Path(name), CONFIG_DIR / name]
    if not name.endswith((".yaml", ".yml")):
        candidates += [Path(name + ".yaml"), CONFIG_DIR / (name + ".yaml")]
    for path in candidates:
        if path.is_file():
            return path
    available = ", ".join(sorted(p.name for p in CONFIG_DIR.glob("*.yaml")))
    raise ConfigError(f"config file `{name}` not found (looked in . and {CONFIG_DIR}); available: {available}")


def load(name: str, overrides: list[str] = ()) -> Config:
    """Load a YAML config by path or bare name, apply overrides, validate."""
    path = resolve_path(name)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ConfigError(f"config file `{path}` is not valid YAML: {str(e).splitlines()[0]}") from None
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"config file `{path}` must hold a mapping of sections, got {type(data).__name__}")
    return from_dict(data, overrides)


def as_dict(obj):
    """Dataclasses -> dicts, tuples -> lists: what yaml.safe_dump can write."""
    if dataclasses.is_dataclass(obj):
        return {f.name: as_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return list(obj) if isinstance(obj, tuple) else obj


def dump(cfg: Config) -> str:
    """The resolved config as YAML."""
    return yaml.safe_dump(as_dict(cfg), sort_keys=False, width=1000)


def loads(text: str) -> Config:
    """Inverse of `dump`."""
    return from_dict(yaml.safe_load(text))


# ----------------------------------------------------------------------------------------------
# Command line.
# ----------------------------------------------------------------------------------------------


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", required=True, help="YAML file, or a bare name in configs/ (e.g. tiny_qae.yaml)")
    parser.add_argument("overrides", nargs="*", help="section.key=value overrides, e.g. algorithm.K=0.6")


def from_cli(args: argparse.Namespace) -> Config:
    """Load the config named on the command line; on a bad config print one line and exit 2."""
    try:
        return load(args.config, args.overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":  # python config.py --config NAME [overrides]: print the resolved config
    _parser = argparse.ArgumentParser(description="Print a resolved config.")
    add_cli_args(_parser)
    print(dump(from_cli(_parser.parse_args())), end="")
