"""Metrics: what each one means, how one step's are computed, and where they go (one JSONL row
per step, wandb when configured, sampled completions as text, a plot).

Every metric train.py logs is documented in METRICS (name -> one line), the loss's in loss.METRICS;
a test checks that no undocumented metric is logged. `step_metrics` computes them from each rank's
raw sums (a `RankStep` record), so with several processes every metric covers the whole batch.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields
from pathlib import Path

import torch

import config
from infra import diagnostics

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
    "loss/<name>": "the loss's metrics: loss.METRICS gives each its meaning, its reduction over micro-batches, "
                   "mini-batches and ranks, and its denominator",
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
                          "the logging.entropy_sample of A = 0 ones with vLLM (passes.needs_old_pass; 1.0 without "
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
# The loss's metrics: loss.METRICS gives each one's reduction and denominator; these apply it.
# ----------------------------------------------------------------------------------------------

REDUCTIONS = {"sum": lambda a, b: a + b, "min": min, "max": max}


def combine(reports: list[dict], table: dict) -> dict:
    """Several passes', mini-batches' or ranks' metrics as one, each by its reduction in `table` (loss.METRICS).

    >>> combine([{"ratio_min": 0.9, "num_tokens": 3.0}, {"ratio_min": 0.7, "num_tokens": 2.0}],
    ...         {"ratio_min": ("min", None, ""), "num_tokens": ("sum", None, None)})
    {'ratio_min': 0.7, 'num_tokens': 5.0}
    """
    out = {}
    for report in reports:
        for name, value in report.items():
            value = float(value)
            out[name] = REDUCTIONS[table[name][0]](out[name], value) if name in out else value
    return out


def loss_metrics(reports: list[dict], table: dict, names: tuple, mini_tokens: float, updates: int) -> dict:
    """The step's loss/<name> values of `names` (loss.logged_metrics): every report (of each pass, mini-batch and
    rank) combined, each divided by its denominator in `table` (loss.METRICS); without a report a sum is 0, a min or
    max 1."""
    total = combine(reports, table)
    counts = {"num_tokens": total.get("num_tokens", 0.0), "num_sequences": total.get("num_sequences", 0.0),
              "mini_tokens": mini_tokens, "updates": updates}
    value = lambda name, reduce: total.get(name, 0.0 if reduce == "sum" else 1.0)  # noqa: E731
    return {f"loss/{name}": value(name, reduce) / (max(counts[per], 1) if per else 1)
            for name in names for reduce, per, _ in [table[name]]}


# ----------------------------------------------------------------------------------------------
# One step's metrics, from every rank's raw sums (train.py gathers them).
# ----------------------------------------------------------------------------------------------


@dataclass
class StepTimes:
    """Seconds per phase of a step on one rank."""

    sync: float  # copying the policy's weights into the sampler
    rollout: float  # generating responses
    reward: float  # verifying answers
    old_logp: float  # the no-grad pass
    update: float  # gradient passes and optimizer steps


@dataclass
class RankStep:
    """One rank's share of a step, gathered over ranks for step_metrics (train.py step 7)."""

    seen: object  # rollout.Seen: every response this rank generated (reward, acc, lengths, truncated, counts)
    reward: torch.Tensor  # (P, G) this rank's share of the training batch
    acc: torch.Tensor  # (P, G)
    adv: torch.Tensor  # (P, G)
    hard: torch.Tensor  # (P,) bool: advantage.hard_prompts at algorithm.regime_K
    logp: dict  # logprob_sums: entropy, entropy by advantage sign, covariance sums, sampler gap
    losses: list[dict]  # loss.policy_loss's metrics per mini-batch, for loss_metrics (train.py step 7)
    micro_batches: int  # gradient passes with weight
    fillers: int  # zero-weighted passes, no-grad pass and update
    seq_tokens: int  # prompt + response tokens through gradient passes
    mini_tokens: float  # response tokens of this rank's mini-batches (the loss's "mini_tokens")
    old_pass: int  # responses in the no-grad pass
    times: StepTimes


def logprob_sums(batch, adv: torch.Tensor, known: dict, from_sampler: bool, n_allowed: int | None = None) -> dict:
    """This rank's sums for the metrics: entropy, entropy by advantage sign, the covariance
    diagnostic, and |logp_trainer - logp_rollout| (the cheap alarm for stale sampler weights) with
    the count of sampled ids at or above `n_allowed` (len(tokenizer): the padded vocabulary).

    `known`: {response: (logp, entropy)} from the passes: every A != 0 response, and the sample of
    A = 0 ones (passes.entropy_sample); `from_sampler`: use the HF sampler's values, for every response.
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


def step_metrics(ranks: list[RankStep], step: int, gen_batches: int, norms: list[float], skipped: int, lr: float,
                 step_time: float) -> dict:
    """The logged metrics (METRICS, but the loss's: loss_metrics) from each rank's record; the same on every rank."""
    seen = [r.seen for r in ranks]
    rewards, accs, lengths, truncated = ([x for s in seen for x in getattr(s, k)]
                                         for k in ("reward", "acc", "lengths", "truncated"))
    reward, acc, adv, hard = (torch.cat([getattr(r, k) for r in ranks]) for k in ("reward", "acc", "adv", "hard"))
    lp = {k: sum(r.logp[k] for r in ranks) for k in ("ent_sum", "tokens", "ent_by_sign", "cov")}
    times = {f.name: max(getattr(r.times, f.name) for r in ranks) for f in fields(StepTimes)}  # the slowest paces
    lens = torch.tensor(lengths, dtype=torch.float32)
    metrics = {
        "step": step,
        "reward/mean": sum(rewards) / len(rewards),
        "reward/acc": sum(accs) / len(accs),
        "reward/timeouts": sum(s.timeouts for s in seen),
        "response/len_mean": lens.mean().item(),
        "response/len_max": lens.max().item(),
        "response/truncated_frac": sum(truncated) / len(truncated),
        "policy/entropy": lp["ent_sum"] / max(lp["tokens"], 1),
        "policy/entropy_coverage": sum(r.logp["covered"] for r in ranks) / max(lp["tokens"], 1),
        **{f"policy/entropy_{k}": v for k, v in diagnostics.entropy_by_sign(lp["ent_by_sign"]).items()},
        **{f"adv/{k}": v for k, v in diagnostics.advantage_stats(adv, reward, acc, hard).items()},
        "sampling/gen_batches": gen_batches,
        "sampling/kept_frac": sum(s.kept for s in seen) / sum(s.groups for s in seen),
        "sampling/gen_prompts": sum(seen[0].sizes),
        **{f"entropy_cov/{k}": v for k, v in diagnostics.entropy_covariance_from_sums(lp["cov"]).items()},
        "optim/grad_norm": sum(norms) / len(norms),
        "optim/lr": lr,
        "optim/skipped": skipped,
        "optim/updates": len(norms) - skipped,
        "perf/micro_batches": sum(r.micro_batches for r in ranks),
        "perf/filler_passes": sum(r.fillers for r in ranks),
        "perf/old_pass_frac": sum(r.old_pass for r in ranks) / reward.numel(),
        "perf/gen_tokens_per_s": lens.sum().item() / max(times["rollout"], 1e-9),
        "perf/train_tokens_per_s": sum(r.seq_tokens for r in ranks) / max(times["update"], 1e-9),
        **{f"time/{k}": v for k, v in times.items()},
        "time/step": step_time,
        "perf/peak_mem_gb": peak_memory_gb(),
    }
    if "gap_max" in ranks[0].logp:
        metrics["rollout/logp_diff_mean"] = sum(r.logp["gap_sum"] for r in ranks) / max(lp["tokens"], 1)
        metrics["rollout/logp_diff_max"] = max(r.logp["gap_max"] for r in ranks)
        metrics["rollout/padded_ids"] = sum(r.logp["padded"] for r in ranks)
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
        shown = range(min(self.num_completions, len(batch.response_ids)))  # only these are decoded
        self.log_completions(step, [{"prompt": tokenizer.decode(batch.prompt_ids[i]),
                                     "response": tokenizer.decode(batch.response_ids[i], skip_special_tokens=True),
                                     "answer": batch.answers[i], "reward": batch.reward.flatten()[i].item(),
                                     "adv": adv[i].item()} for i in shown])
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
