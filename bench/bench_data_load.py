"""Loading DAPO-Math-17k at its real size: ~1.79M rows, ~17.9k distinct prompts each ~100 times.

Writes a synthetic parquet in verl's schema to a temporary folder (`prompt` a list of chat
messages with DAPO's template applied, `reward_model` {ground_truth, style}, `data_source`,
`ability`, `extra_info` {index} distinct per row; rows shuffled), then loads it two ways, each in
its own subprocess so that each peak RSS (ru_maxrss) is its own:

- naive: the row-by-row loader infra/data.py had before deduplication (kept below as
  `naive_load_prompts`): `datasets.load_dataset`, then every row tokenized and kept as a Prompt;
- new: data.load_prompts (each distinct prompt tokenized once, one int per row).

Both see the tiny tokenizer (tiny/model) and data.max_prompt_len = 1024, which drops the longest
~2% of problems so the dropped counts are exercised. The two must agree on the number of rows and
on the Prompt at 2,000 seeded row indices. Peak RSS is in GiB (ru_maxrss / 1024^2). Prints, last:
`data_load rows=<n> unique=<u> seconds=<s> peak_rss_gb=<x> naive_peak_rss_gb=<y>` (seconds and
peak RSS of the new way).

    nice -n 10 python bench/bench_data_load.py               # ~2 h on 2 busy CPUs: nearly all of it the naive way
    nice -n 10 python bench/bench_data_load.py --skip-naive  # the new way alone
"""

import argparse
import hashlib
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WORDS = ("Let $x$ be the number of positive integers $n$ such that $n^2+1$ divides $2^n+1$ . Find the sum "
         "of all real roots of polynomial $P(x)=x^3-3x+1$ , where triangle $ABC$ has $AB=13$ and $BC=14$ "
         "with circle radius $r$ tangent to line $\\ell$ ; compute the remainder when $m+n$ is divided by "
         "$1000$ if probability is $\\frac{m}{n}$ in lowest terms and area equals $\\sqrt{k}$").split()


def make_parquet(path: Path, problems: int, repeats: int, seed: int = 0) -> int:
    """`problems` distinct math-like problems (lognormal length, median ~230 characters, as in
    DAPO-Math-17k), each in `repeats` rows, shuffled, written in row groups of 100k rows."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from config import DAPO_TEMPLATE

    rng = np.random.default_rng(seed)
    words = random.Random(seed)
    content, answer = [], []
    for length in np.clip(rng.lognormal(np.log(230), 0.6, problems), 40, 3000).astype(int):
        text = []
        while sum(map(len, text)) + len(text) < length:
            text.append(words.choice(WORDS) if words.random() < 0.85 else str(words.randint(0, 999)))
        content.append(DAPO_TEMPLATE.replace("{problem}", " ".join(text)))
        answer.append(str(words.randint(0, 10**words.randint(1, 4))))
    content, answer = pa.array(content), pa.array(answer)
    order = rng.permutation(np.repeat(np.arange(problems), repeats))  # (rows,) the distinct problem of each row
    writer = None
    for start in range(0, len(order), 100_000):
        u = pa.array(order[start : start + 100_000])
        n = len(u)
        prompt = pa.ListArray.from_arrays(pa.array(np.arange(n + 1, dtype=np.int32)), pa.StructArray.from_arrays(
            [pa.repeat("user", n), content.take(u)], names=["role", "content"]))
        reward_model = pa.StructArray.from_arrays([answer.take(u), pa.repeat("rule-lighteval/MATH_v2", n)],
                                                  names=["ground_truth", "style"])
        index = pa.array([f"{x:016x}-{start + i}" for i, x in enumerate(rng.integers(0, 2**63, n))])
        table = pa.table({"data_source": pa.repeat("math_dapo", n), "prompt": prompt,
                          "ability": pa.repeat("MATH", n), "reward_model": reward_model,
                          "extra_info": pa.StructArray.from_arrays([index], names=["index"])})
        writer = writer or pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    writer.close()
    return len(order)


def naive_load_prompts(data_cfg, tokenizer):
    """infra.data.load_prompts before deduplication, kept as the baseline: every row read as a Python
    dict from `datasets`, tokenized and kept."""
    import datasets

    from infra.data import DataError, Prompt, build_messages, get_field, tokenize_prompt

    rows = datasets.load_dataset("parquet", data_files=data_cfg.train_files, split="train")
    prompts, dropped = [], 0
    for i, row in enumerate(rows):
        problem, answer = get_field(row, data_cfg.prompt_key), get_field(row, data_cfg.answer_key)
        if problem is None or (isinstance(problem, str) and not problem.strip()):
            raise DataError(f"row {i} of `{data_cfg.train_files}` has no problem in column `{data_cfg.prompt_key}`")
        if answer is None or not str(answer).strip():
            raise DataError(f"row {i} of `{data_cfg.train_files}` has no answer in column `{data_cfg.answer_key}`")
        messages = build_messages(problem, data_cfg.prompt_template)
        ids = tokenize_prompt(tokenizer, messages, data_cfg.chat_template)
        if len(ids) > data_cfg.max_prompt_len:
            dropped += 1
            continue
        prompts.append(Prompt(problem=messages[-1]["content"], answer=str(answer), prompt_ids=ids))
    return prompts, dropped


def load(way: str, path: str, max_prompt_len: int) -> dict:
    """Runs in the subprocess: one way of loading, timed, with its peak RSS and a digest of 2,000 rows."""
    from transformers import AutoTokenizer

    import config
    from infra import data

    tokenizer = AutoTokenizer.from_pretrained(str(REPO / "tiny/model"))
    cfg = config.from_dict({}, [f"data.train_files={path}", f"data.max_prompt_len={max_prompt_len}"])
    start = time.perf_counter()
    prompts, dropped = (naive_load_prompts if way == "naive" else data.load_prompts)(cfg.data, tokenizer)
    seconds = time.perf_counter() - start
    rows = random.Random(0).sample(range(len(prompts)), min(2000, len(prompts)))
    digest = hashlib.sha256(json.dumps([vars(prompts[i]) for i in rows]).encode()).hexdigest()
    return {"rows": len(prompts), "dropped_rows": dropped, "seconds": seconds, "digest": digest,
            "unique": getattr(prompts, "num_unique", None), "dropped_unique": getattr(prompts, "dropped_unique", None),
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024**2}  # ru_maxrss is in KiB on Linux


def run_way(way: str, path: Path, max_prompt_len: int, cache: Path) -> dict:
    env = {"HF_DATASETS_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, __file__, "--load", way, str(path), str(max_prompt_len)],
                          capture_output=True, text=True, env={**os.environ, **env})
    if proc.returncode != 0:
        sys.exit(f"the {way} load failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", type=int, default=17_900, help="distinct problems")
    p.add_argument("--repeats", type=int, default=100, help="rows per problem")
    p.add_argument("--max-prompt-len", type=int, default=1024)
    p.add_argument("--skip-naive", action="store_true", help="load the new way only (naive_peak_rss_gb=nan)")
    p.add_argument("--load", nargs=3, metavar=("WAY", "PATH", "MAX_PROMPT_LEN"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.load:
        print(json.dumps(load(args.load[0], args.load[1], int(args.load[2]))))
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "dapo-math-17k.parquet"
        start = time.perf_counter()
        rows = make_parquet(path, args.problems, args.repeats)
        print(f"wrote {rows:,} rows ({args.problems:,} problems x {args.repeats}) "
              f"to a {path.stat().st_size / 1e6:.0f} MB parquet in {time.perf_counter() - start:.0f} s")
        new = run_way("new", path, args.max_prompt_len, Path(tmp) / "hf_cache")
        print(f"new:   {new['rows']:,} rows, {new['unique']:,} distinct prompts; dropped {new['dropped_rows']:,} rows "
              f"({new['dropped_unique']:,} distinct) as longer than {args.max_prompt_len} tokens; "
              f"{new['seconds']:.1f} s, peak RSS {new['peak_rss_gb']:.2f} GB")
        naive = {"peak_rss_gb": float("nan")}
        if not args.skip_naive:
            naive = run_way("naive", path, args.max_prompt_len, Path(tmp) / "hf_cache")
            print(f"naive: {naive['rows']:,} rows; dropped {naive['dropped_rows']:,}; {naive['seconds']:.1f} s, "
                  f"peak RSS {naive['peak_rss_gb']:.2f} GB")
            same = ((naive["rows"], naive["dropped_rows"], naive["digest"])
                    == (new["rows"], new["dropped_rows"], new["digest"]))
            print(f"same rows, dropped count and Prompts at 2,000 sampled rows: {same}")
            if not same:
                sys.exit("the new loader disagrees with the naive one")
    print(f"data_load rows={new['rows']} unique={new['unique']} seconds={new['seconds']:.1f} "
          f"peak_rss_gb={new['peak_rss_gb']:.2f} naive_peak_rss_gb={naive['peak_rss_gb']:.2f}")


if __name__ == "__main__":
    main()
