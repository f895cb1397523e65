"""The config's cross-field checks: every value that cannot run is refused before anything
expensive starts, in one line naming the key and the fix, and every derived value is resolved
(`algorithm.regime_K`, `rollout.logp_gap_*`), so the saved config is exactly what runs. config.py calls `validate` on
every config it builds, after checking the advantage's settings (baseline, K, quantile rule, mask) with
advantage.check_settings, the rules compute_advantages applies, and which settings the policy loss takes with
loss.check_settings; neither is repeated here.
"""

from __future__ import annotations

from infra.config_loader import ConfigError

# `auto` of rollout.logp_gap_warn and rollout.logp_gap_max per model.dtype: (warn above, stop above) for the step's
# mean |logp_trainer - logp_vllm|. 16 bits: published healthy bf16 gaps are 0.011 (mean) to 0.041 (RMS), so warn just
# above them and stop at 5x the largest, 2x slime's CI gate of 0.1; fp32: ~3e-6 measured. docs/gpu.md, "Self-checks".
LOGP_GAP_BANDS = {"float32": (1e-4, 1e-3), "float64": (1e-4, 1e-3), "bfloat16": (0.05, 0.2), "float16": (0.05, 0.2)}


def validate(cfg) -> object:
    """Reject what cannot run, naming the key and the fix; resolve derived values. Returns cfg.
    The advantage's own settings (baseline, K, quantile rule, mask) are checked before, by
    advantage.py's rules (config.check_advantage_settings)."""
    algo, rollout, trainer, optim, evaluation = cfg.algorithm, cfg.rollout, cfg.trainer, cfg.optim, cfg.eval

    def need(ok: bool, msg: str):
        if not ok:
            raise ConfigError(msg)

    need(algo.regime_K is None or 0.0 < algo.regime_K < 1.0,
         f"config key `algorithm.regime_K` must be null or strictly between 0 and 1, got {algo.regime_K}")
    if algo.regime_K is None:  # resolved here, so the saved config says what was used
        algo.regime_K = algo.K if algo.K is not None else 0.4
    need(rollout.n >= 2, f"config key `rollout.n` must be >= 2 for a group baseline, got {rollout.n}")
    for key in ("train_batch_size", "mini_batch_size", "ppo_epochs", "total_steps", "micro_batch_max_tokens"):
        need(getattr(trainer, key) >= 1, f"config key `trainer.{key}` must be >= 1, got {getattr(trainer, key)}")
    need(
        trainer.train_batch_size % trainer.mini_batch_size == 0,
        f"config key `trainer.mini_batch_size` ({trainer.mini_batch_size}) must divide "
        f"`trainer.train_batch_size` ({trainer.train_batch_size})",
    )
    if algo.dynamic_sampling:
        need(trainer.gen_batch_size is None or trainer.gen_batch_size >= 1,
             f"config key `trainer.gen_batch_size` must be >= 1, got {trainer.gen_batch_size}")
    else:
        need(
            trainer.gen_batch_size in (None, trainer.train_batch_size),
            f"config key `trainer.gen_batch_size` ({trainer.gen_batch_size}) is only used with dynamic sampling; "
            "set it to null or to trainer.train_batch_size",
        )
    for key, value in (("data.max_prompt_len", cfg.data.max_prompt_len),
                       ("rollout.max_response_len", rollout.max_response_len)):
        need(value >= 1, f"config key `{key}` must be a positive length, got {value}")
    need(
        trainer.micro_batch_max_tokens >= cfg.data.max_prompt_len + rollout.max_response_len,
        f"config key `trainer.micro_batch_max_tokens` ({trainer.micro_batch_max_tokens}) must hold one full sequence, "
        f"data.max_prompt_len + rollout.max_response_len = {cfg.data.max_prompt_len + rollout.max_response_len}",
    )
    need(cfg.deepspeed.zero_stage == 0 or cfg.model.dtype != "float64",
         "config key `model.dtype` float64 is for exactness tests without DeepSpeed; set deepspeed.zero_stage=0")
    need(trainer.logprob_chunk_tokens is None or trainer.logprob_chunk_tokens >= 1,
         f"config key `trainer.logprob_chunk_tokens` must be null or >= 1, got {trainer.logprob_chunk_tokens}")
    need(
        0 <= cfg.reward.overlong_buffer_len < rollout.max_response_len,
        "config key `reward.overlong_buffer_len` must be in "
        f"[0, rollout.max_response_len = {rollout.max_response_len}), "
        f"got {cfg.reward.overlong_buffer_len}",
    )
    need(cfg.reward.timeout_s > 0, f"config key `reward.timeout_s` must be > 0, got {cfg.reward.timeout_s}")
    need(cfg.reward.workers is None or cfg.reward.workers >= 1,
         f"config key `reward.workers` must be null or >= 1, got {cfg.reward.workers}")
    need(rollout.temperature > 0, f"config key `rollout.temperature` must be > 0, got {rollout.temperature}")
    need(0 < rollout.top_p <= 1, f"config key `rollout.top_p` must be in (0, 1], got {rollout.top_p}")
    need(rollout.top_k == -1 or rollout.top_k >= 1,
         f"config key `rollout.top_k` must be -1 (off) or >= 1, got {rollout.top_k}")
    need(rollout.gpu_memory_utilization == "auto" or 0 < rollout.gpu_memory_utilization < 1,
         f"config key `rollout.gpu_memory_utilization` must be in (0, 1) or auto, got {rollout.gpu_memory_utilization}")
    need(trainer.collective_timeout_min > 0,
         f"config key `trainer.collective_timeout_min` must be > 0 minutes, got {trainer.collective_timeout_min}")
    warn, stop = LOGP_GAP_BANDS[cfg.model.dtype]  # `auto` (resolved here, so the saved config says what was used)
    if rollout.logp_gap_max == "auto":
        rollout.logp_gap_max = stop
    if rollout.logp_gap_warn == "auto":  # never above a stop set by hand
        rollout.logp_gap_warn = warn if rollout.logp_gap_max is None else min(warn, rollout.logp_gap_max)
    for key in ("logp_gap_max", "logp_gap_warn"):
        need(getattr(rollout, key) is None or getattr(rollout, key) > 0,
             f"config key `rollout.{key}` must be > 0, auto or null (off), got {getattr(rollout, key)}")
    need(None in (rollout.logp_gap_warn, rollout.logp_gap_max) or rollout.logp_gap_warn <= rollout.logp_gap_max,
         f"config key `rollout.logp_gap_warn` ({rollout.logp_gap_warn}) must not be above `rollout.logp_gap_max` "
         f"({rollout.logp_gap_max}), which stops the run")
    need(rollout.max_num_seqs >= 1, f"config key `rollout.max_num_seqs` must be >= 1, got {rollout.max_num_seqs}")
    fraction, positive = (lambda v: 0 < v <= 1, "in (0, 1]"), (lambda v: v > 0, "> 0")
    for key, (ok, rule) in {"clip_eps_low": fraction, "clip_eps_high": positive, "clip_c": (lambda v: v > 1, "> 1"),
                            "clip_cov_ratio": fraction, "kl_cov_ratio": fraction,
                            "kl_cov_coef": (lambda v: v >= 0, ">= 0")}.items():
        value = getattr(algo, key)  # null where the policy loss does not take it (loss.check_settings)
        need(value is None or ok(value), f"config key `algorithm.{key}` must be {rule}, got {value}")
    need(algo.clip_cov_lb is None or algo.clip_cov_lb < algo.clip_cov_ub,
         f"config key `algorithm.clip_cov_lb` ({algo.clip_cov_lb}) must be below `algorithm.clip_cov_ub` "
         f"({algo.clip_cov_ub})")
    need(algo.max_num_gen_batches >= 1,
         f"config key `algorithm.max_num_gen_batches` must be >= 1, got {algo.max_num_gen_batches}")
    need(optim.lr >= 0 and optim.weight_decay >= 0 and optim.warmup_steps >= 0,
         "config keys `optim.lr`, `optim.weight_decay`, `optim.warmup_steps` must be >= 0")
    need(optim.grad_clip > 0, f"config key `optim.grad_clip` must be > 0, got {optim.grad_clip}")
    need(all(0 <= b < 1 for b in optim.betas),
         f"config key `optim.betas` must be two numbers in [0, 1), got {list(optim.betas)}")
    need(evaluation.every >= 0, f"config key `eval.every` must be >= 0 (0 = off), got {evaluation.every}")
    need(evaluation.n >= 1 and 0 < evaluation.top_p <= 1 and evaluation.temperature > 0,
         "config keys `eval.n` >= 1, `eval.top_p` in (0, 1], `eval.temperature` > 0")
    need(evaluation.limit is None or evaluation.limit >= 1,
         f"config key `eval.limit` must be null or >= 1, got {evaluation.limit}")
    need(evaluation.max_tokens is None or evaluation.max_tokens >= 1,
         f"config key `eval.max_tokens` must be null or >= 1, got {evaluation.max_tokens}")
    need(rollout.prompts_per_call >= 0,
         f"config key `rollout.prompts_per_call` must be >= 0 (0 = all at once), got {rollout.prompts_per_call}")
    need(algo.tis_cap is None or algo.tis_cap >= 1,
         f"config key `algorithm.tis_cap` must be null (off) or >= 1, got {algo.tis_cap}")
    need(trainer.save_every >= 0 and trainer.keep_last >= 1,
         "config keys `trainer.save_every` must be >= 0 and `trainer.keep_last` >= 1")
    need("{problem}" in cfg.data.prompt_template, "config key `data.prompt_template` must contain `{problem}`")
    sample = cfg.logging.entropy_sample
    need(0 < sample <= 1 or (sample > 1 and float(sample).is_integer()), "config key `logging.entropy_sample` must be "
         f"a fraction in (0, 1] or a whole number of responses > 1, got {sample}")
    return cfg
