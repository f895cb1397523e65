"""Build the eval_runs pool (bench/heldout/README.md) of real model completions from public GitHub repos.

Each source is read straight out of a git snapshot of its repository (`git show COMMIT:PATH`); the
clones live at MIRRORS/<owner>+<name>/repo (a `git clone` of each public repository). Per source a
fixed-size random subset (random.Random(0) per source, over the file's row order) is kept; the response text is copied
verbatim. No source records a finish reason / length-limit flag, so `truncated` is False everywhere.

    MIRRORS=DIR python bench/heldout/build_eval_runs.py OUT.jsonl
    python bench/bench_reward_heldout.py --set eval_runs --pool OUT.jsonl
"""
from __future__ import annotations

import ast
import io
import json
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path

MIRRORS = Path(os.environ.get("MIRRORS", "mirrors"))


def git_show(repo: str, commit: str, path: str) -> bytes:
    d = MIRRORS / (repo.replace("/", "+")) / "repo"
    return subprocess.run(["git", "-C", str(d), "show", f"{commit}:{path}"], check=True,
                          capture_output=True).stdout


def jsonl(b: bytes):
    return [json.loads(line) for line in b.decode("utf-8").splitlines() if line.strip()]


def as_list(v):
    """Qwen2.5-Math-harness outputs store `code`/`pred` as lists."""
    if isinstance(v, list):
        return v
    try:
        return ast.literal_eval(v)
    except Exception:
        return [v]


# ---------------------------------------------------------------- loaders: yield (problem, gold, response)
def mmlu_pro(repo, commit, path, field, zip_member=None):
    raw = git_show(repo, commit, path)
    if zip_member:
        raw = zipfile.ZipFile(io.BytesIO(raw)).read(zip_member)
    for r in json.loads(raw):
        if r.get("category") != "math":
            continue
        opts = r["options"] if isinstance(r["options"], list) else ast.literal_eval(r["options"])
        prob = r["question"] + "\nOptions:\n" + "\n".join(f"({chr(65 + i)}) {o}" for i, o in enumerate(opts))
        yield prob, r["answer"], r[field]


def theoremqa(repo, commit, path):
    test = json.loads(git_show(repo, commit, "theoremqa_test.json"))
    rows = jsonl(git_show(repo, commit, path))
    assert len(rows) == len(test)
    for r, t in zip(rows, test):
        assert r["question"] == t["Question"]
        if t.get("Picture"):
            continue  # needs an image
        a = t["Answer"]
        gold = str(a) if not isinstance(a, list) else "[" + ", ".join(str(x) for x in a) + "]"
        yield t["Question"], gold, r["solution"]


def omni_infile(repo, commit, path):
    for r in jsonl(git_show(repo, commit, path)):
        yield r["problem"], r["answer"], r["model_generation"]


def last_boxed(s):
    i = s.rfind("\\boxed{")
    if i < 0:
        return None
    j, depth = i + 7, 1
    while j < len(s) and depth:
        depth += {"{": 1, "}": -1}.get(s[j], 0)
        j += 1
    return s[i + 7:j - 1]


def original_golds(repo, commit, bench):
    """The harness's stored `gt` went through its strip_string (spaces, 'and', units removed), which
    mangles some golds; take the gold from the benchmark file the harness read, keyed by question."""
    m = {}
    for r in jsonl(git_show(repo, commit, f"eval/data/{bench}/test.jsonl")):
        if bench == "olympiadbench":
            fa = r["final_answer"]
            fa = fa if isinstance(fa, list) else ast.literal_eval(fa)
            m[r["question"].strip()] = ", ".join(a.strip().strip("$") for a in fa)
        elif bench == "minerva_math":
            m[r["problem"].strip()] = last_boxed(r["solution"])
        else:
            m[r["question"].strip()] = r["answer"].strip().strip("$").strip()
    return m


def qwen_harness(repo, commit, path, gold_from=None):
    golds = original_golds(repo, *gold_from) if gold_from else {}
    for r in jsonl(git_show(repo, commit, path)):
        code = as_list(r["code"])
        gold = golds.get(r["question"].strip()) if golds else None
        if golds and gold is None:
            continue
        yield r["question"], gold if gold is not None else str(r["gt"]), code[0]


def gsm_gpt3(repo, commit, path, key):
    for r in jsonl(git_show(repo, commit, path)):
        sol = r[key]
        sol = sol if isinstance(sol, dict) else ast.literal_eval(sol)
        gold = r["ground_truth"].rsplit("A:", 1)[1].strip()
        yield r["question"], gold, sol["solution"]


PRIME_C = "e787b9cefff7c43c40a98a41c2254cddd38ebd09"
PRIME_P = "eval/scripts/eval/Qwen25-Math/evaluation/outputs/home/test/test05/whb/"
PRIME_DATA_C = "18ad596f08d487bb546d80d738d99ec697bd2e75"  # eval/data/<bench>/test.jsonl
PRIME_F = "/test_qwen25-math-cot_-1_seed0_t0.0_s0_e-1.jsonl"
MMLU = "TIGER-AI-Lab/MMLU-Pro"
TQA = ("TIGER-AI-Lab/TheoremQA", "acfc9686aa9b49f3c8f189364a9a9ee9c53da039")
OMNI = ("KbsdJames/Omni-MATH", "b38135eb3f9c4f7b2c44ac1a470c334aa3ddd41c")
TORA = ("microsoft/ToRA", "aeb21126d28347f595d87f2822cb92bfe32f00e8")
GSM = ("openai/grade-school-math", "3ab487330c1f3c28650d4bcd30bb51d33a14d404")

# (key, generator, benchmark, repo, commit, path, loader, extra kwargs, n to keep)
SOURCES = [
    ("mmlupro_gpt4o", "gpt-4o", "MMLU-Pro-math", MMLU, "ff991b5b7f14a383fd41da3987447ab6c08bf138",
     "eval_results/gpt4o/math_result.json", mmlu_pro, {"field": "response"}, 250),
    ("mmlupro_deepseek", "deepseek-chat (v2, MMLU-Pro 'deepseek' run)", "MMLU-Pro-math", MMLU,
     "eeeb46ca13acc9e60ce45a8dc2fb141ee76600ab", "eval_results/deepseek/math_result.json", mmlu_pro,
     {"field": "response"}, 150),
    ("mmlupro_gemini15pro", "gemini-1.5-pro-002", "MMLU-Pro-math", MMLU, "964a136e98ff17f81b0cd11c15c70784f6ee4378",
     "eval_results/model_outputs_gemini-1.5-pro-002_5shots.zip", mmlu_pro,
     {"field": "model_outputs", "zip_member": "model_outputs_gemini-1.5-pro-002_5shots.json"}, 150),
    ("theoremqa_internlm2math20b", "internlm2-math-20b (5-shot)", "TheoremQA", *TQA,
     "outputs/internlm2_math_20b_5shots_short.jsonl", theoremqa, {}, 150),
    ("theoremqa_mistral7b", "Mistral-7B-v0.1 (5-shot)", "TheoremQA", *TQA,
     "outputs/Mistral_7B_v0.1_5shots_mistral.jsonl", theoremqa, {}, 100),
    ("omni_internlm2plus8x22b", "internlm2-math-plus-mixtral8x22b", "Omni-MATH", *OMNI,
     "Omni-Judge_eval/examples_infile/internlm2-math-plus-mixtral8x22b_infile.jsonl", omni_infile, {}, 100),
    ("omni_llama31_70b", "Llama-3.1-70B-Instruct", "Omni-MATH", *OMNI,
     "Omni-Judge_eval/examples_infile/meta_llama_3-1_70b_infile.jsonl", omni_infile, {}, 100),
]
for gen, sub, benches in [
    ("Qwen2.5-Math-7B-Instruct", "models/Qwen2.5-Math-7B-Instruct/math_eval/",
     {"olympiadbench": 250, "minerva_math": 150, "gaokao2023en": 100}),
    ("Llama-3.1-8B-Instruct", "project/eval-cgq-new/o1_results_1205/Meta-Llama-3.1-8B-Instruct/qwen_math/",
     {"olympiadbench": 150, "minerva_math": 150, "gaokao2023en": 100}),
    ("PRIME SFT ablation (all_abla_numina_oly_orca, Qwen2.5-Math-7B base)",
     "project/eval-cgq-new/o1_results_1205/all_abla_numina_oly_orca/qwen_math/",
     {"minerva_math": 100, "gaokao2023en": 100}),
]:
    for b, n in benches.items():
        SOURCES.append((f"prime_{gen.split()[0].split('-')[0].lower()}_{gen[:12]}_{b}".replace(" ", ""), gen,
                        {"olympiadbench": "OlympiadBench", "minerva_math": "Minerva-Math",
                         "gaokao2023en": "Gaokao2023en"}[b], "PRIME-RL/PRIME", PRIME_C,
                        PRIME_P + sub + b + PRIME_F, qwen_harness, {"gold_from": (PRIME_DATA_C, b)}, n))
SOURCES += [
    ("tora70b_gsm8k", "ToRA-70B (tool-integrated)", "GSM8K", *TORA,
     "src/outputs/llm-agents/tora-70b-v1.0/gsm8k/test_tora_-1_seed0_t0.0_s0_e1319.jsonl", qwen_harness, {}, 100),
    ("toracode34b_gsm8k", "ToRA-Code-34B (tool-integrated)", "GSM8K", *TORA,
     "src/outputs/llm-agents/tora-code-34b-v1.0/gsm8k/test_tora_-1_seed0_t0.0_s0_e1319.jsonl", qwen_harness, {}, 100),
    ("gsm_gpt3_175b_ft", "GPT-3 175B finetuned", "GSM8K", *GSM,
     "grade_school_math/data/example_model_solutions.jsonl", gsm_gpt3, {"key": "175b_finetuning"}, 100),
    ("gsm_gpt3_175b_verif", "GPT-3 175B + verifier (best of 100)", "GSM8K", *GSM,
     "grade_school_math/data/example_model_solutions.jsonl", gsm_gpt3, {"key": "175b_verification"}, 100),
]


def build():
    out, seen = [], set()
    for key, gen, bench, repo, commit, path, loader, kw, n in SOURCES:
        rows = [r for r in loader(repo, commit, path, **kw) if isinstance(r[2], str) and r[2].strip()]
        idx = sorted(random.Random(0).sample(range(len(rows)), min(n, len(rows))))
        for i in idx:
            prob, gold, resp = rows[i]
            if (gold, resp) in seen:
                continue
            seen.add((gold, resp))
            out.append(dict(id=f"{key}-{i}", source=f"{repo}@{commit}:{path}", generator=gen, benchmark=bench,
                            problem=prob or "", gold=str(gold).strip(), response=resp, truncated=False))
        print(f"{key:60s} {len(idx):4d} of {len(rows)}")
    with open(sys.argv[1] if len(sys.argv) > 1 else "eval_runs_pool.jsonl", "w") as f:
        for r in out:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print("pool", len(out))


if __name__ == "__main__":
    build()
