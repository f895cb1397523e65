r"""Evaluation: pass@1 and pass@k of a policy on math benchmarks, with the trainer's own prompts,
samplers and verifier.

    python eval.py --config tiny_qae.yaml                    # its `eval` section: tiny/test.jsonl, n = 4, first 100
    python eval.py --config tiny_qae.yaml --n 8 eval.limit=null                           # flags and overrides win
    python eval.py --model runs/tiny_qae/checkpoints/step_000040/model \
        --benchmarks aime24,amc23 --n 4                                                   # its run's config.yaml
    python eval.py --config qwen3_8b_qae.yaml --model runs/qwen3_8b_qae/checkpoints/step_000300/model \
        rollout.gpu_memory_utilization=0.8
    accelerate launch --num_processes 8 eval.py --config qwen3_8b_qae.yaml --model ...   # problems split over GPUs
    python eval.py --rescore runs/qwen3_8b_qae/eval/step_000300/generations.jsonl          # score again, no sampling
    python eval.py --rescore runs/qwen3_8b_qae/eval/step_000300/generations.jsonl --reward-mode dapo   # another reward

For each problem of a benchmark, n responses are sampled and verified (reward.score_batch) by the
reward.REWARDS entry `--reward-mode` names: verify unless asked, whatever `reward.mode` training used.
infra/evalsets.py reads the benchmarks, turns the verdicts into pass@1 and unbiased pass@k (its
docstring gives the estimator) and writes `--out`: results.json (every number next to the
sampling settings it was measured under and the `reward_mode` it was scored with), results.md and
generations.jsonl (every response with its extracted answer and verdict, which `--rescore` reads back).

Inside training, with the engine train.py already holds (call engine.sync_weights(model) first,
as before a rollout):

    problems = load_benchmark("aime24", cfg.data, tokenizer)
    metrics = evaluate(engine, tokenizer, problems, n=16, seed=0, temperature=0.7)  # {"pass@1": ..., ...}

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. Settings: each is its flag, else (temperature, top_p) the `--sampling paper|verl` preset, else the config's
   `eval` section (resolve_args); every number is written next to the settings it was measured under.
2. Seeds: a generate call starting at problem i0 is seeded with seed + i0 * n (sample_shard).
3. Several processes: each rank samples and verifies a contiguous block of problems, padded to equal length
   (shard); the records are gathered to every rank in problem order (merge_shards).
4. Response length counts tokens up to and including EOS; "truncated" = no EOS within max_tokens; a verifier
   timeout counts as incorrect and is counted in `timeouts`.
5. Evaluation swaps its own sampling settings into `engine.cfg` and restores the training ones after
   (sampling_settings).
6. Answers are scored by the reward `--reward-mode` names, verify by default, whatever `reward.mode` training uses.
7. With vLLM the engine reads the checkpoint itself: this process builds no copy of the weights (`policy_shell`).
8. Every process group waits `trainer.collective_timeout_min`, the training key (infra.launch.init_process_groups).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import sys
from pathlib import Path

import torch
from tqdm import tqdm

import config
import reward
import rollout
from config import ConfigError
from infra import checkpoint, gpu_memory
from infra.cli import one_line_errors
from infra.data import DataError
from infra.ending import finish
from infra.evalsets import (  # noqa: F401 - EvalError, Problem, load_benchmark, pass_at_k: re-exported
    BENCHMARKS,
    EvalError,
    Problem,
    benchmark_result,
    check_ks,
    load_benchmark,
    markdown_table,
    pass_at_k,
    read_benchmark,
    read_generations,
    split_names,
    summarize,
    tokenize_problems,
    write_outputs,
)
from infra.launch import init_process_groups, report_timeouts
from infra.model import ModelError, check_model, load_policy, load_tokenizer, policy_shell

SAMPLING = {  # choice 1: (temperature, top_p)
    "paper": (0.7, 1.0),  # the paper's evaluation temperature (arXiv 2509.22611, section 5); top_p unstated
    "verl": (1.0, 0.7),  # verl recipe/dapo/run_dapo_qwen2.5_32b.sh validates at temperature 1.0, top_p 0.7
}


# ----------------------------------------------------------------------------------------------
# Sampling and scoring, split over processes (choices 2, 3, 5).
# ----------------------------------------------------------------------------------------------


def shard(num: int, rank: int, world: int) -> tuple[list[int], int]:
    """This rank's contiguous block of problem indices, padded to ceil(num / world) entries by
    repeating one (choice 3), and how many of them are real.

    >>> shard(5, 0, 2), shard(5, 1, 2), shard(1, 1, 2)
    (([0, 1, 2], 3), ([3, 4, 4], 2), ([0], 0))
    """
    size = -(-num // world)
    block = list(range(rank * size, min(num, (rank + 1) * size)))
    return block + [block[-1] if block else 0] * (size - len(block)), len(block)


def merge_shards(records: list[dict], num: int) -> list[dict]:
    """Every rank's records in (problem, sample) order; each of the num problems must be there."""
    found = {r["problem_index"] for r in records}
    if found != set(range(num)):
        raise RuntimeError(f"gathered records cover problems {sorted(found)}, expected 0..{num - 1}")
    return sorted(records, key=lambda r: (r["problem_index"], r["sample"]))


@contextlib.contextmanager
def sampling_settings(engine, temperature: float, top_p: float, max_tokens: int | None):
    """Evaluation's sampling settings in engine.cfg for the duration, the old ones after (choice 5).
    The HF engine also stops reporting the policy's log-probs (nothing reads them here)."""
    saved, report = engine.cfg, getattr(engine, "report_policy_logp", False)
    engine.cfg = dataclasses.replace(saved, temperature=temperature, top_p=top_p,
                                     max_response_len=max_tokens or saved.max_response_len)
    engine.report_policy_logp = False
    try:
        yield engine.cfg
    finally:
        engine.cfg, engine.report_policy_logp = saved, report


def sample_shard(engine, tokenizer, problems: list[Problem], indices: list[int], real: int, n: int, seed: int,
                 batch_size: int, desc: str = "eval", progress: bool = True) -> list[dict]:
    """n responses for each of problems[indices[:real]], as records (one per response)."""
    records = []
    bar = tqdm(total=real, desc=desc, disable=not progress, dynamic_ncols=True)
    for b0 in range(0, len(indices), batch_size):
        batch = indices[b0 : b0 + batch_size]
        prompt_ids = [problems[i].prompt_ids for i in batch]
        out = rollout.generate(engine, prompt_ids, n=n, seed=seed + batch[0] * n)  # choice 2
        texts = tokenizer.batch_decode(out.response_ids, skip_special_tokens=True)  # (len(batch) * n), prompt-major
        for k, (ids, text) in enumerate(zip(out.response_ids, texts)):
            pos = b0 + k // n
            if pos >= real:  # a padding problem (choice 3)
                continue
            p = problems[indices[pos]]
            records.append({"problem_index": indices[pos], "problem_id": p.id, "sample": k % n, "answer": p.answer,
                            "response": text, "len": len(ids), "truncated": out.truncated[k]})  # choice 4
        bar.update(max(0, min(len(batch), real - b0)))
    bar.close()
    return records


def score_records(records: list[dict], timeout_s: float = 2.0, workers: int | None = None,
                  reward_mode: str = "verify") -> list[dict]:
    """Records with the extracted answer, verdict and timeout flag of reward.py's `reward_mode` (verify: choice 6)."""
    results = reward.score_batch([r["response"] for r in records], [r["answer"] for r in records],
                                 timeout_s=timeout_s, workers=workers, mode=reward_mode,
                                 truncated=[bool(r.get("truncated", False)) for r in records])
    return [{**r, "pred": res.pred, "acc": res.acc, "timeout": res.timeout} for r, res in zip(records, results)]


def run_benchmark(engine, tokenizer, problems: list[Problem], n: int, seed: int, temperature: float, top_p: float,
                  max_tokens: int | None, batch_size: int = 64, accelerator=None, timeout_s: float = 2.0,
                  workers: int | None = None, desc: str = "eval", reward_mode: str = "verify") -> list[dict]:
    """Sample and score this rank's share of the problems; every rank returns all records, in order."""
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    indices, real = shard(len(problems), rank, world)
    with sampling_settings(engine, temperature, top_p, max_tokens):
        records = sample_shard(engine, tokenizer, problems, indices, real, n, seed, batch_size, desc,
                               progress=rank == 0)
    records = score_records(records, timeout_s, workers, reward_mode)
    if world > 1:
        from accelerate.utils import gather_object

        records = gather_object(records)
    return merge_shards(records, len(problems))


def evaluate(engine, tokenizer, problems: list[Problem], n: int, seed: int, temperature: float = 0.7,
             top_p: float = 1.0, max_tokens: int | None = None, ks: list[int] | None = None, batch_size: int = 64,
             accelerator=None, timeout_s: float = 2.0, workers: int | None = None,
             reward_mode: str = "verify") -> dict[str, float | str]:
    """pass@k, mean length, truncation, the sampling settings and the reward mode of one benchmark, with a built
    rollout engine whose weights are synced (max_tokens None = the engine's max_response_len)."""
    records = run_benchmark(engine, tokenizer, problems, n, seed, temperature, top_p, max_tokens, batch_size,
                            accelerator, timeout_s, workers, reward_mode=reward_mode)
    metrics, _ = summarize(records, ks)
    return metrics | {"temperature": temperature, "top_p": top_p, "top_k": engine.cfg.top_k,
                      "max_tokens": max_tokens or engine.cfg.max_response_len, "reward_mode": reward_mode}


# ----------------------------------------------------------------------------------------------
# Periodic evaluation inside train.py (the config's `eval` section).
# ----------------------------------------------------------------------------------------------


def load_eval_sets(cfg: config.Config, tokenizer) -> dict[str, list[Problem]]:
    """Periodic evaluation's problems (the config's `eval` section) by benchmark name; empty when eval.every = 0."""
    if not cfg.eval.every:
        return {}
    return {Path(b).stem: load_benchmark(b, cfg.data, tokenizer, limit=cfg.eval.limit)
            for b in split_names(cfg.eval.benchmarks)}


def periodic_eval(cfg: config.Config, accelerator, engine, tokenizer, eval_sets: dict) -> dict[str, float]:
    """pass@k and mean length on each benchmark as `eval/<name>/<metric>`, sampled from the weights the
    engine holds (train.py syncs them first)."""
    e, metrics = cfg.eval, {}
    for name, problems in eval_sets.items():
        result = evaluate(engine, tokenizer, problems, n=e.n, seed=cfg.trainer.seed, temperature=e.temperature,
                          top_p=e.top_p, max_tokens=e.max_tokens, accelerator=accelerator,
                          timeout_s=cfg.reward.timeout_s, workers=cfg.reward.workers)
        metrics |= {f"eval/{name}/{k}": v for k, v in result.items() if k.startswith("pass@") or k == "len_mean"}
    return metrics


# ----------------------------------------------------------------------------------------------
# Command line: flags over the config's `eval` section (choice 1).
# ----------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    """The flags as given; a setting left out is None here and comes from the config (resolve_args)."""
    p = argparse.ArgumentParser(description="pass@k of a model on math benchmarks (see the module docstring).")
    one_line_errors(p)  # a bad flag is one `error:` line, exit code 2
    p.add_argument("--config", help="YAML file or bare name in configs/: its `eval` section gives the defaults of the "
                                    "flags below; also prompt and chat template, rollout backend, model (default: a "
                                    "checkpoint's own run config.yaml, else config.py's defaults, "
                                    "the Qwen3-8B-Base setting)")
    p.add_argument("overrides", nargs="*", help="section.key=value config overrides, "
                                                "e.g. rollout.gpu_memory_utilization=0.85 or eval.limit=null")
    p.add_argument("--model", help="HF hub name or local folder, e.g. runs/X/checkpoints/step_000300/model "
                                   "(default: the config's model.name_or_path)")
    p.add_argument("--benchmarks", nargs="+",
                   help=f"names ({', '.join(BENCHMARKS)}), .jsonl/.json/.parquet files or hub datasets; "
                        "space- or comma-separated (default: the config's eval.benchmarks)")
    p.add_argument("--problem-key", default="problem", help="column of the problem text (files and hub datasets)")
    p.add_argument("--answer-key", default="answer", help="column of the gold answer")
    p.add_argument("--id-key", default="id", help="column of the problem id (row number where absent)")
    p.add_argument("--split", default="test", help="split of a hub dataset")
    p.add_argument("--limit", type=int, help="evaluate only the first N problems of each benchmark "
                                             "(default: the config's eval.limit; all if null)")
    p.add_argument("--n", type=int, help="samples per problem (default: the config's eval.n; paper: 32)")
    p.add_argument("--k", type=int, nargs="+", help="pass@k to report (default: 1, 2, 4, ... up to n, and n)")
    p.add_argument("--sampling", choices=sorted(SAMPLING),
                   help="temperature and top_p preset over the config's eval.temperature and eval.top_p: "
                        "paper: T 0.7, top_p 1.0; verl: T 1.0, top_p 0.7 (choice 1)")
    p.add_argument("--temperature", type=float, help="overrides --sampling and eval.temperature")
    p.add_argument("--top-p", type=float, help="overrides --sampling and eval.top_p")
    p.add_argument("--max-tokens", type=int, help="max response tokens (default: the config's eval.max_tokens, "
                                                  "else rollout.max_response_len)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--reward-mode", default="verify", help="the reward.REWARDS entry that scores the answers "
                                                            "(default verify, whatever the config's reward.mode)")
    p.add_argument("--batch-size", type=int, default=64, help="problems per generate call")
    p.add_argument("--out", help="output folder (default: runs/X/eval/step_N for a checkpoint, else runs/eval/<model>)")
    p.add_argument("--rescore", metavar="GENERATIONS_JSONL", help="score a generations.jsonl again, without sampling")
    args = p.parse_args(argv)
    try:
        reward.check_mode(args.reward_mode, key="--reward-mode")
    except ValueError as e:
        p.error(str(e))
    args.benchmarks = split_names(args.benchmarks) if args.benchmarks else None  # "aime24,amc23" too
    return args


def default_out(model: str) -> Path:
    """runs/X/eval/step_N for a train.py checkpoint runs/X/checkpoints/step_N/model, else runs/eval/<model>."""
    path = Path(model)
    if path.name == "model" and path.parent.parent.name == checkpoint.CHECKPOINTS:
        return path.parent.parent.parent / "eval" / path.parent.name
    return Path("runs/eval") / re.sub(r"[^\w.-]+", "_", model).strip("_.")


def run_config(model: str | None) -> str | None:
    """The config.yaml train.py wrote next to a checkpoint runs/X/checkpoints/step_N/model, if any:
    without --config, a checkpoint is evaluated with its own run's prompt template, sampler and `eval` section."""
    if model is None:
        return None
    path = Path(model)
    found = path.parent.parent.parent / "config.yaml"
    return (str(found) if path.name == "model" and path.parent.parent.name == checkpoint.CHECKPOINTS and found.is_file()
            else None)


def resolve_args(args: argparse.Namespace, cfg: config.Config) -> tuple[argparse.Namespace, dict]:
    """Choice 1: each setting from its flag, else (temperature, top_p) the --sampling preset, else the
    config's `eval` section. Returns the flags with those settings filled in, and the sampling settings
    written next to every number; every numeric value is checked here, before any loading."""
    e, preset = cfg.eval, SAMPLING.get(args.sampling, (None, None))
    source: dict[str, str] = {}  # setting -> the flag or config key its value came from, named in errors

    def pick(name: str, *candidates: tuple) -> object:
        """The first (value, source) candidate whose value is set."""
        for value, where in candidates:
            if value is not None:
                source[name] = where
                return value
        return None

    run = argparse.Namespace(**vars(args))
    run.benchmarks = args.benchmarks or split_names(e.benchmarks)
    run.n = pick("n", (args.n, "--n"), (e.n, "config key `eval.n`"))
    run.limit = pick("limit", (args.limit, "--limit"), (e.limit, "config key `eval.limit`"))
    settings = {
        "model": args.model or cfg.model.name_or_path,
        "temperature": pick("temperature", (args.temperature, "--temperature"),
                            (preset[0], f"--sampling {args.sampling}"),
                            (e.temperature, "config key `eval.temperature`")),
        "top_p": pick("top_p", (args.top_p, "--top-p"), (preset[1], f"--sampling {args.sampling}"),
                      (e.top_p, "config key `eval.top_p`")),
        "top_k": cfg.rollout.top_k,
        "max_tokens": pick("max_tokens", (args.max_tokens, "--max-tokens"),
                           (e.max_tokens, "config key `eval.max_tokens`"),
                           (cfg.rollout.max_response_len, "config key `rollout.max_response_len`")),
        "seed": args.seed,
        "reward_mode": args.reward_mode,  # the answers' scorer, next to the sampling settings
    }
    checks = [  # (setting, value, valid, what it must be)
        ("n", run.n, run.n >= 1, ">= 1"),
        ("temperature", settings["temperature"], settings["temperature"] > 0, "> 0 (sampling, not greedy)"),
        ("top_p", settings["top_p"], 0 < settings["top_p"] <= 1, "in (0, 1]"),
        ("max_tokens", settings["max_tokens"], settings["max_tokens"] >= 1, ">= 1"),
        ("limit", run.limit, run.limit is None or run.limit >= 1, ">= 1"),
    ]
    for name, value, valid, need in checks:
        if not valid:
            raise EvalError(f"{source[name]} must be {need}, got {value}")
    if args.batch_size < 1:
        raise EvalError(f"--batch-size must be >= 1, got {args.batch_size}")
    check_ks(args.k or [], run.n)
    return run, settings


def rescore(args: argparse.Namespace) -> None:
    """--rescore: the verdicts and metrics of saved generations, recomputed with today's reward.py."""
    path = Path(args.rescore)
    records, settings = read_generations(path)
    benchmarks = {}
    for name, rows in records.items():  # in (problem, sample) order, as written
        records[name] = score_records(rows, reward_mode=args.reward_mode)
        benchmarks[name] = benchmark_result(records[name], args.k, settings[name] | {"reward_mode": args.reward_mode})
    models = sorted({s["model"] for s in settings.values()})
    results = {"model": ", ".join(models), "rescored_from": str(path), "benchmarks": benchmarks}
    write_outputs(Path(args.out) if args.out else path.parent, results, records)
    print(markdown_table(results["model"], benchmarks) + f"answers scored by reward mode `{args.reward_mode}`")


def main(argv=None) -> None:
    args = parse_args(argv)
    try:  # every check that can fail on input runs here, before the model loads
        if args.rescore:
            return rescore(args)
        config_name = args.config or run_config(args.model)
        cfg = config.load(config_name, args.overrides) if config_name else config.from_dict({}, args.overrides)
        run, settings = resolve_args(args, cfg)
        rows = {name: read_benchmark(name, run.problem_key, run.answer_key, run.id_key, run.split, run.limit)
                for name in run.benchmarks}
        check_model(settings["model"], "--model" if args.model else "model.name_or_path")
        tokenizer = load_tokenizer(settings["model"], cfg.data.chat_template)
        problems = {name: tokenize_problems(r, cfg.data, tokenizer) for name, r in rows.items()}
        cfg.rollout.gpu_memory_utilization = gpu_memory.resolve(cfg, settings["model"], training=False)  # `auto`
    except (EvalError, ConfigError, DataError, ModelError, OSError) as e:
        print(f"error: {e}".splitlines()[0], file=sys.stderr)
        sys.exit(2)
    from accelerate import Accelerator

    cpu = not torch.cuda.is_available()  # else torchrun'd CPU processes each see world 1
    init_process_groups(cfg, cpu)  # choice 8: the collective timeout, before accelerate makes the default group
    accelerator = Accelerator(cpu=cpu)
    vllm = cfg.rollout.backend == "vllm"
    model_cfg = dataclasses.replace(cfg.model, gradient_checkpointing=False)
    if vllm:  # choice 7: the engine reads the weights; no full copy per rank in host memory
        model = policy_shell(model_cfg, settings["model"])
    else:
        model = load_policy(model_cfg, settings["model"]).to(accelerator.device)
    longest_prompt = max(len(p.prompt_ids) for probs in problems.values() for p in probs)
    engine = rollout.make_sampler(cfg.rollout, model, tokenizer, longest_prompt + settings["max_tokens"],
                                  from_disk=vllm)
    report_timeouts(cfg)  # every process group exists now (vLLM's too): the timeout each holds

    records, benchmarks = {}, {}
    for name, probs in problems.items():
        records[name] = run_benchmark(engine, tokenizer, probs, run.n, run.seed, settings["temperature"],
                                      settings["top_p"], settings["max_tokens"], run.batch_size, accelerator,
                                      cfg.reward.timeout_s, cfg.reward.workers, desc=name, reward_mode=run.reward_mode)
        benchmarks[name] = benchmark_result(records[name], run.k, settings)
    if accelerator.is_main_process:
        results = {"model": settings["model"], "backend": cfg.rollout.backend,
                   "prompt_template": cfg.data.prompt_template, "chat_template": cfg.data.chat_template,
                   "benchmarks": benchmarks}
        out = Path(run.out) if run.out else default_out(settings["model"])
        write_outputs(out, results, records)
        print(markdown_table(settings["model"], benchmarks) + f"answers scored by reward mode `{run.reward_mode}`")
        print(f"wrote {out}/results.json, results.md, generations.jsonl", file=sys.stderr)
    finish(accelerator, engine)  # vLLM's process groups, then accelerate's, on every rank; "rank R: done" last


if __name__ == "__main__":
    main()
