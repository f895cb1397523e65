"""Step time of this trainer against Hugging Face TRL's GRPOTrainer on the same tiny task, in one run.

    pip install -r requirements-bench.txt          # trl==1.16.0 (see that file)
    python bench/bench_vs_trl.py [--runs 5] [--steps 16] [--warmup 2] [--threads 2]   # about 4 minutes on 2 cores

What is compared: wall seconds per training step, one step = generate -> score -> one optimizer
step, on the same model, prompts, reward, batch shape and hyperparameters:

    model     tiny/model (0.63M-parameter Qwen3), fp32, on the CPU
    prompts   each row's `problem` as the single user message, chat template applied with the
              generation prompt (data.prompt_template "{problem}"); rows over 64 prompt tokens
              dropped in both (none are). The TRL worker checks that its prompt token ids are
              this trainer's (data.tokenize_prompt) before it starts.
    reward    reward.score_batch(texts, answers)[i].score: +1 correct / -1 wrong. This trainer
              runs with reward.overlong_buffer_len=0 (tiny_qae.yaml adds DAPO's overlong shaping).
    batch     8 prompts x 8 responses = 64 per step, one optimizer step per generation batch
              (TRL: per_device_train_batch_size 64, num_generations 8, steps_per_generation 1,
              num_iterations 1, gradient_accumulation_steps 1)
    sampler   transformers `generate` on the training model (TRL use_vllm=False): temperature 1.0,
              top_p 1.0, no top-k, at most 24 new tokens, token ids past the tokenizer never
              sampled (this trainer's HFSampler.suppress; TRL via generation_kwargs.suppress_tokens)
    loss      clip-higher, eps_low 0.2 / eps_high 0.28, token-level mean over the optimizer
              step's tokens (TRL loss_type "dapo": with one process and one accumulation step
              its normaliser is the batch's completion-token count, as in this trainer's
              loss_agg token-mean); no KL, no reference model (TRL beta 0), no entropy bonus
    optimizer AdamW (torch.optim.AdamW), lr 1e-4 constant, betas (0.9, 0.999), weight decay 0,
              gradient clipping at norm 1.0
    threads   both in a subprocess with the same OMP_NUM_THREADS and torch.set_num_threads

Old log-probs: neither side runs a separate no-grad pass. TRL 1.16.0 (grpo_trainer.py,
`_generate_and_score_completions`) computes `old_per_token_logps` only when
`gradient_accumulation_steps % (steps_per_generation * num_iterations) != 0` or vLLM importance
sampling is on; otherwise it is None and `_compute_loss` uses `per_token_logps.detach()` of the
training forward. The TRL worker asserts at every step that no old log-probs were computed. This
trainer does the same with `trainer.reuse_logprobs` (infra.passes.needs_old_pass): the first
mini-batch's old log-probs are its own forward's, detached.

Timing. This trainer: `time/step` and its phases from <output_dir>/metrics.jsonl (the loop's own
timers; checkpoint writing after the last step is not in a step). TRL: a TrainerCallback's
on_step_begin -> on_step_end (covers `_prepare_inputs` = generation and scoring, forward,
backward, clipping, AdamW and the scheduler; not the DataLoader fetch of 8 prompt dicts, not the
logging after on_step_end), and its phases by wrapping `_generate`, `_calculate_rewards` and
`_generate_and_score_completions` on the instance. The first --warmup steps of every run are
dropped. Runs alternate TRL, this (8x8), this (dynamic sampling), TRL, ... so a change in the
machine's load hits both sides alike. Ratios are medians over all timed steps of all runs.

Caveats, numbered (differences that remain):
1. The algorithms differ where the project differs from GRPO: this trainer's advantage is QAE's
   (quantile baseline, K = 0.4) and it skips responses with advantage exactly 0 in its gradient
   passes (the exact sparse update, ~80% of them); TRL's is GRPO's group mean/std and its training
   forward and backward cover all 64 responses. That is part of what is timed.
2. This trainer's sampler prefills each prompt once and repeats its KV cache G times (infra.hf_sampler.shared_prefill)
   and reads the policy's log-probs from its logits (policy_logp); TRL prefills all
   64 rows. Also part of what is timed.
3. The prompts of a step differ: each side shuffles the same rows with its own sampler (seed 1
   in both), so the responses, their lengths and the rewards differ run to run. The median
   response lengths are printed next to the times.
4. Per-step bookkeeping differs: this trainer's step includes its metrics (entropy by advantage
   sign, covariance); TRL's window excludes its logging but includes its metric gathering.
5. The dynamic-sampling line keeps the 8 x 8 training batch and one optimizer step, with dynamic
   sampling on as tiny_qae.yaml runs it (generation batches of up to 16 prompts, sized from the
   running keep rate, `trainer.adaptive_gen_batch`, rollout.KeepRate) until 8 groups with mixed
   correctness are kept: strictly more generation per step than TRL, which has no dynamic
   sampling and trains on whatever 8 groups it drew (all-correct and all-wrong ones included).
6. On a busy machine the absolute seconds are inflated and noisy; the interleaving spreads the
   load over both sides, but the ratio still carries that noise.

Output: one row per run with its medians, the phase split of both, the line
`step_time_ratio_vs_trl_dynamic_sampling=<this/TRL>` (note 5), and last the line
`step_time_ratio_vs_trl=<this/TRL>` (8x8 setting, median step time of this trainer / TRL's).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL, TRAIN_FILE = ROOT / "tiny" / "model", ROOT / "tiny" / "train.jsonl"
P, G, MAX_RESPONSE_LEN, MAX_PROMPT_LEN = 8, 8, 24, 64  # prompts per step, responses per prompt; tiny_qae.yaml's lengths

# This trainer's two settings (overrides on configs/tiny_qae.yaml).
COMMON = ["eval.every=0", "trainer.save_every=0", "logging.num_completions=0", "reward.overlong_buffer_len=0"]
THIS_8X8 = ["trainer.train_batch_size=8", "trainer.mini_batch_size=8", f"rollout.n={G}",
            "algorithm.dynamic_sampling=false", "trainer.gen_batch_size=null", *COMMON]
THIS_DS = ["trainer.train_batch_size=8", "trainer.gen_batch_size=16", "trainer.mini_batch_size=8", f"rollout.n={G}",
           "algorithm.dynamic_sampling=true", "trainer.adaptive_gen_batch=true", *COMMON]
THIS_PHASES = ("sync", "rollout", "reward", "old_logp", "update")
THREADS_MARK = "bench_vs_trl worker torch threads="  # each worker prints it; the driver reads it back


# ----------------------------------------------------------------------------------------------
# Workers: each runs in its own subprocess (`--worker this|trl`)
# ----------------------------------------------------------------------------------------------


def this_worker(threads: int, argv: list[str]) -> None:
    """train.py's main() with the same torch thread count as the TRL worker."""
    import torch

    torch.set_num_threads(threads)
    print(f"{THREADS_MARK}{torch.get_num_threads()}", flush=True)
    sys.path.insert(0, str(ROOT))
    import train

    train.main(argv)


def trl_worker(threads: int, steps: int, out_dir: Path) -> None:
    """TRL's GRPOTrainer on the same model, prompts, reward and settings; one JSON row per step to
    <out_dir>/steps.jsonl."""
    import torch

    torch.set_num_threads(threads)
    print(f"{THREADS_MARK}{torch.get_num_threads()}", flush=True)
    sys.path.insert(0, str(ROOT))
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import reward
    from infra import data

    tokenizer = AutoTokenizer.from_pretrained(str(MODEL))
    rows = [json.loads(line) for line in TRAIN_FILE.read_text().splitlines() if line.strip()]
    messages = lambda row: [{"role": "user", "content": row["problem"]}]  # noqa: E731  prompt_template "{problem}"
    rows = [r for r in rows if len(data.tokenize_prompt(tokenizer, messages(r), True)) <= MAX_PROMPT_LEN]
    dataset = Dataset.from_list([{"prompt": messages(r), "answer": str(r["answer"])} for r in rows])

    def correctness(completions, answer, **kwargs) -> list[float]:
        """This project's verifier: +1 correct / -1 wrong."""
        return [r.score for r in reward.score_batch([c[-1]["content"] for c in completions], answer)]

    model = AutoModelForCausalLM.from_pretrained(str(MODEL), dtype=torch.float32)
    args = GRPOConfig(
        output_dir=str(out_dir), max_steps=steps, seed=1, use_cpu=True, bf16=False, fp16=False,
        per_device_train_batch_size=P * G, num_generations=G, steps_per_generation=1, num_iterations=1,
        gradient_accumulation_steps=1, max_completion_length=MAX_RESPONSE_LEN,
        temperature=1.0, top_p=1.0, top_k=0, use_vllm=False,
        # as this trainer's HFSampler.suppress
        generation_kwargs={"suppress_tokens": list(range(len(tokenizer), model.config.vocab_size))},
        beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="dapo", scale_rewards="group",
        mask_truncated_completions=False,
        optim="adamw_torch", learning_rate=1e-4, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8, max_grad_norm=1.0, gradient_checkpointing=False,
        logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True, log_completions=False,
        dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=correctness, args=args, train_dataset=dataset,
                          processing_class=tokenizer)
    theirs = trainer._tokenize_prompts([dataset[0]["prompt"]])[0][0]
    ours = data.tokenize_prompt(tokenizer, dataset[0]["prompt"], True)
    if list(theirs) != list(ours):
        raise SystemExit(f"TRL's prompt ids {list(theirs)} differ from this trainer's {ours}")

    phases = {"rollout": 0.0, "reward": 0.0, "gen_and_score": 0.0}

    def timed(name, fn, check=None):
        def wrapper(*a, **kw):
            t0 = time.perf_counter()
            out = fn(*a, **kw)
            phases[name] += time.perf_counter() - t0
            if check:
                check(out)
            return out
        return wrapper

    def no_old_pass(out):  # the reuse this benchmark reports: no separate old-log-prob forward
        if out.get("old_per_token_logps") is not None:
            raise SystemExit("TRL computed old_per_token_logps: the settings are not one optimizer step per generation")

    trainer._generate = timed("rollout", trainer._generate)
    trainer._calculate_rewards = timed("reward", trainer._calculate_rewards)
    trainer._generate_and_score_completions = timed("gen_and_score", trainer._generate_and_score_completions,
                                                    no_old_pass)

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.file = open(out_dir / "steps.jsonl", "w")
            self.t0 = self.row = None

        def on_step_begin(self, args, state, control, **kw):
            phases.update(dict.fromkeys(phases, 0.0))
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            step = time.perf_counter() - self.t0
            self.row = {"step": state.global_step, "time/step": step, **{f"time/{k}": v for k, v in phases.items()},
                        "time/update": step - phases["gen_and_score"]}

        def on_log(self, args, state, control, logs=None, **kw):  # logging_steps=1: right after on_step_end
            if self.row is not None and logs and "completions/mean_length" in logs:
                self.row["response/len_mean"] = logs["completions/mean_length"]
                self.file.write(json.dumps(self.row) + "\n")
                self.file.flush()
                self.row = None

    trainer.add_callback(StepTimer())
    trainer.train()


# ----------------------------------------------------------------------------------------------
# The driver: interleaved runs, medians, ratios
# ----------------------------------------------------------------------------------------------


def launch(worker_args: list[str], threads: int, log: Path) -> tuple[float, int]:
    """One worker subprocess; returns its wall seconds (start-up and teardown included) and the
    torch thread count it reported."""
    env = os.environ | {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1",
                        "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled"}
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), *worker_args], cwd=ROOT, env=env,
                              stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode:
        sys.exit(f"worker {worker_args[:2]} failed (exit {proc.returncode}); its output is in {log}:\n"
                 + "\n".join(log.read_text().splitlines()[-20:]))
    wall = time.perf_counter() - t0
    return wall, next(int(line[len(THREADS_MARK):]) for line in log.read_text().splitlines()
                      if line.startswith(THREADS_MARK))


def run_this(overrides: list[str], steps: int, threads: int, tmp: Path, name: str) -> dict:
    out = tmp / name
    argv = ["--config", "tiny_qae.yaml", *overrides, f"trainer.total_steps={steps}", f"trainer.output_dir={out}"]
    wall, torch_threads = launch(["--worker", "this", "--threads", str(threads), "--", *argv], threads,
                                 tmp / f"{name}.log")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    for r in rows:  # what the loop's named timers do not cover: advantages, metrics, data
        r["time/other"] = r["time/step"] - sum(r.get(f"time/{k}", 0.0) for k in THIS_PHASES)
    return {"rows": rows, "wall": wall, "threads": torch_threads}


def run_trl(steps: int, threads: int, tmp: Path, name: str) -> dict:
    out = tmp / name
    out.mkdir()
    wall, torch_threads = launch(["--worker", "trl", "--threads", str(threads), "--steps", str(steps),
                                  "--out", str(out)], threads, tmp / f"{name}.log")
    rows = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines() if line.strip()]
    for r in rows:  # the rest of _generate_and_score_completions: padding, advantages, metric gathering
        r["time/other"] = r["time/gen_and_score"] - r["time/rollout"] - r["time/reward"]
    return {"rows": rows, "wall": wall, "threads": torch_threads}


def med(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return statistics.median(values) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each side, interleaved")
    parser.add_argument("--steps", type=int, default=16, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=2, help="first steps of each run left out")
    parser.add_argument("--threads", type=int, default=2, help="OMP_NUM_THREADS and torch threads of both sides")
    parser.add_argument("--ds-runs", type=int, default=None,
                        help="runs of the dynamic-sampling setting (default --runs)")
    parser.add_argument("--keep", type=Path, default=None, help="keep the runs' outputs and logs here")
    parser.add_argument("--worker", choices=["this", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker == "this":
        return this_worker(args.threads, args.rest)
    if args.worker == "trl":
        return trl_worker(args.threads, args.steps, args.out)
    try:
        import trl  # noqa: F401
    except ImportError:
        sys.exit("this benchmark needs TRL: pip install -r requirements-bench.txt")

    total = args.warmup + args.steps
    ds_runs = args.runs if args.ds_runs is None else args.ds_runs
    tmp = args.keep or Path(tempfile.mkdtemp(prefix="bench_vs_trl_"))
    tmp.mkdir(parents=True, exist_ok=True)
    print(f"{args.runs} runs per side, interleaved; {total} steps per run, first {args.warmup} dropped; "
          f"{args.threads} threads each; logs in {tmp}", flush=True)
    results = {"trl": [], "this": [], "this_ds": []}  # per run: {"rows", "wall", "threads"}
    timed = lambda run: run | {"rows": [r for r in run["rows"] if r["step"] > args.warmup]}  # noqa: E731
    t_start = time.perf_counter()
    for run in range(max(args.runs, ds_runs)):
        if run < args.runs:
            results["trl"].append(timed(run_trl(total, args.threads, tmp, f"trl_{run}")))
            results["this"].append(timed(run_this(THIS_8X8, total, args.threads, tmp, f"this_{run}")))
        if run < ds_runs:
            results["this_ds"].append(timed(run_this(THIS_DS, total, args.threads, tmp, f"this_ds_{run}")))
        print(f"  round {run + 1} done, {time.perf_counter() - t_start:.0f}s so far", flush=True)

    labels = {"trl": "TRL GRPOTrainer 8x8", "this": "this trainer 8x8", "this_ds": "this trainer 8x8 + dyn. sampling"}
    print("\nper run, medians over timed steps (seconds):")
    print(f"{'run':>3}  {'system':<25} {'steps':>5} {'step':>7} {'min':>7} {'rollout':>8} {'reward':>7} {'update':>7} "
          f"{'resp len':>8} {'wall':>6} {'threads':>7}")
    for key in ("trl", "this", "this_ds"):
        for i, run in enumerate(results[key]):
            rows = run["rows"]
            print(f"{i:>3}  {labels[key]:<25} {len(rows):>5} {med(rows, 'time/step'):>7.3f} "
                  f"{min(r['time/step'] for r in rows):>7.3f} {med(rows, 'time/rollout'):>8.3f} "
                  f"{med(rows, 'time/reward'):>7.3f} {med(rows, 'time/update'):>7.3f} "
                  f"{med(rows, 'response/len_mean'):>8.1f} {run['wall']:>6.0f} {run['threads']:>7}")
    pooled = {key: [r for run in runs for r in run["rows"]] for key, runs in results.items()}
    print(f"(min: the fastest timed step; wall: the whole subprocess, start-up and teardown included; "
          f"threads: torch.get_num_threads() in the worker, OMP_NUM_THREADS={args.threads} in both)")

    print("\nphase split, median seconds per timed step over all runs (medians need not add up):")
    print(f"{'phase':<16} {'this 8x8':>9} {'TRL 8x8':>9} {'this DS':>9}   what")
    split = [
        ("rollout", "time/rollout", "time/rollout", "generate (+ decode); TRL: _generate (tokenize, generate, decode)"),
        ("reward", "time/reward", "time/reward", "score_batch; TRL: _calculate_rewards"),
        ("old log-probs", "time/old_logp", None, "no-grad pass; TRL: none (reuses the training forward)"),
        ("other", "time/other", "time/other", "this: advantages, metrics, data; TRL: rest of _generate_and_score"),
        ("update", "time/update", "time/update", "forward+backward, clip, AdamW; TRL: step - _generate_and_score"),
        ("step", "time/step", "time/step", "the whole step"),
    ]
    for name, ours, theirs, what in split:
        trl_value = f"{med(pooled['trl'], theirs):>9.3f}" if theirs else f"{'-':>9}"
        print(f"{name:<16} {med(pooled['this'], ours):>9.3f} {trl_value} {med(pooled['this_ds'], ours):>9.3f}   {what}")
    print(f"{'zero-adv frac':<16} {med(pooled['this'], 'adv/zero_frac'):>9.2f} {'0 (all)':>9} "
          f"{med(pooled['this_ds'], 'adv/zero_frac'):>9.2f}   responses this trainer skips in gradient passes "
          f"(exact sparse update); TRL trains all 64")
    print(f"{'gen batches':<16} {med(pooled['this'], 'sampling/gen_batches'):>9.0f} {1:>9} "
          f"{med(pooled['this_ds'], 'sampling/gen_batches'):>9.0f}   generation batches per step")

    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"\nbench: {time.perf_counter() - t_start:.0f}s wall, {cpu.ru_utime + cpu.ru_stime:.0f}s CPU in the workers, "
          f"{os.getloadavg()[0]:.1f} load average (1 min) at the end on {os.cpu_count()} CPUs")

    trl_step = med(pooled["trl"], "time/step")
    print("\ndynamic sampling, per step: this trainer's 8x8 step with dynamic sampling on "
          "(8 groups with mixed correctness kept from adaptively sized generation batches, 1 optimizer step) "
          "/ TRL's 8x8 step without dynamic sampling")
    print(f"step_time_ratio_vs_trl_dynamic_sampling={med(pooled['this_ds'], 'time/step') / trl_step:.3f}")
    print(f"step_time_ratio_vs_trl={med(pooled['this'], 'time/step') / trl_step:.3f}")


if __name__ == "__main__":
    main()
