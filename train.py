"""DAPO + Quantile Advantage Estimation: the training loop, read top to bottom.

    python train.py --config tiny_qae.yaml                    # CPU, tiny model, ~25 s on 2 idle cores
    accelerate launch train.py --config qwen3_8b_qae.yaml     # GPUs: DeepSpeed ZeRO-3 from the config

Each step (DAPO, arXiv 2503.14476, Algorithm 1, with the QAE paper's baseline; docs/algorithm.md maps each line):
  1. rollout:   copy the policy into the sampler once, then sample G responses per prompt (rollout.py)
  2. reward:    verify final answers (+1 / -1) plus DAPO's overlong penalty (reward.shaped_rewards, one call per
                generation batch inside rollout.collect_batch)
  3. filter:    dynamic sampling keeps groups whose correctness is mixed; more generation batches
                until `train_batch_size` groups exist over all ranks. Periodic evaluation runs
                here, on the same weights; then the sampler sleeps.
  4. advantage: A = (r - b) / (std(r) + eps) per group, b = Quantile_K(r) for QAE (advantage.py)
  5. old log-probs: a no-grad pass over the responses no other pass covers (choice 10)
  6. update:    per mini-batch, micro-batches with gradient accumulation of the policy loss (clip-higher, or
                Table 2's others: loss.POLICY_LOSSES), normalised over the whole mini-batch; AdamW with clipping
  7. log (the first two steps after a start print vLLM's gap, and stop if too far: engine_gap_check), checkpoint;
     a stop asked for from outside (SIGUSR1, SIGTERM, a STOP file: infra/stop.py) ends the run here, in a checkpoint

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. Exact sparse update: responses whose loss has no gradient (A = 0, unless the loss reads A = 0 tokens) are skipped
   in the gradient passes and kept in the loss normaliser's counts (`trainer.sparse_update`).
2. Micro-batches are filled by a token budget (infra.data.token_budget_micro_batches), not a count, and each
   is one packed row: no padding is computed (infra.policy.packed_inputs).
3. Data parallel: the kept groups are pooled over ranks and dealt mini-batch by mini-batch
   (rollout.deal_groups), so each optimizer step sees the same groups whatever the number of processes.
4. Every rank makes the same number of forward passes, zero-weighted fillers added (infra.policy.plan_passes),
   and each pass calls the output layer once (infra.policy.OutputHead).
5. A step whose loss or gradient is not finite is not applied (no optimizer or scheduler step) and is counted
   in `optim/skipped` (optimizer_step).
6. No KL penalty, no entropy bonus, no reference model (paper: "exclude both").
7. The loss normaliser counts the whole mini-batch over all ranks, and each rank's loss is scaled by the world
   size (loss_weights, accumulate_gradients).
8. Generation calls are seeded by their global index, not by rank (rollout.sampling_seed).
9. One weight copy into the sampler per step (VLLMSampler.sync_weights), also used by periodic evaluation
   (`eval/trained_steps` = step - 1); the final policy is evaluated once more after the last step.
10. No redundant old-log-prob pass (`trainer.reuse_logprobs`, as TRL): the first mini-batch's own forward gives
   its old log-probs, detached (passes.reused_old_logp); the no-grad pass covers the rest (passes.needs_old_pass).
11. `trainer.adaptive_gen_batch` sizes each generation batch from dynamic sampling's running keep rate
   (rollout.KeepRate); off in the paper configs, which keep verl's fixed gen_batch_size.
12. DAPO's overlong filtering is not implemented, only its soft overlong punishment (reward.overlong_penalty).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

import advantage
import config
import loss
import rollout
from config import ConfigError
from eval import EvalError, load_eval_sets, periodic_eval
from infra import checkpoint, data, gpu_memory
from infra.data import DataError
from infra.ending import finish, own_line, stop
from infra.launch import check_hardware, check_launch, check_world, make_accelerator, report_timeouts
from infra.logger import MetricsLogger, RankStep, StepTimes, combine, logprob_sums, loss_metrics, step_metrics
from infra.model import ModelError, check_model, load_policy, load_tokenizer
from infra.optim import make_optimizer
from infra.passes import Logprobs, gradient_responses, lengths, micro_batches, needs_old_pass, reused_old_logp
from infra.policy import Policy, plan_passes, response_logprobs
from infra.selection import lowest_over_ranks, mini_batch_tokens
from infra.stop import StopRequest
from infra.vllm_sampler import WeightSyncError, engine_gap_check
from rollout import Batch, DynamicSamplingError, KeepRate, collect_batch

# ----------------------------------------------------------------------------------------------
# Steps 5-6, the update: old log-probs without gradient, then per mini-batch forward, loss, backward,
# optimizer step. Each shortcut is one named helper with one comment; its plain call gives the textbook update.
# ----------------------------------------------------------------------------------------------


@dataclass
class MiniBatch:
    """One mini-batch's gradient passes on this rank."""

    losses: dict  # loss.policy_loss's metrics, combined over the passes, and the selection's (infra.logger.combine)
    mini_tokens: float  # response tokens of the mini-batch on this rank, A = 0 ones included
    micro_batches: int  # passes with weight
    fillers: int  # zero-weighted passes (choice 4)
    seq_tokens: int  # prompt + response tokens through the passes with weight
    fresh: Logprobs  # old log-probs this forward gave (the first mini-batch's, choice 10)


@dataclass
class Update:
    """Steps 5-6 on this rank: every mini-batch's passes, the optimizer steps, and the log-probs they left."""

    minis: list[MiniBatch]
    grad_norms: list[float]
    skipped: int  # optimizer steps not applied (choice 5)
    logprobs: Logprobs  # sampling-time log-probs and entropy of every response a pass covered
    old_pass: int  # responses in the no-grad pass
    old_s: float  # seconds in it
    update_s: float  # seconds in gradient passes and optimizer steps

    def total(self, name: str):
        """A count summed over the mini-batches."""
        return sum(getattr(m, name) for m in self.minis)


def update(cfg, accelerator, model, optimizer, scheduler, batch: Batch, adv: torch.Tensor, step: int) -> Update:
    """Steps 5-6: old log-probs (no grad), then per mini-batch of whole groups: forward, loss.policy_loss and
    backward over micro-batches (accumulate_gradients), one optimizer step."""
    trainer, share = cfg.trainer, cfg.trainer.mini_batch_size // accelerator.num_processes * cfg.rollout.n
    entry, t0 = loss.POLICY_LOSSES[cfg.algorithm.policy_loss], time.perf_counter()
    todo = needs_old_pass(cfg, batch, adv, share, accelerator.num_processes,  # choice 10: saves the forward of the
                          (trainer.seed, step, accelerator.process_index), entry.reads_zero_adv)  # first mini-batch
    every = old_logprobs(cfg, accelerator, model, batch,  # 5. sampling-time log-probs, no grad; a covariance pick
                         list(range(len(adv))) if entry.priority else todo)  # reads every response's
    old = Logprobs({i: every.rows[i] for i in todo})  # the ratio's: the first mini-batch's from its own forward
    t1, minis, norms = time.perf_counter(), [], []
    model.train()
    for epoch in range(trainer.ppo_epochs):
        for start in range(0, len(adv), share):  # 6. a mini-batch of this rank's groups
            idx, key = list(range(start, start + share)), (trainer.seed, step, epoch, start // share)
            picks = pick_tokens(cfg, accelerator, adv, every, idx, key) if entry.priority else None
            mini = accumulate_gradients(cfg, accelerator, model, batch, adv, old, idx, picks)
            norms.append(optimizer_step(cfg, accelerator, model, optimizer, scheduler))
            old, minis = old.merged(mini.fresh), minis + [mini]  # the first mini-batch's own, for later ones
    return Update(minis, [n for n, _ in norms], sum(not applied for _, applied in norms), every.merged(old),
                  len(every.rows), t1 - t0, time.perf_counter() - t1)


def accumulate_gradients(cfg, accelerator, model, batch: Batch, adv, old: Logprobs, idx: list[int],
                         picks: tuple[dict, dict] | None = None) -> MiniBatch:
    """Forward, loss.policy_loss and backward over the micro-batches of one mini-batch (responses `idx`), with the
    tokens a covariance loss picked (`picks`, pick_tokens')."""
    algo, (picked, report) = cfg.algorithm, picks or ({}, {})
    entry, settings = loss.POLICY_LOSSES[algo.policy_loss], {k: getattr(algo, k) for k in loss.settings_of(
        algo.policy_loss)}  # those the loss takes
    weight_of, mini_tokens = loss_weights(cfg, accelerator, batch, idx)  # w_i over the whole mini-batch (choice 7)
    active = gradient_responses(cfg, adv, idx, entry.reads_zero_adv, picked)  # choice 1: skips the responses
    micro = micro_batches(batch, active, cfg.trainer.micro_batch_max_tokens)  # with no gradient; choice 2: no padding
    passes = plan_passes(micro, accelerator, idx[0])  # choice 4: fillers, so ZeRO-3's collectives never hang
    reports, fresh = [], Logprobs()
    for k, p in enumerate(passes):
        logp, entropy, mask = forward(cfg, model, batch, p.ids)  # (B, R)
        old_logp, got = reused_old_logp(old, p.ids, logp, entropy, lengths(batch, p.ids),  # choice 10: saves the
                                        keep=p.weight > 0)  # first mini-batch's no-grad pass
        is_weight = tis_weight(cfg, batch, p.ids, old_logp)  # the sampler's tokens reweighted to the trainer's
        selected = data.right_pad_float([picked[i].float() for i in p.ids])[0].to(logp.device) if picked else None
        policy_loss, metrics = loss.policy_loss(logp, old_logp, adv[p.ids].to(logp.device), mask,
                                                torch.stack([weight_of[i] for i in p.ids]).to(logp.device),
                                                is_weight, algo.policy_loss, selected, **settings)
        accelerator.sync_gradients = k == len(passes) - 1  # DeepSpeed: reduce and step at the last pass only
        accelerator.backward(policy_loss * p.weight * accelerator.num_processes)  # choice 7: ranks' grads averaged
        reports += [metrics] if p.weight else []  # a filler's metrics are not the batch's
        fresh = fresh.merged(got)
    accelerator.sync_gradients = True
    return MiniBatch(combine(reports + [report], loss.METRICS), mini_tokens, len(micro), len(passes) - len(micro),
                     sum(len(batch.prompt_ids[i]) + len(batch.response_ids[i]) for mb in micro for i in mb), fresh)


@torch.no_grad()
def old_logprobs(cfg, accelerator, model, batch: Batch, todo: list[int]) -> Logprobs:
    """Step 5: log-probs and entropy under the current (= sampling-time) policy of the responses `todo`,
    one no-grad pass over packed micro-batches, fillers included (choice 4)."""
    micro = micro_batches(batch, todo, cfg.trainer.micro_batch_max_tokens)
    passes = plan_passes(micro, accelerator, 0, at_least_one=False)
    rows = [Logprobs.of_pass(p.ids, lengths(batch, p.ids), *forward(cfg, model, batch, p.ids)[:2],
                             wanted=p.ids if p.weight else ()) for p in passes]  # not a filler's
    return Logprobs({i: v for r in rows for i, v in r.rows.items()}, len(passes) - len(micro))


def pick_tokens(cfg, accelerator, adv, old: Logprobs, idx: list[int], key: tuple) -> tuple[dict, dict]:
    """{response: picked (T,) bool} of the loss's covariance priority over mini-batch `idx` on every rank, from the
    old log-probs of all its tokens, A = 0 ones included (loss.py says why), and its counts for the metrics; `key`
    (seed, step, epoch, mini-batch) seeds the random keys."""
    entry, algo = loss.POLICY_LOSSES[cfg.algorithm.policy_loss], cfg.algorithm
    settings = {k: getattr(algo, k) for k in loss.settings_of(algo.policy_loss)}  # those the loss takes
    tok = mini_batch_tokens(old, adv, idx, accelerator.process_index * len(idx), key, cfg.rollout.max_response_len)
    sums = torch.tensor([tok.adv.sum(), tok.logp.sum(), len(tok.adv)], dtype=torch.float64)  # over every rank:
    a_sum, logp_sum, N = accelerator.reduce(sums.to(accelerator.device), "sum").tolist()  # the whole mini-batch's
    cov = loss.token_covariance(tok.adv, tok.logp, a_sum / N, logp_sum / N)  # (N,)
    priority = entry.priority(cov, tok.uniform, **loss.taking(entry.priority, settings))  # (N,)
    picked = lowest_over_ranks(priority, tok.ids, loss.selection_count(settings[entry.fraction], N), accelerator)
    return dict(zip(idx, picked.split(tok.lengths))), {"cov_selected": picked.sum().float(),
                                                         "cov_candidates": torch.isfinite(priority).sum().float()}


def loss_weights(cfg, accelerator, batch: Batch, idx: list[int]) -> tuple[dict, float]:
    """{response: w_i} of the mini-batch `idx` (loss.AGGREGATIONS), its counts summed over every rank (choice 7),
    zero-advantage responses included, so skipping those (choice 1) changes no gradient; and its response tokens
    on this rank."""
    G = cfg.rollout.n
    lens = torch.tensor([float(len(batch.response_ids[i])) for i in idx])  # (B,)
    group_tokens = lens.view(-1, G).sum(1).repeat_interleave(G)  # (B,) tokens of each response's group
    totals = accelerator.reduce(torch.tensor([lens.sum().item(), len(idx), len(idx) / G], device=accelerator.device),
                                "sum")  # the whole mini-batch's tokens, responses and groups, over every rank
    weights = loss.AGGREGATIONS[cfg.algorithm.loss_agg](lens, group_tokens, loss.MiniBatchCounts(*totals.tolist()))
    return dict(zip(idx, weights)), float(lens.sum())


def forward(cfg, model, batch: Batch, ids: list[int]):
    """logp, entropy, mask (B, R) of the responses `ids`, one packed row through `model`."""
    return response_logprobs(model, [batch.prompt_ids[i] for i in ids], [batch.response_ids[i] for i in ids],
                             cfg.rollout.temperature, cfg.trainer.logprob_chunk_tokens)


def tis_weight(cfg, batch: Batch, ids: list[int], old_logp: torch.Tensor) -> torch.Tensor | None:
    """Truncated importance sampling (`algorithm.tis_cap`, loss.tis_weights) from the sampler's log-probs, or None."""
    if cfg.algorithm.tis_cap is None or batch.rollout_logp is None:
        return None
    rollout_logp = data.right_pad_float([torch.tensor(batch.rollout_logp[i]) for i in ids])[0]  # (B, R)
    return loss.tis_weights(old_logp, rollout_logp.to(old_logp.device), cfg.algorithm.tis_cap)


def optimizer_step(cfg, accelerator, model, optimizer, scheduler) -> tuple[float, bool]:
    """Clip, then step unless the gradient is not finite (choice 5). Returns (grad norm, applied)."""
    grad_norm = accelerator.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
    grad_norm = float(grad_norm) if grad_norm is not None else float("nan")
    applied = math.isfinite(grad_norm)
    if applied:
        optimizer.step()
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return grad_norm, applied


# ----------------------------------------------------------------------------------------------
# Setup: every input checked before the model loads, then the models, the optimizer and the sampler
# ----------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="DAPO + QAE trainer")
    config.add_cli_args(parser)
    parser.add_argument("--resume", nargs="?", const="latest", default=None,
                        help="continue from the latest checkpoint in trainer.output_dir, or from a checkpoint path")
    return parser.parse_args(argv)


def check_inputs(cfg: config.Config, resume: str | None):
    """Every check that can fail on input, before the model loads: one line and exit code 2 on a bad one.
    Returns the model path, tokenizer, training prompts, evaluation sets and the checkpoint to resume."""
    try:
        check_hardware(cfg)
        check_launch(cfg)
        world = int(os.environ.get("WORLD_SIZE", "1"))  # set by accelerate launch / torchrun
        resume_dir = checkpoint.resume_from(resume, Path(cfg.trainer.output_dir), world, cfg.deepspeed.zero_stage == 3)
        check_world(cfg, world)
        model_path = str(resume_dir / "model") if resume_dir else cfg.model.name_or_path
        if not resume_dir:  # a checkpoint's model/ was checked with the rest of it
            check_model(model_path, "model.name_or_path")
        tokenizer = load_tokenizer(model_path, cfg.data.chat_template)
        prompts, _ = data.load_prompts(cfg.data, tokenizer)
        eval_sets = load_eval_sets(cfg, tokenizer)
        cfg.rollout.gpu_memory_utilization = gpu_memory.resolve(cfg, model_path, world)  # `auto` sized from the card
    except (ConfigError, DataError, EvalError, ModelError, OSError) as e:
        stop(str(e))  # one line on rank 0 (every process fails alike), exit code 2
    print(f"{len(prompts)} prompt rows, {prompts.num_unique} distinct ({prompts.dropped_rows} rows, "
          f"{prompts.dropped_unique} distinct, dropped as longer than {cfg.data.max_prompt_len} tokens)",
          file=sys.stderr)
    return model_path, tokenizer, prompts, eval_sets, resume_dir


def build(cfg: config.Config, model_path: str, tokenizer, accelerator):
    """The policy (HF weights), its optimizer and schedule, the rollout engine (before prepare: vLLM
    profiles memory first), and the policy prepared by accelerate (DeepSpeed's engine under ZeRO-3)."""
    trainer = cfg.trainer
    updates_per_step = trainer.ppo_epochs * (trainer.train_batch_size // trainer.mini_batch_size)
    hf_model = load_policy(cfg.model, model_path)
    optimizer, scheduler = make_optimizer(hf_model, cfg.optim, trainer.total_steps * updates_per_step)
    max_model_len = cfg.data.max_prompt_len + cfg.rollout.max_response_len
    rollout_engine = rollout.make_sampler(cfg.rollout, hf_model, tokenizer, max_model_len)
    policy_engine, optimizer = accelerator.prepare(Policy(hf_model), optimizer)  # the log-prob forward runs through it
    report_timeouts(cfg)  # every process group exists now: the timeout each holds
    return hf_model, policy_engine, optimizer, scheduler, rollout_engine


# ----------------------------------------------------------------------------------------------
# The loop
# ----------------------------------------------------------------------------------------------


def main(argv=None) -> None:
    stop_request = StopRequest()  # SIGUSR1 and SIGTERM recorded from here: start-up takes minutes at scale
    args = parse_args(argv)
    cfg = config.from_cli(args)
    model_path, tokenizer, prompts, eval_sets, resume_dir = check_inputs(cfg, args.resume)
    from accelerate.utils import gather_object, set_seed

    accelerator = make_accelerator(cfg)  # before the model loads: ZeRO-3 partitions it as it loads
    set_seed(cfg.trainer.seed)
    trainer, algo, out_dir = cfg.trainer, cfg.algorithm, Path(cfg.trainer.output_dir)
    hf_model, policy_engine, optimizer, scheduler, rollout_engine = build(cfg, model_path, tokenizer, accelerator)
    prompt_sampler = data.PromptSampler(len(prompts), trainer.seed, cfg.data.shuffle)
    keep_rate, start_step = KeepRate(), 0
    if resume_dir:
        state = checkpoint.load_state(resume_dir, accelerator, optimizer, scheduler)
        prompt_sampler.load_state_dict(state["sampler"])
        keep_rate, start_step = KeepRate(**state.get("keep_rate", {})), state["step"]
    stop_request.watch(out_dir, accelerator.is_main_process)  # a STOP file too; the handlers again, over the libraries'
    if before := stop_request.agreed(accelerator):  # asked for during start-up: nothing trained, nothing written
        if accelerator.is_main_process:
            print(f"stopped before step {start_step + 1} ({before}): nothing was trained or written; the same command "
                  "starts it again", file=sys.stderr)
        return finish(accelerator, rollout_engine, stop_request.close)
    logger = MetricsLogger(out_dir, cfg, start_step if resume_dir else None, accelerator.is_main_process)

    def save(step: int) -> Path:
        try:
            return checkpoint.save(out_dir, step, accelerator, policy_engine, tokenizer, optimizer, scheduler,
                                   {"sampler": prompt_sampler.state_dict(), "keep_rate": asdict(keep_rate)},
                                   trainer.keep_last)
        except checkpoint.CheckpointError as e:  # a full disk, a read-only folder: one line, exit code 1
            stop(f"at step {step}: {e}", code=1)

    def evaluate(trained_steps: int) -> dict:  # choice 9: on the weights the rollout engine holds now
        t0 = time.perf_counter()
        metrics = periodic_eval(cfg, accelerator, rollout_engine, tokenizer, eval_sets)
        return metrics | {"eval/trained_steps": trained_steps, "time/eval": time.perf_counter() - t0}

    for step in tqdm(range(start_step + 1, trainer.total_steps + 1), initial=start_step, total=trainer.total_steps,
                     desc="train", disable=not accelerator.is_main_process, dynamic_ncols=True):
        t_step, syncs = time.perf_counter(), rollout_engine.weight_syncs
        # 1-3. Rollout, reward, dynamic sampling: one weight copy into the rollout engine, any number of batches.
        t0 = time.perf_counter()
        sync_weights(rollout_engine, hf_model, step)
        t_sync = time.perf_counter() - t0
        try:
            got = collect_batch(cfg, accelerator, rollout_engine, tokenizer, prompts, prompt_sampler, step, keep_rate)
        except DynamicSamplingError as e:
            stop(f"at step {step}: {e}", code=1)
        batch = got.batch
        due = eval_sets and (step - 1) % cfg.eval.every == 0 and step < trainer.total_steps
        eval_metrics = evaluate(step - 1) if due else {}
        rollout_engine.sleep()  # the update gets the rollout engine's memory back

        # 4. Advantages: (P, G) -> one scalar per response.
        adv_pg = advantage.compute_advantages(
            batch.reward, K=algo.K, norm_by_std=algo.norm_adv_by_std, quantile_rule=algo.quantile_rule,
            baseline=algo.baseline, mask=None if algo.adv_mask == "none" else algo.adv_mask, acc=batch.acc,
            penalty=batch.penalty if algo.quantile_of == "verdict" else None)  # (P, G)
        adv = adv_pg.flatten()  # (P*G,)

        # 5-6. Old log-probs where no other pass provides them, then the update (mini-batches of whole groups).
        upd = update(cfg, accelerator, policy_engine, optimizer, scheduler, batch, adv, step)
        if eval_sets and step == trainer.total_steps:  # the final policy (choice 9)
            sync_weights(rollout_engine, hf_model, step)
            eval_metrics = evaluate(step)
            rollout_engine.sleep()

        # 7. Log: every rank's record, combined on all ranks; then checkpoint.
        from_sampler = trainer.reuse_logprobs and batch.policy_logp is not None  # the HF sampler's own log-probs
        mine = RankStep(got.seen, batch.reward, batch.acc, adv_pg, advantage.hard_prompts(batch.acc, algo.regime_K),
                        logprob_sums(batch, adv, upd.logprobs.rows, from_sampler, len(tokenizer)),
                        [m.losses for m in upd.minis], upd.total("micro_batches"),
                        upd.total("fillers") + upd.logprobs.fillers, upd.total("seq_tokens"),
                        upd.total("mini_tokens"), upd.old_pass,
                        StepTimes(t_sync, got.rollout_s, got.reward_s, upd.old_s, upd.update_s))
        ranks = gather_object([mine]) if accelerator.num_processes > 1 else [mine]  # one record per rank
        metrics = step_metrics(ranks, step, got.gen_batches, upd.grad_norms, upd.skipped, scheduler.get_last_lr()[0],
                               time.perf_counter() - t_step)
        metrics |= loss_metrics([x for r in ranks for x in r.losses], loss.METRICS, loss.COMMON_METRICS +  # the
                                loss.POLICY_LOSSES[algo.policy_loss].metrics,  # loss's own metrics (loss.METRICS)
                                sum(r.mini_tokens for r in ranks), len(upd.grad_norms))
        logger.log_step(metrics | {"rollout/weight_syncs": rollout_engine.weight_syncs - syncs} | eval_metrics,
                        batch, adv, tokenizer)
        # vLLM held against the trainer (infra.vllm_sampler.engine_gap_check): stop on the first steps, warn later.
        fatal, note = engine_gap_check(metrics, step, start_step, cfg.rollout, getattr(rollout_engine, "runner", ""))
        if fatal:
            stop(fatal, code=1)
        if note and accelerator.is_main_process:
            print(own_line(note), file=sys.stderr)
        due = (trainer.save_every and step % trainer.save_every == 0) or step == trainer.total_steps
        saved = save(step) if due else None
        asked = stop_request.agreed(accelerator) if step < trainer.total_steps else None  # every rank, every step
        if asked:  # a stop from outside: this step's checkpoint, then a clean exit 0
            saved = saved or save(step)
            if accelerator.is_main_process:
                tqdm.write(f"stopped after step {step} of {trainer.total_steps} ({asked}): checkpoint `{saved}` "
                           "written; continue with the same command and --resume", file=sys.stderr)
            break
    finish(accelerator, rollout_engine, stop_request.close, logger.close)  # every rank prints "rank R: done" last


def sync_weights(rollout_engine, hf_model, step: int) -> None:
    """The policy's weights (the HF model) into the sampler; a sync missing a parameter stops the run in one line."""
    try:
        rollout_engine.sync_weights(hf_model)
    except WeightSyncError as e:
        stop(f"at step {step}: {e}", code=1)


if __name__ == "__main__":
    main()
