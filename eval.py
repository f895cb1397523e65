r"""Evaluation: pass@1 and pass@k on math benchmarks, with the trainer's own prompts, samplers
and verifier.

    python eval.py --config tiny_qae.yaml --benchmarks tiny/test.jsonl --n 8 --limit 50
    python eval.py --model runs/tiny_qae/checkpoints/step_000040/model --benchmarks aime24,amc23 --n 4  # its run's config.yaml
    python eval.py --config qwen3_8b_qae.yaml --model runs/qae/checkpoints/step_000300/model rollout.gpu_memory_utilization=0.8
    accelerate launch --num_processes 8 eval.py --config qwen3_8b_qae.yaml --model ...   # problems split over GPUs
    python eval.py --rescore runs/qae/eval/step_000300/generations.jsonl                  # score again, no sampling

For problem i of a benchmark, n responses are sampled and verified (reward.score_batch); c_i of
them are correct. Over the P problems:

    pass@1 = 1/P sum_i c_i / n                                  (the paper's pass@1: mean accuracy over samples)
    pass@k = 1/P sum_i [ 1 - C(n - c_i, k) / C(n, k) ]          (unbiased; Chen et al. 2021, eq. 1)
           = 1/P sum_i [ 1 - prod_{j = n-c_i+1}^{n} (1 - k/j) ]  (the same as a product: no huge binomials)

`--out` receives results.json (every number next to the sampling settings it was measured
under, plus per-problem results), results.md (a table) and generations.jsonl (every response
with its extracted answer and verdict, which `--rescore` reads back).

Inside training, with the engine train.py already holds (call engine.sync_weights(model) first,
as before a rollout):

    problems = load_benchmark("aime24", cfg.data, tokenizer)
    metrics = evaluate(engine, tokenizer, problems, n=16, seed=0, temperature=0.7)  # {"pass@1": ..., ...}

Choices, numbered:
1. Sampling (QAE_SPEC section 8): the paper states T = 0.7 (top_p unstated: 1.0), verl's DAPO
   scripts validate at T = 1.0, top_p = 0.7. `--sampling paper` (default) or `verl`; explicit
   --temperature / --top-p override either. top_k comes from the config. Every number is
   written next to the settings it was measured under.
2. pass@k for k = 1, 2, 4, ... up to n, and n itself. verl's `best@k` (a bootstrap, reads
   lower) is not reported.
3. Prompts are built exactly as in training (data.build_messages, data.tokenize_prompt: the
   config's prompt template and chat template), but no problem is dropped for length
   (data.max_prompt_len does not apply): a benchmark is scored whole.
4. Gold answers are used as the files give them ("073" in AIME 2024, "27.0" in AMC 2023):
   reward.py reads both as integer golds (its policy 2); tests/test_eval.py checks every row.
5. Seeds: a generate call starting at problem i0 is seeded with seed + i0 * n. vLLM seeds
   response j of the call's l-th prompt with that + l*n + j = seed + i*n + j, so its samples do
   not depend on --batch-size or the number of processes (up to batch-dependent numerics). HF
   `generate` seeds once per call, so its samples do.
6. Several processes: problems are split into contiguous blocks, one per rank, padded to equal
   length by repeating a problem whose extra responses are dropped, so every rank makes the same
   number of generate calls (HF generate under ZeRO-3 is collective). Each rank verifies its own
   responses; records are gathered to every rank and sorted back into problem order.
7. Response length counts tokens up to and including EOS; "truncated" = no EOS within
   max_tokens. A verifier timeout counts as incorrect and is counted in `timeouts`.
8. The rollout engines read their sampling settings from `engine.cfg` at each generate;
   evaluation swaps its own in and restores the training ones afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import re
import sys
from pathlib import Path

import torch
from tqdm import tqdm

import checkpoint
import config
import data
import reward
import rollout
from config import ConfigError
from data import DataError
from policy import load_policy, load_tokenizer

DATA_DIR = Path(__file__).resolve().parent / "data"
BENCHMARKS = {  # name -> file in data/ (sources and answer formats: data/README.md)
    "aime24": "aime24.jsonl",
    "aime25": "aime25.jsonl",
    "amc23": "amc23.jsonl",
    "math500": "math500.jsonl",
}
SAMPLING = {  # choice 1: (temperature, top_p)
    "paper": (0.7, 1.0),  # the QAE paper's evaluation temperature 0.7 (QAE_SPEC section 8); top_p unstated
    "verl": (1.0, 0.7),  # verl's DAPO scripts validate at temperature 1.0, top_p 0.7 (QAE_SPEC section 8)
}


class EvalError(ValueError):
    """Evaluation input that cannot be used; the message names the benchmark, column or flag."""


@dataclasses.dataclass
class Problem(data.Prompt):
    """A benchmark problem: data.Prompt (problem, answer, prompt_ids) plus the dataset's id."""

    id: str


# ----------------------------------------------------------------------------------------------
# Benchmarks: bundled files, local files or hub datasets, checked before any model loads.
# ----------------------------------------------------------------------------------------------


def resolve_benchmark(name: str) -> str:
    """The source of a benchmark: a bundled file by name, a local file, or a hub dataset `owner/name`."""
    if name in BENCHMARKS:
        return str(DATA_DIR / BENCHMARKS[name])
    path = Path(name)
    if path.suffix in data.LOCAL_FORMATS:
        if not path.is_file():
            raise EvalError(f"benchmark file `{name}` not found")
        return name
    if "/" in name and not path.exists():
        return name
    raise EvalError(f"unknown benchmark `{name}`: give one of {sorted(BENCHMARKS)}, "
                    f"a {'/'.join(data.LOCAL_FORMATS)} file, or a hub dataset `owner/name`")


def read_benchmark(name: str, problem_key: str = "problem", answer_key: str = "answer", id_key: str = "id",
                   split: str = "test", limit: int | None = None) -> list[dict]:
    """The first `limit` rows of a benchmark as {"id", "problem", "answer"} (no tokenizer needed)."""
    rows = data.load_rows(resolve_benchmark(name), split)
    for column, flag in ((problem_key, "--problem-key"), (answer_key, "--answer-key")):
        if column.split(".")[0] not in rows.column_names:
            raise EvalError(f"benchmark `{name}` has no column `{column}` (set it with eval.py {flag}); "
                            f"its columns are {rows.column_names}")
    if limit is not None:
        rows = rows.select(range(min(limit, len(rows))))
    out = []
    for i, row in enumerate(rows):
        problem, answer, row_id = (data.get_field(row, key) for key in (problem_key, answer_key, id_key))
        if problem is None or answer is None or not str(answer).strip():
            raise EvalError(f"row {i} of benchmark `{name}` has no problem in `{problem_key}` or no answer in `{answer_key}`")
        out.append({"id": str(i if row_id is None else row_id), "problem": problem, "answer": str(answer)})  # choice 4
    return out


def tokenize_problems(rows: list[dict], data_cfg: config.DataConfig, tokenizer) -> list[Problem]:
    """Prompts exactly as training builds them (choice 3)."""
    problems = []
    for row in rows:
        messages = data.build_messages(row["problem"], data_cfg.prompt_template)
        ids = data.tokenize_prompt(tokenizer, messages, data_cfg.chat_template)
        problems.append(Problem(problem=messages[-1]["content"], answer=row["answer"], prompt_ids=ids, id=row["id"]))
    return problems


def load_benchmark(name_or_path: str, data_cfg: config.DataConfig, tokenizer, limit: int | None = None,
                   problem_key: str = "problem", answer_key: str = "answer", id_key: str = "id",
                   split: str = "test") -> list[Problem]:
    """A benchmark's problems, tokenized with the config's prompt and chat templates."""
    rows = read_benchmark(name_or_path, problem_key, answer_key, id_key, split, limit)
    return tokenize_problems(rows, data_cfg, tokenizer)


# ----------------------------------------------------------------------------------------------
# The estimator and the summary: pure functions of the verdicts.
# ----------------------------------------------------------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with c correct of n samples (Chen et al. 2021):
    1 - C(n-c, k) / C(n, k) = 1 - prod_{j=n-c+1}^{n} (1 - k/j).

    >>> pass_at_k(4, 1, 2), pass_at_k(4, 0, 2), pass_at_k(4, 3, 2)
    (0.5, 0.0, 1.0)
    """
    if not 0 <= c <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n, got c = {c}, n = {n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@k needs 1 <= k <= n, got k = {k}, n = {n}")
    if n - c < k:  # every draw of k samples holds a correct one
        return 1.0
    return 1.0 - math.prod(1.0 - k / j for j in range(n - c + 1, n + 1))


def default_ks(n: int) -> list[int]:
    """1, 2, 4, ... up to n, and n (choice 2).

    >>> default_ks(32), default_ks(6)
    ([1, 2, 4, 8, 16, 32], [1, 2, 4, 6])
    """
    return sorted({2**i for i in range(n.bit_length()) if 2**i <= n} | {n})


def check_ks(ks: list[int], n: int) -> list[int]:
    for k in ks:
        if not 1 <= k <= n:
            raise EvalError(f"--k {k} is impossible with --n {n}: pass@k needs 1 <= k <= n samples per problem")
    return sorted(set(ks))


def summarize(records: list[dict], ks: list[int] | None = None) -> tuple[dict, list[dict]]:
    """Benchmark metrics and per-problem results from scored records sorted by (problem, sample);
    ks None = default_ks(n)."""
    per_problem: dict[int, list[dict]] = {}
    for r in records:
        per_problem.setdefault(r["problem_index"], []).append(r)
    ns = {len(rs) for rs in per_problem.values()}
    if len(ns) != 1:
        raise EvalError(f"problems have different numbers of samples {sorted(ns)}; pass@k needs the same n for all")
    (n,) = ns
    ks = check_ks(ks, n) if ks else default_ks(n)
    problems = [{
        "id": rs[0]["problem_id"],
        "answer": rs[0]["answer"],
        "n": n,
        "correct": sum(r["acc"] for r in rs),  # c_i
        "len_mean": sum(r["len"] for r in rs) / n,
        "preds": [r["pred"] for r in rs],
    } for rs in per_problem.values()]
    metrics = {f"pass@{k}": sum(pass_at_k(n, p["correct"], k) for p in problems) / len(problems) for k in ks}
    metrics |= {
        "len_mean": sum(r["len"] for r in records) / len(records),
        "truncated_frac": sum(r["truncated"] for r in records) / len(records),
        "timeouts": sum(r["timeout"] for r in records),
        "num_problems": len(problems),
        "n": n,
    }
    return metrics, problems


# ----------------------------------------------------------------------------------------------
# Sampling and scoring, split over processes (choices 5, 6, 8).
# ----------------------------------------------------------------------------------------------


def shard(num: int, rank: int, world: int) -> tuple[list[int], int]:
    """This rank's contiguous block of problem indices, padded to ceil(num / world) entries by
    repeating one (choice 6), and how many of them are real.

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
    """Evaluation's sampling settings in engine.cfg for the duration, the old ones after (choice 8).
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
        out = engine.generate([problems[i].prompt_ids for i in batch], n=n, seed=seed + batch[0] * n)  # choice 5
        texts = tokenizer.batch_decode(out.response_ids, skip_special_tokens=True)  # (len(batch) * n), prompt-major
        for k, (ids, text) in enumerate(zip(out.response_ids, texts)):
            pos = b0 + k // n
            if pos >= real:  # a padding problem (choice 6)
                continue
            p = problems[indices[pos]]
            records.append({"problem_index": indices[pos], "problem_id": p.id, "sample": k % n, "answer": p.answer,
                            "response": text, "len": len(ids), "truncated": out.truncated[k]})  # choice 7
        bar.update(max(0, min(len(batch), real - b0)))
    bar.close()
    return records


def score_records(records: list[dict], timeout_s: float = 2.0, workers: int | None = None, mode: str = "verify") -> list[dict]:
    """Records with the verifier's extracted answer, verdict and timeout flag (reward.py, `reward.mode`)."""
    results = reward.score_batch([r["response"] for r in records], [r["answer"] for r in records],
                                 timeout_s=timeout_s, workers=workers, mode=mode)
    return [{**r, "pred": res.pred, "acc": res.acc, "timeout": res.timeout} for r, res in zip(records, results)]


def run_benchmark(engine, tokenizer, problems: list[Problem], n: int, seed: int, temperature: float, top_p: float,
                  max_tokens: int | None, batch_size: int = 64, accelerator=None, timeout_s: float = 2.0,
                  workers: int | None = None, desc: str = "eval", mode: str = "verify") -> list[dict]:
    """Sample and score this rank's share of the problems; every rank returns all records, in order."""
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    indices, real = shard(len(problems), rank, world)
    with sampling_settings(engine, temperature, top_p, max_tokens):
        records = sample_shard(engine, tokenizer, problems, indices, real, n, seed, batch_size, desc, progress=rank == 0)
    records = score_records(records, timeout_s, workers, mode)
    if world > 1:
        from accelerate.utils import gather_object

        records = gather_object(records)
    return merge_shards(records, len(problems))


def evaluate(engine, tokenizer, problems: list[Problem], n: int, seed: int, temperature: float = 0.7,
             top_p: float = 1.0, max_tokens: int | None = None, ks: list[int] | None = None, batch_size: int = 64,
             accelerator=None, timeout_s: float = 2.0, workers: int | None = None, mode: str = "verify") -> dict[str, float]:
    """pass@k, mean length, truncation and the sampling settings of one benchmark, with a built
    rollout engine whose weights are synced (max_tokens None = the engine's max_response_len)."""
    records = run_benchmark(engine, tokenizer, problems, n, seed, temperature, top_p, max_tokens, batch_size,
                            accelerator, timeout_s, workers, mode=mode)
    metrics, _ = summarize(records, ks)
    return metrics | {"temperature": temperature, "top_p": top_p, "top_k": engine.cfg.top_k,
                      "max_tokens": max_tokens or engine.cfg.max_response_len}


def load_eval_sets(cfg: config.Config, tokenizer) -> dict[str, list[Problem]]:
    """Periodic evaluation's problems (the config's `eval` section) by benchmark name; empty when eval.every = 0."""
    if not cfg.eval.every:
        return {}
    names = [b.strip() for b in cfg.eval.benchmarks.split(",") if b.strip()]
    return {Path(b).stem: load_benchmark(b, cfg.data, tokenizer, limit=cfg.eval.limit) for b in names}


def periodic_eval(cfg: config.Config, accelerator, engine, tokenizer, eval_sets: dict) -> dict[str, float]:
    """pass@k and mean length on each benchmark as `eval/<name>/<metric>`, sampled from the weights the
    engine holds (train.py syncs them first)."""
    e, metrics = cfg.eval, {}
    for name, problems in eval_sets.items():
        result = evaluate(engine, tokenizer, problems, n=e.n, seed=cfg.trainer.seed, temperature=e.temperature, top_p=e.top_p,
                          max_tokens=e.max_tokens, accelerator=accelerator, timeout_s=cfg.reward.timeout_s,
                          workers=cfg.reward.workers, mode=cfg.reward.mode)
        metrics |= {f"eval/{name}/{k}": v for k, v in result.items() if k.startswith("pass@") or k == "len_mean"}
    return metrics


# ----------------------------------------------------------------------------------------------
# Outputs: results.json, results.md, generations.jsonl.
# ----------------------------------------------------------------------------------------------


def markdown_table(model: str, benchmarks: dict[str, dict]) -> str:
    """One row per benchmark, pass@k in percent, with the sampling settings on the same row."""
    ks = sorted({int(key[5:]) for b in benchmarks.values() for key in b["metrics"] if key.startswith("pass@")})
    head = ["benchmark", "problems", "n", "T", "top_p", "top_k", "max tokens", *(f"pass@{k} (%)" for k in ks),
            "mean len", "truncated"]
    lines = [f"model: `{model}`", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, b in benchmarks.items():
        m, s = b["metrics"], b["settings"]
        cells = [name, m["num_problems"], m["n"], s["temperature"], s["top_p"], s["top_k"], s["max_tokens"],
                 *(f"{100 * m[f'pass@{k}']:.2f}" if f"pass@{k}" in m else "" for k in ks),
                 f"{m['len_mean']:.1f}", f"{m['truncated_frac']:.3f}"]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(out_dir: Path, results: dict, records: dict[str, list[dict]]) -> None:
    """results.json, results.md and generations.jsonl (each row carries its benchmark and settings)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1) + "\n")
    (out_dir / "results.md").write_text(markdown_table(results["model"], results["benchmarks"]))
    tmp = out_dir / "generations.jsonl.tmp"  # --rescore may read and write the same file
    with open(tmp, "w") as f:
        for name, rows in records.items():
            settings = results["benchmarks"][name]["settings"]
            for r in rows:
                f.write(json.dumps({"benchmark": name, "settings": settings, **r}) + "\n")
    tmp.replace(out_dir / "generations.jsonl")


def benchmark_result(records: list[dict], ks: list[int] | None, settings: dict) -> dict:
    """One benchmark's entry in results.json: its sampling settings, metrics and per-problem results."""
    metrics, problems = summarize(records, ks)
    return {"settings": settings, "metrics": metrics, "problems": problems}


# ----------------------------------------------------------------------------------------------
# Command line.
# ----------------------------------------------------------------------------------------------


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="pass@k of a model on math benchmarks (see the module docstring).")
    p.add_argument("--config", help="YAML file or bare name in configs/: prompt and chat template, rollout backend, "
                                    "model (default: config.py's defaults, the Qwen3-8B-Base setting)")
    p.add_argument("overrides", nargs="*", help="section.key=value config overrides, e.g. rollout.gpu_memory_utilization=0.85")
    p.add_argument("--model", help="HF hub name or local folder, e.g. runs/X/checkpoints/step_000300/model "
                                   "(default: the config's model.name_or_path)")
    p.add_argument("--benchmarks", nargs="+", default=["aime24", "aime25", "amc23"],
                   help=f"names ({', '.join(BENCHMARKS)}), .jsonl/.json/.parquet files or hub datasets; "
                        "space- or comma-separated")
    p.add_argument("--problem-key", default="problem", help="column of the problem text (files and hub datasets)")
    p.add_argument("--answer-key", default="answer", help="column of the gold answer")
    p.add_argument("--id-key", default="id", help="column of the problem id (row number where absent)")
    p.add_argument("--split", default="test", help="split of a hub dataset")
    p.add_argument("--limit", type=int, help="evaluate only the first N problems of each benchmark")
    p.add_argument("--n", type=int, default=32, help="samples per problem (paper: 32)")
    p.add_argument("--k", type=int, nargs="+", help="pass@k to report (default: 1, 2, 4, ... up to n, and n)")
    p.add_argument("--sampling", choices=sorted(SAMPLING), default="paper",
                   help="paper: T 0.7, top_p 1.0; verl: T 1.0, top_p 0.7 (choice 1)")
    p.add_argument("--temperature", type=float, help="overrides --sampling")
    p.add_argument("--top-p", type=float, help="overrides --sampling")
    p.add_argument("--max-tokens", type=int, help="max response tokens (default: the config's rollout.max_response_len)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch-size", type=int, default=64, help="problems per generate call")
    p.add_argument("--out", help="output folder (default: runs/X/eval/step_N for a checkpoint, else runs/eval/<model>)")
    p.add_argument("--rescore", metavar="GENERATIONS_JSONL", help="score a generations.jsonl again, without sampling")
    args = p.parse_args(argv)
    args.benchmarks = [b for item in args.benchmarks for b in item.split(",") if b]  # "aime24,amc23" too
    return args


def default_out(model: str) -> Path:
    """runs/X/eval/step_N for a train.py checkpoint runs/X/checkpoints/step_N/model, else runs/eval/<model>."""
    path = Path(model)
    if path.name == "model" and path.parent.parent.name == checkpoint.CHECKPOINTS:
        return path.parent.parent.parent / "eval" / path.parent.name
    return Path("runs/eval") / re.sub(r"[^\w.-]+", "_", model).strip("_.")


def run_config(model: str | None) -> str | None:
    """The config.yaml train.py wrote next to a checkpoint runs/X/checkpoints/step_N/model, if any:
    without --config, a checkpoint is evaluated with its own run's prompt template and sampler."""
    if model is None:
        return None
    path = Path(model)
    found = path.parent.parent.parent / "config.yaml"
    return str(found) if path.name == "model" and path.parent.parent.name == checkpoint.CHECKPOINTS and found.is_file() else None


def check_args(args: argparse.Namespace, cfg: config.Config) -> dict:
    """The sampling settings of this run, after checking every numeric flag (before any loading)."""
    temperature, top_p = SAMPLING[args.sampling]
    settings = {
        "model": args.model or cfg.model.name_or_path,
        "temperature": temperature if args.temperature is None else args.temperature,
        "top_p": top_p if args.top_p is None else args.top_p,
        "top_k": cfg.rollout.top_k,
        "max_tokens": args.max_tokens or cfg.rollout.max_response_len,
        "seed": args.seed,
        "reward_mode": cfg.reward.mode,
    }
    checks = [  # (flag, value, valid, what it must be)
        ("--n", args.n, args.n >= 1, ">= 1"),
        ("--temperature", settings["temperature"], settings["temperature"] > 0, "> 0 (sampling, not greedy)"),
        ("--top-p", settings["top_p"], 0 < settings["top_p"] <= 1, "in (0, 1]"),
        ("--max-tokens", settings["max_tokens"], settings["max_tokens"] >= 1, ">= 1"),
        ("--limit", args.limit, args.limit is None or args.limit >= 1, ">= 1"),
        ("--batch-size", args.batch_size, args.batch_size >= 1, ">= 1"),
    ]
    for flag, value, valid, need in checks:
        if not valid:
            raise EvalError(f"{flag} must be {need}, got {value}")
    check_ks(args.k or [], args.n)
    return settings


def rescore(args: argparse.Namespace) -> None:
    """--rescore: the verdicts and metrics of saved generations, recomputed with today's reward.py."""
    path = Path(args.rescore)
    if not path.is_file():
        raise EvalError(f"--rescore file `{path}` not found")
    records: dict[str, list[dict]] = {}
    settings: dict[str, dict] = {}
    for i, line in enumerate(path.read_text().splitlines()):
        try:
            row = json.loads(line)
            settings[row["benchmark"]] = row.pop("settings")
        except (json.JSONDecodeError, KeyError, TypeError):
            raise EvalError(f"line {i + 1} of `{path}` is not a generations.jsonl row written by eval.py") from None
        records.setdefault(row.pop("benchmark"), []).append(row)
    benchmarks = {}
    for name, rows in records.items():  # in (problem, sample) order, as written
        records[name] = score_records(rows, mode=settings[name].get("reward_mode", "verify"))
        benchmarks[name] = benchmark_result(records[name], args.k, settings[name])
    models = sorted({s["model"] for s in settings.values()})
    results = {"model": ", ".join(models), "rescored_from": str(path), "benchmarks": benchmarks}
    write_outputs(Path(args.out) if args.out else path.parent, results, records)
    print(markdown_table(results["model"], benchmarks), end="")


def main(argv=None) -> None:
    args = parse_args(argv)
    try:  # every check that can fail on input runs here, before the model loads
        if args.rescore:
            return rescore(args)
        name = args.config or run_config(args.model)
        cfg = config.load(name, args.overrides) if name else config.from_dict({}, args.overrides)
        settings = check_args(args, cfg)
        rows = {name: read_benchmark(name, args.problem_key, args.answer_key, args.id_key, args.split, args.limit)
                for name in args.benchmarks}
        tokenizer = load_tokenizer(settings["model"])
        problems = {name: tokenize_problems(r, cfg.data, tokenizer) for name, r in rows.items()}
    except (EvalError, ConfigError, DataError, OSError) as e:
        print(f"error: {e}".splitlines()[0], file=sys.stderr)
        sys.exit(2)
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=not torch.cuda.is_available())  # else torchrun'd CPU processes each see world 1
    model = load_policy(dataclasses.replace(cfg.model, gradient_checkpointing=False), settings["model"])
    if cfg.rollout.backend == "hf":  # vLLM holds its own copy on the accelerator; this one is only copied in
        model.to(accelerator.device)
    longest_prompt = max(len(p.prompt_ids) for probs in problems.values() for p in probs)
    engine = rollout.make_rollout(cfg.rollout, model, tokenizer, longest_prompt + settings["max_tokens"])
    engine.sync_weights(model)  # vLLM frees its weights until the first sync (rollout_vllm.py choice 2)

    records, benchmarks = {}, {}
    for name, probs in problems.items():
        records[name] = run_benchmark(engine, tokenizer, probs, args.n, args.seed, settings["temperature"],
                                      settings["top_p"], settings["max_tokens"], args.batch_size, accelerator,
                                      cfg.reward.timeout_s, cfg.reward.workers, desc=name, mode=cfg.reward.mode)
        benchmarks[name] = benchmark_result(records[name], args.k, settings)
    if accelerator.is_main_process:
        results = {"model": settings["model"], "backend": cfg.rollout.backend, "prompt_template": cfg.data.prompt_template,
                   "chat_template": cfg.data.chat_template, "benchmarks": benchmarks}
        out = Path(args.out) if args.out else default_out(settings["model"])
        write_outputs(out, results, records)
        print(markdown_table(settings["model"], benchmarks), end="")
        print(f"wrote {out}/results.json, results.md, generations.jsonl", file=sys.stderr)


if __name__ == "__main__":
    main()
