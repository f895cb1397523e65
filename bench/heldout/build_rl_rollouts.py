"""Build the rl_rollouts pool (bench/heldout/README.md) from its public GitHub sources.

Sources (git clones under MIRRORS/<owner>+<name>/repo, read with `git show COMMIT:path`):
  A hkust-nlp/simpleRL-reason  examples/simplelr_math_eval/data/eval_rm_maj_example/math_cot_100.jsonl
      100 MATH problems x 8 sampled completions ('code' list) of a Qwen2.5-Math-Instruct model
      (GRPO-trained by Qwen; system prompt "Please reason step by step, and put your final answer
      within \\boxed{}."); gold = 'gt'.
  B balakreshnan/Samples2025  AML/DeepSeekGPRO.md
      printed GRPO rollouts (willccbb grpo_demo format) of Qwen2.5-1.5B-Instruct during TRL GRPO
      training on GSM8K, <reasoning>/<answer> template, max_completion_length=256.
  C Yeok-c/grpo-gsm8k-demo  reasoning_trace.md
      printed GRPO rollouts (same format) of unsloth/DeepScaleR-1.5B-Preview (R1-distill + RL)
      during continued GRPO on GSM8K, <think> ... <answer> template.

Usage: MIRRORS=DIR python bench/heldout/build_rl_rollouts.py OUT.jsonl   (then bench/bench_reward_heldout.py
--set rl_rollouts --pool OUT.jsonl)
"""
import json
import os
import re
import subprocess
import sys

MIRROR = os.environ.get("MIRRORS", "mirrors")
OUT = sys.argv[1] if len(sys.argv) > 1 else "rl_rollouts_pool.jsonl"

SOURCES = {
    "A": ("hkust-nlp/simpleRL-reason", "cf1c785",
          "examples/simplelr_math_eval/data/eval_rm_maj_example/math_cot_100.jsonl"),
    "B": ("balakreshnan/Samples2025", "f74b7b2bfb35f561cc1a7e6618eb502478a7c788", "AML/DeepSeekGPRO.md"),
    "C": ("Yeok-c/grpo-gsm8k-demo", "95dadeeb47811aae4548ec16076af17387784328", "reasoning_trace.md"),
}


def git_show(repo, commit, path):
    d = os.path.join(MIRROR, repo.replace("/", "+"), "repo")
    full = subprocess.check_output(["git", "-C", d, "rev-parse", commit]).decode().strip()
    text = subprocess.check_output(["git", "-C", d, "show", f"{full}:{path}"]).decode("utf-8")
    return full, text


def template_of(resp):
    if "<answer>" in resp:
        return "answer_tag"
    if "\\boxed" in resp:
        return "boxed"
    if re.search(r"(?im)^\s*\**(final )?answer\**\s*[:：]", resp):
        return "answer_line"
    return "other"


def looks_cut(resp):
    """Visible mid-sentence stop: no closing answer construct and the text does not end like a finished
    sentence/formula."""
    t = resp.rstrip()
    if not t:
        return False
    if "</answer>" in t[-40:] or re.search(r"\\boxed\{[^{}]*\}[^\n]{0,80}$", t):
        return False
    return not re.search(r"[.!?)\]}$>*`\"']$", t)


def from_grpo_log(key, text, generator):
    repo, commit, path = SOURCES[key]
    blocks = text.split("-------------------- Question:\n")[1:]
    rows = []
    for bi, b in enumerate(blocks):
        m = re.match(r"(.*?) \nAnswer:\n(.*?) \nResponse:\n(.*?) \nExtracted:\n", b, re.S)
        if not m:
            continue
        q, gold, resp = m.group(1), m.group(2).strip(), m.group(3)
        rows.append(dict(src_key=key, idx=bi, problem=q, gold=gold, response=resp))
    return rows


# hand-checked: ends with a finished answer although the last char is a digit
NOT_CUT = {"B-1"}


def main():
    pool = []
    # A
    repo, commit, path = SOURCES["A"]
    full, text = git_show(repo, commit, path)
    SOURCES["A"] = (repo, full, path)
    for line in text.splitlines():
        r = json.loads(line)
        for k, resp in enumerate(r["code"]):
            pool.append(dict(id=f"A-{r['idx']}-{k}", source=f"{repo}@{full}:{path}",
                             generator="Qwen2.5-Math-Instruct (GRPO-trained; Qwen2.5-Math eval example, sampled x8)",
                             benchmark="MATH", problem=r["question"], gold=str(r["gt"]), response=resp))
    # B, C
    for key, gen in (("B", "Qwen2.5-1.5B-Instruct during TRL GRPO on GSM8K (max_completion_length=256)"),
                     ("C", "DeepScaleR-1.5B-Preview during continued GRPO (unsloth) on GSM8K")):
        repo, commit, path = SOURCES[key]
        full, text = git_show(repo, commit, path)
        for r in from_grpo_log(key, text, gen):
            pool.append(dict(id=f"{key}-{r['idx']}", source=f"{repo}@{full}:{path}", generator=gen,
                             benchmark="GSM8K-train", problem=r["problem"], gold=r["gold"],
                             response=r["response"]))
    for p in pool:
        p["template"] = template_of(p["response"])
        cut = looks_cut(p["response"]) and p["id"] not in NOT_CUT
        junk = cut and not p["id"].startswith("B-")
        if p["id"].startswith("B-"):
            # source config: max_completion_length=256 tokens; a visibly unfinished reply hit it
            p["truncated"] = cut
            p["truncated_how"] = "visible mid-sentence stop; source GRPOConfig max_completion_length=256" if cut else ""
        else:
            p["truncated"] = cut
            p["truncated_how"] = ("degenerate junk tail running on with no conclusion (looks like it ran to the "
                                  "length limit; no source length flag)") if junk else ""
    with open(OUT, "w") as f:
        for p in pool:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")
    from collections import Counter
    print(len(pool), Counter(p["id"][0] for p in pool), Counter(p["template"] for p in pool),
          Counter(p["truncated"] for p in pool))


if __name__ == "__main__":
    main()
