"""Metrics: what each one means, how one step's are computed, and where they go (one JSONL row
per step, wandb when configured, sampled completions as text, a plot).

Every metric train.py logs is documented in METRICS (name -> one line); a test checks that no
undocumented metric is logged. `step_metrics` computes them from each rank's raw sums, so with
several processes every metric covers the whole batch.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import torch

import config
from infra import diagnostics

# What the loss reports (loss.policy_loss's metrics, and "policy", the loss itself): summed over
# micro-batches and ranks by train.accumulate_gradients, then divided by the named sum ("num_tokens":
# tokens in gradient passes; "mini_tokens": every response token of the mini-batches; "updates":
# optimizer steps), or kept as the smallest / largest value. A new loss metric is one entry here.
LOSS_METRICS = {
    "loss/policy": ("updates", "clip-higher policy loss, mean over the step's optimizer steps"),
    "loss/clip_frac_high": ("mini_tokens", "fraction of mini-batch tokens with A > 0 and ratio > 1 + eps_high "
                                           "(gradient clipped)"),
    "loss/clip_frac_low": ("mini_tokens", "fraction of mini-batch tokens with A < 0 and ratio < 1 - eps_low"),
    "loss/clip_frac_dual": ("mini_tokens", "fraction of mini-batch tokens with A < 0 and ratio > clip_c (dual clip)"),
    "loss/ratio_mean": ("num_tokens", "mean importance ratio over tokens in gradient passes"),
    "loss/ratio_min": ("min", "smallest importance ratio"),
    "loss/ratio_max": ("max", "largest importance ratio"),
    "loss/approx_kl": ("num_tokens", "mean (ratio - 1) - log ratio over tokens in gradient passes (k3 estimate of KL)"),
}

METRICS = {
    "step": "training step (rollout batches done)",
    "reward/mean": "mean shaped reward (score + overlong penalty) over all responses generated this step",
    "reward/acc": "fraction of all generated responses the verifier judged correct",
    "reward/timeouts": "responses whose verification overran reward.timeout_s (scored incorrect)",
    "response/len_mean": "mean response length in tokens, all generated responses",
    "response/len_max": "longest response in tokens",
    "response/truncated_frac": "fraction of responses cut at rollout.max_response_len without EOS",
    "policy/entropy": "mean per-token entropy of the policy over the training batch's response tokens; A = 0 tokens "
                      "from the logging.entropy_sample, weighted up to all A = 0 tokens (exact when "
                      "policy/entropy_coverage is 1)",
    "policy/entropy_pos": "mean per-token entropy over every response with A > 0 (paper Figs. 4a, 5b)",
    "policy/entropy_neg": "mean per-token entropy over every response with A < 0",
    "policy/entropy_zero": "mean per-token entropy over the sampled responses with A = 0 (all of them with the HF "
                           "sampler, or logging.entropy_sample 1)",
    "policy/entropy_coverage": "fraction of the batch's response tokens with a forward for the entropy and covariance "
                               "metrics: every A != 0 token and the logging.entropy_sample of A = 0 ones (vLLM); "
                               "1 with the HF sampler",
    "adv/zero_frac": "fraction of training responses with advantage exactly 0 (paper: ~80% at K = 0.4)",
    "adv/hard_frac": "fraction of training prompts with success rate p <= 1 - regime_K "
                     "(quantile baseline = low reward)",
    "adv/easy_frac": "fraction of training prompts with p > 1 - regime_K (quantile baseline = high reward)",
    "adv/zero_var_frac": "fraction of training groups whose rewards are all equal",
    "adv/gate_violations": "fraction of training responses on the wrong side of QAE's gate: wrong with A > 0 or "
                           "correct with A < 0 (0 under algorithm.quantile_of: verdict but for a correct answer's own "
                           "overlong penalty)",
    "adv/mean": "mean advantage over training responses",
    "adv/min": "smallest advantage",
    "adv/max": "largest advantage",
    "sampling/gen_batches": "generation batches dynamic sampling needed to fill the training batch",
    "sampling/kept_frac": "fraction of generated prompt groups kept by dynamic sampling",
    "sampling/gen_prompts": "prompts generated this step, all ranks (trainer.adaptive_gen_batch sizes the batches "
                            "from the keep rate)",
    "entropy_cov/total": "Cov over response tokens of (logp, A), Cui et al. 2025's token-level statistic: a "
                         "policy-gradient step moves entropy by about -lr times it (not the paper's response-level "
                         "Eq. 18); A = 0 tokens weighted as in policy/entropy",
    "entropy_cov/pos": "part of entropy_cov/total from positive-advantage tokens (lowers entropy when > 0)",
    "entropy_cov/neg": "part of entropy_cov/total from negative-advantage tokens",
    **{name: doc for name, (_, doc) in LOSS_METRICS.items()},
    "optim/grad_norm": "global gradient norm before clipping, mean over the step's optimizer steps",
    "optim/lr": "learning rate after the step",
    "optim/skipped": "optimizer steps skipped because the loss or gradient was not finite",
    "optim/updates": "optimizer steps applied",
    "perf/peak_mem_gb": "peak CUDA memory allocated by rank 0, or its peak resident memory on a CPU, GB",
    "rollout/logp_diff_mean": "mean over response tokens of |logp_trainer - logp_rollout| (vLLM only; stale weights "
                              "show here), A = 0 tokens weighted as in policy/entropy",
    "rollout/logp_diff_max": "largest |logp_trainer - logp_rollout| over the response tokens policy/entropy_coverage "
                             "counts (vLLM only)",
    "rollout/padded_ids": "sampled tokens of the training batch with an id at or above len(tokenizer), the padded "
                          "vocabulary vLLM masks (vLLM only; 0 unless the mask failed)",
    "rollout/weight_syncs": "copies of the policy's weights into the sampler this step (vLLM: 1, +1 for the final "
                            "evaluation; hf: 0)",
    "perf/micro_batches": "forward-backward passes in the update (after skipping zero-advantage responses), all ranks",
    "perf/filler_passes": "zero-weighted passes (old log-probs and update, all ranks) run so every rank makes as "
                          "many as the busiest (ZeRO-3's collectives)",
    "perf/old_pass_frac": "fraction of the batch's responses in the no-grad pass: later mini-batches' A != 0 ones and "
                          "the logging.entropy_sample of A = 0 ones with vLLM (train.needs_old_pass; 1.0 without "
                          "reuse)",
    "perf/gen_tokens_per_s": "response tokens generated per second of rollout",
    "perf/train_tokens_per_s": "tokens (prompt + response) through gradient passes per second of update",
    "time/sync": "seconds copying the policy's weights into the sampler (vLLM; ZeRO-3 gathers a layer at a time)",
    "time/rollout": "seconds generating responses",
    "time/reward": "seconds verifying answers",
    "time/old_logp": "seconds in the no-grad pass (old log-probs, the entropy sample)",
    "time/update": "seconds in gradient passes and optimizer steps",
    "time/step": "seconds for the whole step",
    "time/eval": "seconds in periodic evaluation (steps where it ran)",
    "eval/trained_steps": "training steps behind the evaluated policy: step - 1 (evaluated on the weights that "
                          "sample the step), or the last step",
    "eval/<benchmark>/pass@<k>": "periodic evaluation (eval.every): unbiased pass@k over eval.n samples per problem",
    "eval/<benchmark>/len_mean": "periodic evaluation: mean response length in tokens",
}


def documented(name: str) -> bool:
    """Whether `name` is in METRICS, directly or as an instance of a `<placeholder>` pattern.

    >>> documented("eval/aime24/pass@16"), documented("eval/aime24/pass@16/x")
    (True, False)
    """
    import re

    patterns = [re.sub(r"<\w+>", "[^/]+", re.escape(m)) for m in METRICS if "<" in m]  # "<" and ">" are not escaped
    return name in METRICS or any(re.fullmatch(p, name) for p in patterns)


# ----------------------------------------------------------------------------------------------
# One step's metrics, from every rank's raw sums (train.py gathers them).
# ----------------------------------------------------------------------------------------------


def entropy_sample(candidates: list[int], sample: float, world: int, key: tuple) -> list[int]:
    """The responses out of `candidates` (this rank's, outside every gradient pass) that get a
    forward for the entropy metrics (`logging.entropy_sample`): a fraction `sample` <= 1 of them,
    rounded up, or a count `sample` > 1 per step, split over the `world` ranks; drawn uniformly,
    seeded by `key` (seed, step, rank). All of them, in order, when the sample covers them.

    >>> entropy_sample([3, 5, 8, 9], 1.0, 1, (0, 1, 0)), len(entropy_sample([3, 5, 8, 9], 0.3, 1, (0, 1, 0)))
    ([3, 5, 8, 9], 2)
    >>> len(entropy_sample(list(range(100)), 8, 2, (0, 1, 0)))
    4
    """
    k = math.ceil(sample * len(candidates)) if sample <= 1 else math.ceil(sample / world)
    if k >= len(candidates):
        return list(candidates)
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    g = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
    return sorted(candidates[j] for j in torch.randperm(len(candidates), generator=g)[:k].tolist())


def logprob_sums(batch, adv: torch.Tensor, known: dict, from_sampler: bool, n_allowed: int | None = None) -> dict:
    """This rank's sums for the metrics: entropy, entropy by advantage sign, the covariance
    diagnostic, and |logp_trainer - logp_rollout| (the cheap alarm for stale sampler weights) with
    the count of sampled ids at or above `n_allowed` (len(tokenizer): the padded vocabulary).

    `known`: {response: (logp, entropy)} from the passes: every A != 0 response, and the sample of
    A = 0 ones (entropy_sample); `from_sampler`: use the HF sampler's values, for every response.
    The sums are linear in the tokens, so the sampled A = 0 tokens count `w` times, w = (A = 0
    tokens of the batch) / (sampled ones): an estimate of the whole batch's sums, exact for w = 1.
    """
    if from_sampler:
        known = {i: (torch.tensor(lp), torch.tensor(ent)) for i, (lp, ent) in enumerate(zip(batch.policy_logp,
                                                                                             batch.policy_entropy))}
    zero = [i for i in range(len(adv)) if adv[i] == 0]
    covered = sum(len(known[i][0]) for i in zero if i in known)
    w = sum(len(batch.response_ids[i]) for i in zero) / covered if covered else 0.0

    def sums(ids):  # the metrics' sums over the tokens of responses `ids`
        if not ids:
            zeros = torch.zeros(3, 6, dtype=torch.float64)
            return {"ent": zeros[:, :2], "cov": zeros[:, 2:], "gap": 0.0, "gap_max": 0.0, "covered": 0}
        logp, entropy = (torch.cat([known[i][j] for i in ids]).float() for j in (0, 1))  # (N,), (N,)
        tok_adv = torch.cat([adv[i].expand(len(known[i][0])) for i in ids])  # (N,)
        out = {"ent": diagnostics.entropy_sums_by_sign(entropy, tok_adv),
               "cov": diagnostics.covariance_sums(logp, tok_adv), "covered": len(logp)}
        if batch.rollout_logp is not None:
            diff = (logp - torch.tensor([x for i in ids for x in batch.rollout_logp[i]])).abs()  # (N,)
            out.update(gap=diff.sum().item(), gap_max=diff.max().item())
        return out

    a, z = sums(sorted(i for i in known if adv[i] != 0)), sums(sorted(i for i in known if adv[i] == 0))
    ent_by_sign = a["ent"] + w * z["ent"]  # (3, 2)
    out = {"ent_sum": ent_by_sign[:, 0].sum().item(), "tokens": ent_by_sign[:, 1].sum().item(),
           "ent_by_sign": ent_by_sign, "cov": a["cov"] + w * z["cov"], "covered": a["covered"] + z["covered"]}
    if batch.rollout_logp is not None:
        out.update(gap_sum=a["gap"] + w * z["gap"], gap_max=max(a["gap_max"], z["gap_max"]),
                   padded=sum(t >= n_allowed for r in batch.response_ids for t in r) if n_allowed else 0)
    return out


def loss_metrics(upd: list[dict], updates: int) -> dict:
    """LOSS_METRICS from every rank's and mini-batch's sums (train.accumulate_gradients)."""
    total = lambda key: sum(u.get(key, 0.0) for u in upd)  # noqa: E731
    out = {}
    for name, (per, _) in LOSS_METRICS.items():
        values = [u[name[5:]] for u in upd if name[5:] in u]  # name without "loss/"
        if per in ("min", "max"):
            out[name] = (min if per == "min" else max)(values, default=1.0)
        else:
            out[name] = sum(values) / max(updates if per == "updates" else total(per), 1)
    return out


def step_metrics(ranks: list[dict], step: int, gen_batches: int, norms: list[float], skipped: int, lr: float,
                 regime_K: float, step_time: float) -> dict:
    """The logged metrics (METRICS) from each rank's raw sums; the same on every rank.

    Each entry of `ranks` is one rank's dict (train.py step 7): "seen" (every generated
    response's reward, acc, len, truncated, plus timeouts / groups / kept counts), "reward",
    "acc", "adv" (its (P, G) training share), "logp" (old_logprobs' sums: entropy, entropy by
    advantage sign, covariance sums, sampler gap), "upd" (one accumulate_gradients dict per
    mini-batch) and "times" (seconds per phase).
    """
    seen = {k: [x for r in ranks for x in r["seen"][k]] for k in ("reward", "acc", "len", "truncated")}
    total = lambda key: sum(r["seen"][key] for r in ranks)  # noqa: E731
    reward, acc, adv = (torch.cat([r[k] for r in ranks]) for k in ("reward", "acc", "adv"))  # (P, G) over all ranks
    upd = [u for r in ranks for u in r["upd"]]  # per rank and mini-batch
    lp = {k: sum(r["logp"][k] for r in ranks) for k in ("ent_sum", "tokens", "ent_by_sign", "cov")}
    times = {k: max(r["times"][k] for r in ranks) for k in ranks[0]["times"]}  # the slowest rank paces the step
    u = {k: sum(x[k] for x in upd) for k in ("micro_batches", "fillers", "seq_tokens")}
    lens = torch.tensor(seen["len"], dtype=torch.float32)
    metrics = {
        "step": step,
        "reward/mean": sum(seen["reward"]) / len(seen["reward"]),
        "reward/acc": sum(seen["acc"]) / len(seen["acc"]),
        "reward/timeouts": total("timeouts"),
        "response/len_mean": lens.mean().item(),
        "response/len_max": lens.max().item(),
        "response/truncated_frac": sum(seen["truncated"]) / len(seen["truncated"]),
        "policy/entropy": lp["ent_sum"] / max(lp["tokens"], 1),
        "policy/entropy_coverage": sum(r["logp"]["covered"] for r in ranks) / max(lp["tokens"], 1),
        **{f"policy/entropy_{k}": v for k, v in diagnostics.entropy_by_sign(lp["ent_by_sign"]).items()},
        **{f"adv/{k}": v for k, v in diagnostics.advantage_stats(adv, reward, acc, regime_K).items()},
        "sampling/gen_batches": gen_batches,
        "sampling/kept_frac": total("kept") / total("groups"),
        "sampling/gen_prompts": sum(ranks[0]["seen"]["sizes"]),
        **{f"entropy_cov/{k}": v for k, v in diagnostics.entropy_covariance_from_sums(lp["cov"]).items()},
        **loss_metrics(upd, len(norms)),
        "optim/grad_norm": sum(norms) / len(norms),
        "optim/lr": lr,
        "optim/skipped": skipped,
        "optim/updates": len(norms) - skipped,
        "perf/micro_batches": u["micro_batches"],
        "perf/filler_passes": u["fillers"] + sum(r["logp"]["fillers"] for r in ranks),
        "perf/old_pass_frac": sum(r["logp"]["old_pass"] for r in ranks) / reward.numel(),
        "perf/gen_tokens_per_s": lens.sum().item() / max(times["rollout"], 1e-9),
        "perf/train_tokens_per_s": u["seq_tokens"] / max(times["update"], 1e-9),
        **{f"time/{k}": v for k, v in times.items()},
        "time/step": step_time,
        "perf/peak_mem_gb": peak_memory_gb(),
    }
    if "gap_max" in ranks[0]["logp"]:
        metrics["rollout/logp_diff_mean"] = sum(r["logp"]["gap_sum"] for r in ranks) / max(lp["tokens"], 1)
        metrics["rollout/logp_diff_max"] = max(r["logp"]["gap_max"] for r in ranks)
        metrics["rollout/padded_ids"] = sum(r["logp"]["padded"] for r in ranks)
    return metrics


def peak_memory_gb() -> float:
    """Peak CUDA memory allocated by this process, or its peak resident memory on a CPU, in GB."""
    if torch.cuda.is_available():
        return torch.cuda.max_memory_allocated() / 1e9
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # Linux reports KiB


class MetricsLogger:
    """Writes `config.yaml` (the resolved config), `metrics.jsonl` and `completions.jsonl` under the
    run directory, and wandb when `logging.wandb` is on (main process only)."""

    def __init__(self, output_dir, cfg: config.Config, resume_step: int | None, enabled: bool):
        self.dir, self.enabled, self.run = Path(output_dir), enabled, None
        self.path = self.dir / "metrics.jsonl"
        self.num_completions, self.total_steps = cfg.logging.num_completions, cfg.trainer.total_steps
        if not enabled:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        (self.dir / "config.yaml").write_text(config.dump(cfg))
        if resume_step is not None:
            keep_rows_up_to(self.path, resume_step)  # drop steps logged after the checkpoint
            keep_rows_up_to(self.dir / "completions.jsonl", resume_step)
        if cfg.logging.wandb:
            import wandb

            mode = "online" if os.environ.get("WANDB_API_KEY") else "offline"  # never prompt for a key
            self.run = wandb.init(project=cfg.logging.project, name=cfg.logging.run_name or self.dir.name,
                                  config=config.as_dict(cfg), dir=str(self.dir), mode=mode, resume="allow")

    def log_step(self, metrics: dict, batch, adv: torch.Tensor, tokenizer) -> None:
        """One training step: its metrics, its first `logging.num_completions` samples, a progress line."""
        self.log(metrics)
        step = metrics["step"]
        self.log_completions(step, [{"prompt": tokenizer.decode(batch.prompt_ids[i]), "response": batch.texts[i],
                                     "answer": batch.answers[i], "reward": batch.reward.flatten()[i].item(),
                                     "adv": adv[i].item()}
                                    for i in range(min(self.num_completions, len(batch.texts)))])
        if self.enabled:
            from tqdm import tqdm

            tqdm.write(f"step {step}/{self.total_steps} | reward {metrics['reward/mean']:+.3f} "
                       f"acc {metrics['reward/acc']:.3f} | entropy {metrics['policy/entropy']:.3f} | "
                       f"zero-adv {metrics['adv/zero_frac']:.2f} | len {metrics['response/len_mean']:.1f} | "
                       f"gen batches {metrics['sampling/gen_batches']} | {metrics['time/step']:.1f}s")

    def log(self, metrics: dict) -> None:
        if not self.enabled:
            return
        with open(self.path, "a") as f:
            f.write(json.dumps(metrics) + "\n")
        if self.run is not None:
            self.run.log(metrics, step=metrics["step"])

    def log_completions(self, step: int, samples: list[dict]) -> None:
        if not self.enabled:
            return
        with open(self.dir / "completions.jsonl", "a") as f:
            for s in samples:
                f.write(json.dumps({"step": step, **s}) + "\n")

    def close(self) -> None:
        if self.enabled and self.path.exists():
            from infra.plots import plot_metrics  # held-out pass@k first, then the smoothed per-step metrics

            plot_metrics({self.dir.name: read_metrics(self.path)}, self.dir / "metrics.png")
        if self.run is not None:
            self.run.finish()


def keep_rows_up_to(path: Path, step: int) -> None:
    """Rewrite a JSONL file keeping rows with row["step"] <= step (atomically)."""
    if not path.exists():
        return
    rows = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(r + "\n" for r in rows))
    os.replace(tmp, path)


def read_metrics(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
