"""The one typed config: dataclasses with a one-line doc under every field, loaded from YAML,
overridden from the command line, checked and resolved before anything expensive runs.

    python train.py --config qwen3_8b_qae.yaml algorithm.K=0.6 trainer.total_steps=3
    python config.py --config tiny_dapo.yaml         # print the fully resolved config

- `--config NAME` is a path, or a bare file name looked up in `configs/` (".yaml" optional). A
  file may name a `base:` config and override a few keys (infra/config_loader.py).
- Each `section.key=value` override is read as YAML (`null`, `true`, `1e-6`, `[0.9, 0.999]`),
  or as plain text for a text field, and type-checked against the field it sets.
- Unknown keys and wrong types are rejected, naming the key, the file that set it and the
  closest valid key; then `validate` runs the cross-field checks and resolves every derived
  value (e.g. `algorithm.regime_K`), so the dumped config is exactly what runs.
- `dump(cfg)` writes the resolved config as YAML; `loads(dump(cfg)) == cfg`.

Defaults are the paper's Qwen3-8B-Base setting (arXiv 2509.22611, section 5 and appendix; verl's
DAPO recipe); `configs/` name the source next to each value.

>>> cfg = from_dict({"algorithm": {"K": 0.6}}, overrides=["rollout.n=8"])
>>> cfg.algorithm.K, cfg.rollout.n, cfg.algorithm.regime_K, loads(dump(cfg)) == cfg
(0.6, 8, 0.6, True)
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Literal

import yaml

from infra.cli import one_line_errors
from infra.config_checks import validate
from infra.config_loader import (
    ConfigError,  # noqa: F401 - re-exported: `from config import ConfigError`
    all_keys,
    build,
    read_chain,
    resolve_path,
    set_override,
)

DAPO_TEMPLATE = (
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n{problem}\n\n"
    'Remember to put your answer on its own line after "Answer:".'
)


# ----------------------------------------------------------------------------------------------
# The config: one dataclass per section, a one-line doc under every field.
# ----------------------------------------------------------------------------------------------


@dataclass
class ModelConfig:
    name_or_path: str = "Qwen/Qwen3-8B-Base"
    """Hugging Face hub name or local folder of the policy (train.py checkpoints included)."""
    dtype: Literal["float32", "bfloat16", "float16", "float64"] = "bfloat16"
    """Parameter dtype of the policy; float32 on CPU (float64: exactness tests, without DeepSpeed)."""
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
    """Sampler: the policy itself in infra/hf_sampler.py's loop (CPU, tests) or a colocated vLLM engine."""
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
    gpu_memory_utilization: float | Literal["auto"] = 0.70
    """vLLM: its share of accelerator memory (weights + KV cache); auto = infra/gpu_memory.py's rule (docs/gpu.md)."""
    max_num_batched_tokens: int = 16384
    """vLLM: tokens per engine step (the chunked-prefill budget)."""
    max_num_seqs: int = 256
    """vLLM: sequences decoded at once; its max_model_len is data.max_prompt_len + rollout.max_response_len."""
    prompts_per_call: int = 0
    """Prompts per generate call (0 = a rank's whole share); each call is seeded by its global index."""
    enforce_eager: bool = False
    """vLLM: no CUDA graphs or torch.compile (starts faster, decodes slower; tests and CPU use true)."""
    logp_gap_max: float | Literal["auto"] | None = "auto"
    """vLLM: rollout/logp_diff_mean above this stops a start's first 2 steps (warns later); auto: by dtype; null off."""
    logp_gap_warn: float | Literal["auto"] | None = "auto"
    """vLLM: rollout/logp_diff_mean above this (<= logp_gap_max) warns, on any step; auto: by dtype; null off."""


@dataclass
class RewardConfig:
    mode: str = "verify"
    """A name in reward.REWARDS: verify (boxed or `Answer:`, equal mathematically), dapo (verl's exactly), a fork's."""
    answer_format: Literal["any", "boxed", "answer_line", "answer_tag"] = "any"
    """Marker the prompt asks for, read first (verify): boxed, answer_line (DAPO's Answer:), answer_tag (<answer>)."""
    strict_format: bool = False
    """true: a response without answer_format's marker scores -1 (a format reward); false: any marker counts."""
    timeout_s: float = 2.0
    """Wall-clock bound per verified answer, enforced in a worker process."""
    workers: int | None = None
    """Verifier worker processes; null = min(4, the CPUs this process may use) (verifier/pool.py)."""
    overlong_buffer_len: int = 4096
    """DAPO overlong shaping: penalise the last this many tokens of the budget; 0 = off."""
    overlong_penalty_factor: float = 1.0
    """Largest overlong penalty, reached at max_response_len."""


@dataclass
class AlgorithmConfig:
    baseline: str = "quantile"
    """Group baseline, a name in advantage.BASELINES: quantile (QAE), mean (GRPO/DAPO), or a fork's."""
    K: float | None = 0.4
    """K, set for a baseline that takes it (the quantile baseline's level, paper: 0.4), null for one that does not."""
    quantile_rule: Literal["linear", "right_continuous"] = "linear"
    """torch.quantile interpolation (authors' code) or the paper's inf{x : F(x) >= K}."""
    quantile_of: Literal["shaped", "verdict"] = "shaped"
    """What the baseline is taken over: the shaped rewards (as verl) or the verifier's scores (exact gate)."""
    norm_adv_by_std: bool = True
    """Divide advantages by the group std (verl default); false = Dr. GRPO style."""
    adv_mask: Literal["none", "pos", "neg"] = "none"
    """Paper ablations (section 5.3): pos = POS-MASK, neg = NEG-MASK; quantile baseline only."""
    regime_K: float | None = None
    """K of the logged hard (p <= 1 - K) / easy split; null = algorithm.K when set, else 0.4 (saved resolved)."""
    dynamic_sampling: bool = True
    """DAPO: drop groups whose correctness all agrees and sample more until the batch is full."""
    max_num_gen_batches: int = 10
    """Give up after this many generation batches in one step (DAPO: 10)."""
    policy_loss: str = "clip-higher"
    """Policy loss, a name in loss.POLICY_LOSSES: clip-higher (DAPO), clip-cov, kl-cov, gspo, or a fork's."""
    clip_eps_low: float | None = 0.2
    """Lower clip range, rho >= 1 - eps_low (null for a loss without a ratio clip: kl-cov)."""
    clip_eps_high: float | None = 0.28
    """Upper clip range, rho <= 1 + eps_high (DAPO clip-higher; gspo clips the sequence ratio)."""
    clip_c: float | None = 10.0
    """Dual-clip bound for negative advantages (verl clip_ratio_c); clip-higher only, null for the others."""
    clip_cov_ratio: float | None = None
    """Clip-Cov r: the fraction of the mini-batch's tokens whose gradient is detached; clip-cov only."""
    clip_cov_lb: float | None = None
    """Clip-Cov: a token is a candidate when clip_cov_lb < Cov(logp, A) < clip_cov_ub; clip-cov only."""
    clip_cov_ub: float | None = None
    """Clip-Cov: the candidates' upper covariance bound; clip-cov only."""
    kl_cov_ratio: float | None = None
    """KL-Cov k: the fraction of the mini-batch's tokens, largest Cov(logp, A) first, given the penalty; kl-cov only."""
    kl_cov_coef: float | None = None
    """KL-Cov beta: the weight of the |log ratio| penalty on the selected tokens; kl-cov only."""
    tis_cap: float | None = None
    """Truncated importance sampling: weight token losses by min(p_trainer / p_rollout, cap) (vLLM); null = off."""
    loss_agg: Literal["token-mean", "group-token-mean", "seq-mean-token-mean", "seq-mean-token-sum"] = "token-mean"
    """Loss normaliser (loss.AGGREGATIONS): token-mean as verl, group-token-mean as the paper's equation, ..."""


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
    adaptive_gen_batch: bool = False
    """Size each generation batch from the keep rate (+25%, up to gen_batch_size); false = gen_batch_size, as verl."""
    mini_batch_size: int = 32
    """Prompts per optimizer step; train_batch_size / mini_batch_size steps per rollout batch."""
    ppo_epochs: int = 1
    """Passes over each rollout batch."""
    micro_batch_max_tokens: int = 32768
    """Token budget of one micro-batch (prompt + response tokens, per rank)."""
    logprob_chunk_tokens: int | None = None
    """Tokens per output-layer chunk of the log-prob forward; null = 2^25 / vocabulary size (220 for Qwen3)."""
    sparse_update: bool = True
    """Skip zero-advantage responses in gradient passes (exact: they add no gradient)."""
    reuse_logprobs: bool = True
    """Old log-probs from passes that run anyway, not a no-grad pass over every response; false = that pass."""
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
    collective_timeout_min: float = 10.0
    """Minutes a collective waits for the slowest rank before the run ends (infra/launch.py); 10 = NCCL's default."""


@dataclass
class DeepSpeedConfig:
    zero_stage: Literal[0, 3] = 3
    """DeepSpeed ZeRO stage: 3 shards parameters, gradients and optimizer state; 0 = no DeepSpeed."""
    offload_optimizer: Literal["none", "cpu"] = "none"
    """Keep the optimizer state (and fp32 master weights) in host memory."""
    offload_param: Literal["none", "cpu"] = "none"
    """Keep the partitioned parameters in host memory between uses."""
    grad_accum_fp32: bool = True
    """Accumulate gradients in fp32 even for a bf16 model (DeepSpeed grad_accum_dtype; memory: docs/gpu.md)."""


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
    entropy_sample: float = 1.0
    """A = 0 responses given a forward for the entropy metrics (vLLM): a fraction in (0, 1], or a count > 1."""


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    deepspeed: DeepSpeedConfig = field(default_factory=DeepSpeedConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


# ----------------------------------------------------------------------------------------------
# Loading, dumping, the command line.
# ----------------------------------------------------------------------------------------------


def from_dict(data: dict | None, overrides: list[str] = (), origin: dict | None = None) -> Config:
    """Config from a nested dict plus `section.key=value` overrides, checked and validated
    (`origin`: which file set each `section.key`, for error messages)."""
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in (data or {}).items()}
    origin = dict(origin or {})
    keys = all_keys(Config)
    for item in overrides:
        set_override(data, item, keys, origin)
    cfg = build(Config, data, origin)
    check_advantage_settings(cfg.algorithm)
    check_loss_settings(cfg.algorithm)
    check_reward_settings(cfg.reward, cfg.data.prompt_template)
    return validate(cfg)


# How advantage.check_settings names the `algorithm` section's settings in a config's errors.
ADVANTAGE_KEYS = {"baseline": "config key `algorithm.baseline`", "K": "config key `algorithm.K`",
                  "quantile_rule": "config key `algorithm.quantile_rule`", "mask": "config key `algorithm.adv_mask`",
                  "over_verdicts": "config key `algorithm.quantile_of: verdict` (the baseline over the verifier's "
                                   "scores)", "unset": "null"}


def check_advantage_settings(algo: AlgorithmConfig) -> None:
    """The advantage's settings, checked by advantage.py's own rules (the ones compute_advantages applies)."""
    import advantage  # its registry of baselines names the valid `algorithm.baseline` values

    try:
        advantage.check_settings(algo.baseline, algo.K, algo.quantile_rule, None if algo.adv_mask == "none"
                                 else algo.adv_mask, over_verdicts=algo.quantile_of == "verdict", names=ADVANTAGE_KEYS)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def check_loss_settings(algo: AlgorithmConfig) -> None:
    """The policy loss's settings, checked by loss.py's own rules: a registered loss, the settings it takes set, the
    others null, an aggregation it admits."""
    import loss  # its registry of policy losses names the valid `algorithm.policy_loss` values

    try:
        loss.check_settings(algo.policy_loss, {k: getattr(algo, k) for k in loss.SETTINGS}, algo.loss_agg,
                            key=lambda k: f"config key `algorithm.{k}`")
    except ValueError as e:
        raise ConfigError(str(e)) from None


# What a prompt that asks for each answer format says (a strict format the prompt never asks for scores every -1).
FORMAT_WORDS = {"boxed": "\\boxed", "answer_line": "Answer:", "answer_tag": "<answer>"}


def check_reward_settings(reward_cfg: RewardConfig, prompt_template: str) -> None:
    """The reward's mode, checked against reward.py's registry (an entry a fork appends there is valid), and the
    answer format: one the mode reads, and under strict_format one the prompt asks for."""
    import reward  # its registry of rewards names the valid `reward.mode` values

    try:
        reward.entry_for(reward_cfg.mode, reward_cfg.answer_format, reward_cfg.strict_format)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    word = FORMAT_WORDS.get(reward_cfg.answer_format)
    if reward_cfg.strict_format and word not in prompt_template:
        raise ConfigError(f"reward.strict_format: true with reward.answer_format: {reward_cfg.answer_format}, but "
                          f"data.prompt_template never writes {word!r}: every response would score -1; ask for it in "
                          f"the prompt or set reward.strict_format: false")


def load(name: str, overrides: list[str] = ()) -> Config:
    """Load a YAML config (and its `base:` chain) by path or bare name, apply overrides, validate."""
    data, origin = read_chain(resolve_path(name))
    return from_dict(data, overrides, origin)


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


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument("--config", required=True, help="YAML file, or a bare name in configs/ (e.g. tiny_qae.yaml)")
    parser.add_argument("overrides", nargs="*", help="section.key=value overrides, e.g. algorithm.K=0.6")


def from_cli(args: argparse.Namespace) -> Config:
    """Load the config named on the command line; on a bad config print one line and exit 2."""
    try:
        return load(args.config, args.overrides)
    except ConfigError as e:
        print(f"error: {e}".splitlines()[0], file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":  # python config.py --config NAME [overrides]: print the resolved config
    _parser = argparse.ArgumentParser(description="Print a resolved config.")
    add_cli_args(_parser)
    print(dump(from_cli(_parser.parse_args())), end="")
