r"""Benchmarks for eval.py, everything that needs no model: reading a benchmark's problems,
summarising scored responses as pass@k, and the files an evaluation writes and --rescore reads.

    rows     = read_benchmark("aime24", limit=5)                  # [{"id", "problem", "answer"}]
    problems = load_benchmark("aime24", cfg.data, tokenizer)      # the same, tokenized as in training
    metrics, per_problem = summarize(records)                     # records: one per scored response

For problem i of a benchmark, n responses are sampled and verified; c_i of them are correct.
Over the P problems:

    pass@1 = 1/P sum_i c_i / n                                  (the paper's pass@1: mean accuracy over samples)
    pass@k = 1/P sum_i [ 1 - C(n - c_i, k) / C(n, k) ]          (unbiased; Chen et al. 2021, eq. 1)
           = 1/P sum_i [ 1 - prod_{j = n-c_i+1}^{n} (1 - k/j) ]  (the same as a product: no huge binomials)

An evaluation's folder holds results.json (every number next to the sampling settings it was
measured under, plus per-problem results), results.md (a table) and generations.jsonl (every
response with its extracted answer and verdict, which `eval.py --rescore` reads back).

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. A benchmark is a bundled file by name (data/), a local .jsonl/.json/.parquet file or a hub dataset
   `owner/name` (resolve_benchmark); its columns, problems and answers are checked before any model loads.
2. Prompts are built exactly as in training (data.build_messages, data.tokenize_prompt), but no problem is
   dropped for length: `data.max_prompt_len` does not apply (tokenize_problems).
3. Gold answers are used as the files give them ("073" in AIME 2024, "27.0" in AMC 2023; read_benchmark).
4. pass@k for k = 1, 2, 4, ... up to n, and n itself (default_ks); verl's `best@k` is not reported.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import config
from infra import data
from infra.model import is_hub_id
from infra.readers import ANSWER_FIX, PROBLEM_FIX

DATA_DIR = Path(__file__).resolve().parents[1] / "data"
BENCHMARKS = {  # name -> file in data/ (sources and answer formats: data/README.md)
    "aime24": "aime24.jsonl",
    "aime25": "aime25.jsonl",
    "amc23": "amc23.jsonl",
    "math500": "math500.jsonl",
}


class EvalError(ValueError):
    """Evaluation input that cannot be used; the message names the benchmark, column or flag."""


@dataclasses.dataclass
class Problem(data.Prompt):
    """A benchmark problem: data.Prompt (problem, answer, prompt_ids) plus the dataset's id."""

    id: str


# ----------------------------------------------------------------------------------------------
# Benchmarks: bundled files, local files or hub datasets, checked before any model loads (choice 1).
# ----------------------------------------------------------------------------------------------


def split_names(items: str | list[str]) -> list[str]:
    """Benchmark names from a comma-separated string or a list of them ("aime24,amc23" too).

    >>> split_names("aime24, amc23"), split_names(["aime24,amc23", "math500"])
    (['aime24', 'amc23'], ['aime24', 'amc23', 'math500'])
    """
    items = [items] if isinstance(items, str) else items
    return [name.strip() for item in items for name in item.split(",") if name.strip()]


def resolve_benchmark(name: str) -> str:
    """The source of a benchmark: a bundled file by name, a local file, or a hub dataset `owner/name`."""
    if name in BENCHMARKS:
        return str(DATA_DIR / BENCHMARKS[name])
    path, formats = Path(name), "/".join(data.LOCAL_FORMATS)
    bundled = f"the bundled benchmarks are {sorted(BENCHMARKS)}"
    if path.is_dir():
        raise EvalError(f"benchmark `{name}` is a directory; give one {formats} file in it, "
                        f"or one of {sorted(BENCHMARKS)}")
    if path.is_file() and path.suffix not in data.LOCAL_FORMATS:
        raise EvalError(f"benchmark file `{name}` must end in one of {sorted(data.LOCAL_FORMATS)}; "
                        "convert it to JSON lines")
    if path.is_file():
        return name
    if path.suffix in data.LOCAL_FORMATS:
        where = "" if path.is_absolute() else f" (relative to `{Path.cwd()}`)"
        raise EvalError(f"benchmark file `{name}` not found{where}; {bundled}")
    if "/" in name and is_hub_id(name):
        return name
    raise EvalError(f"unknown benchmark `{name}`: no bundled benchmark and no file has that name; give one of "
                    f"{sorted(BENCHMARKS)}, a {formats} file, or a hub dataset `owner/name`")


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
        if not usable_problem(problem):
            raise EvalError(f"row {i} of benchmark `{name}` has no usable problem in `{problem_key}` "
                            f"(got {problem!r:.60}); {PROBLEM_FIX}")
        if not usable_answer(answer):
            raise EvalError(f"row {i} of benchmark `{name}` has no usable answer in `{answer_key}` "
                            f"(got {answer!r:.60}); {ANSWER_FIX}")
        out.append({"id": str(i if row_id is None else row_id), "problem": problem, "answer": str(answer)})  # choice 3
    return out


def usable_problem(problem) -> bool:
    """A non-blank string, or a non-empty list of chat messages with non-blank string content
    (as infra/readers.py checks)."""
    if isinstance(problem, list):
        return bool(problem) and all(isinstance(m, dict) and isinstance(m.get("content"), str) and m["content"].strip()
                                     for m in problem)
    return isinstance(problem, str) and bool(problem.strip())


def usable_answer(answer) -> bool:
    """A non-blank string or a number (not a bool, not NaN), as infra/readers.py checks."""
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        return False
    return bool(answer.strip()) if isinstance(answer, str) else not (isinstance(answer, float) and math.isnan(answer))


def tokenize_problems(rows: list[dict], data_cfg: config.DataConfig, tokenizer) -> list[Problem]:
    """Prompts exactly as training builds them (choice 2)."""
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
    """1, 2, 4, ... up to n, and n (choice 4).

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


def benchmark_result(records: list[dict], ks: list[int] | None, settings: dict) -> dict:
    """One benchmark's entry in results.json: its sampling settings, metrics and per-problem results."""
    metrics, problems = summarize(records, ks)
    return {"settings": settings, "metrics": metrics, "problems": problems}


# ----------------------------------------------------------------------------------------------
# Outputs: results.json, results.md, generations.jsonl; and generations.jsonl read back.
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


def read_generations(path: Path) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """A generations.jsonl written by write_outputs: each benchmark's records, in the order
    written ((problem, sample) order), and each benchmark's sampling settings."""
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
    return records, settings
