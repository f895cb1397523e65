"""Build the odyssey_vista pool (bench/heldout/README.md) from committed model outputs of MathOdyssey
(protagolabs/odyssey-math) and MathVista (lupantech/MathVista), read with `git show COMMIT:PATH` from
clones at MIRRORS/<owner>+<name>/repo. Golds: MathOdyssey's final-odyssey-math-with-levels.jsonl, with
its LaTeX trailer, final period and surrounding `$` stripped; MathVista's `answer`. No source records a
length-limit flag, so `truncated` is False everywhere.

    MIRRORS=DIR python bench/heldout/build_odyssey_vista.py OUT.jsonl
"""
import json
import os
import random
import re
import subprocess
import sys
from collections import Counter

MIRRORS = os.environ.get("MIRRORS", "mirrors")
OD = os.path.join(MIRRORS, "protagolabs+odyssey-math", "repo")
MV = os.path.join(MIRRORS, "lupantech+MathVista", "repo")
ODH = "fe9e83df06111728e1b06ddaee0a60837c07d6c9"  # the problems and most outputs
MVH = "53d525874bdde205128e6b160b7357a88277d479"


def show(repo, commit, path):
    return subprocess.run(["git", "-C", repo, "show", f"{commit}:{path}"], capture_output=True, text=True,
                          check=True).stdout


def commit_of(repo, path):
    """The last commit that wrote path (for outputs removed before ODH)."""
    return subprocess.run(["git", "-C", repo, "log", "--all", "--format=%H", "--diff-filter=AM", "-1", "--", path],
                          capture_output=True, text=True).stdout.strip()


rows = []
rng = random.Random(0)
# --- MathOdyssey
probs = {}
for line in show(OD, ODH, "final-odyssey-math-with-levels.jsonl").splitlines():
    d = json.loads(line)
    k, v = next(iter(d.items()))
    g = v["answer"]
    g = re.sub(r"(\\\\)?\s*\\noindent\s*$", "", g.strip()).strip()
    g = re.sub(r"\\\\\s*$", "", g).strip()
    g = re.sub(r"\s*\.\s*$", "", g).strip()
    if g.count("$") == 2 and g.startswith("$") and g.endswith("$"):
        g = g[1:-1].strip()
    elif g.count("$") == 4 and g.startswith("$$") and g.endswith("$$"):
        g = g[2:-2].strip()
    probs[k] = (v["question"], g, v["label"])
gens = {
    "jsonl/gpt-4-o1-preview-solution.jsonl": "o1-preview",
    "jsonl/deepseek-v3-Instruct-solution.jsonl": "DeepSeek-V3",
    "jsonl/Qwen2.5-72B-Instruct-solution.jsonl": "Qwen2.5-72B-Instruct",
    "jsonl/gpt-4-turbo-2024-04-09.jsonl": "gpt-4-turbo-2024-04-09 (JSON answer format)",
    "jsonl/gpt-4-0125-preview-solution-new.jsonl": "gpt-4-0125-preview (JSON answer format)",
    "jsonl/gpt-3.5-turbo-0125-solution.jsonl": "gpt-3.5-turbo-0125",
    "jsonl/gpt-4-0613-solution.jsonl": "gpt-4-0613",
    "jsonl/dbrx-instruct-solution.jsonl": "DBRX-Instruct",
}
N_OD = 120
for path, gen in gens.items():
    c = ODH
    try:
        txt = show(OD, c, path)
    except subprocess.CalledProcessError:
        c = commit_of(OD, path)
        txt = show(OD, c, path)
    items = []
    for line in txt.splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        k, v = next(iter(d.items()))
        if not isinstance(v, str) or k not in probs or not v.strip():
            continue
        items.append((k, v))
    for k, v in rng.sample(items, min(N_OD, len(items))):
        q, g, lab = probs[k]
        rows.append(dict(source=f"protagolabs/odyssey-math@{c}:{path}", generator=gen, benchmark=f"MathOdyssey ({lab})",
                         problem=q, gold=g, response=v, truncated=False, src_key=k))
# --- MathVista (text-only LLMs with captions/OCR)
VISTA = [("results/gpt4/output_gpt4_2shot_solution_use_ocr.json", "gpt-4 (text-only, caption+OCR, 2-shot)", 150),
         ("results/claude/output_claude_2shot_solution.json", "claude-2 (text-only, caption, 2-shot)", 100)]
for path, gen, n in VISTA:
    d = json.loads(show(MV, MVH, path))
    items = [(k, v) for k, v in d.items()
             if isinstance(v.get("response"), str) and v["response"].strip() and str(v.get("answer", "")).strip()]
    for k, v in rng.sample(items, min(n, len(items))):
        q = v["question"]
        if v.get("question_type") == "multi_choice":
            q += "\nChoices: " + str(v.get("choices"))
        bench = f"MathVista testmini ({v.get('question_type')}, {v.get('answer_type')})"
        rows.append(dict(source=f"lupantech/MathVista@{MVH}:{path}", generator=gen, benchmark=bench,
                         problem=q, gold=str(v["answer"]), response=v["response"], truncated=False, src_key=k))
for i, r in enumerate(rows):
    r["id"] = f"c{i:04d}"
with open(sys.argv[1] if len(sys.argv) > 1 else "odyssey_vista_pool.jsonl", "w") as f:
    for r in rows:
        f.write(json.dumps(r, ensure_ascii=False) + "\n")
print(len(rows), Counter(r["generator"] for r in rows))
