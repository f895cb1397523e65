"""reward.py's verify mode against its choices (module docstring): hand-labelled cases for every
rule, the MATH-500/AIME/AMC golds, adversarial inputs, the worker pool (verifier/pool.py), and
DAPO's overlong shaping. The dapo mode is tested in tests/test_reward_dapo.py."""

import builtins
import io
import json
import os
import sys
import time
import tokenize
from pathlib import Path

import pytest

import reward
from reward import RewardResult, extract_answer, overlong_penalty, score, score_batch
from verifier import pool
from verifier.normalize import normalize
from verifier.verdict import integer_literal

sys.path.insert(0, str(Path(__file__).parent))
from reward_cases import CASES, box  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# ----------------------------------------------------------------------------------------------
# The hand-labelled case table (tests/reward_cases.py)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rule,gold,response,expected", CASES,
                         ids=[f"{i:03d}-{c[0]}" for i, c in enumerate(CASES)])
def test_case_table(rule, gold, response, expected):
    result = score(response, gold)
    assert result.acc is expected
    assert result.score == (1.0 if expected else -1.0)
    assert result.timeout is False


def test_case_table_covers_every_rule():
    rules = {c[0] for c in CASES}
    assert len(CASES) >= 200
    for prefix in ("1-box", "1-answer", "1-last", "1-tail", "2-int", "3-num", "3-rad", "3-sym",
                   "3-eq", "3-tuple", "3-set", "3-hedge", "3-interval", "3-matrix", "3-text",
                   "3-base"):
        assert prefix in rules
    assert {True, False} <= {c[3] for c in CASES}


def test_score_batch_equals_score_on_the_case_table():
    """The fast path (integer/text verdicts in the caller) and the worker path must agree with
    the plain in-process score()."""
    responses, golds = [c[2] for c in CASES], [c[1] for c in CASES]
    batch = score_batch(responses, golds, timeout_s=10.0, workers=2)
    plain = [score(r, g) for r, g in zip(responses, golds)]
    assert batch == plain


# ----------------------------------------------------------------------------------------------
# Choice 1: extraction
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("response,pred", [
    (r"so $\boxed{\frac{1}{2}}$.", r"\frac{1}{2}"),
    (r"\fbox{42}", "42"),
    (r"$\boxed 7$", "7"),
    (r"\boxed{\{1, 2\}}", r"\{1, 2\}"),
    (r"\boxed{a} then \boxed{b}", "b"),
    ("Answer: 12.\n", "12"),
    ("**Answer:** $3$", "$3$"),
    ("Answer: 5\nthen \\boxed{6}", "6"),
    ("\\boxed{6}\nAnswer: 5", "5"),
    (r"\boxed{6} and \boxed{7", None),  # unclosed final box: no answer
    ("It is 42.", None),
    (r"\boxed{}", None),
    (r"\boxedfoo{4}", None),
])
def test_extract_answer(response, pred):
    assert extract_answer(response) == pred


def test_only_the_tail_is_scanned():
    assert extract_answer(r"\boxed{1}" + " " * reward.TAIL_CHARS) is None
    assert extract_answer(" " * 10**6 + r"\boxed{1}") == "1"


@pytest.mark.parametrize("text,expected", [
    ("42", "42"), ("-42", "-42"), ("+42", "42"), ("073", "73"), ("0", "0"), ("-0", "0"),
    ("27.0", "27"), ("1,000", "1000"), ("x = 5", "5"), ("(42)", "42"), ("42 ways", "42"),
    ("42.5", None), ("10^3", None), ("1,00", None), ("41, 42", None), ("42 or more", None),
    ("2x", None), ("", None),
])
def test_integer_literal(text, expected):
    assert integer_literal(normalize(text)) == expected


# ----------------------------------------------------------------------------------------------
# The evaluation sets' golds: each is correct against itself and incorrect against a perturbation
# ----------------------------------------------------------------------------------------------


def _data_dir() -> Path:
    return REPO / "data"  # the bundled benchmarks (data/README.md)


def _perturb(gold: str) -> str:
    """Change the last digit (d -> d+1 mod 10); without digits, the last letter outside a
    command."""
    for i in range(len(gold) - 1, -1, -1):
        if gold[i].isdigit():
            return gold[:i] + str((int(gold[i]) + 1) % 10) + gold[i + 1:]
    return gold.replace("Evelyn", "Briana").replace("(C)", "(D)").replace("(B)", "(C)").replace(
        "(E)", "(A)").replace("Navin", "Luka").replace("east", "west").replace(
        "ellipse", "circle").replace("even", "odd").replace(r"\cot x", r"\tan x").replace(
        "p - q", "q - p").replace(r"\pi", r"2\pi")


def test_benchmark_golds_self_and_perturbed():
    data = _data_dir()
    golds = [json.loads(line)["answer"] for name in ("math500", "aime24", "aime25", "amc23")
             for line in (data / f"{name}.jsonl").open()]
    assert len(golds) == 600
    wrong_self = [g for g in golds if not score(f"Thus $\\boxed{{{g}}}$.", g).acc]
    assert wrong_self == []
    # units are formatting, so perturbing 15\mbox{ cm}^2 to ^3 would not change the answer
    perturbable = [g for g in golds if r"\mbox" not in g]
    wrong_perturbed = [g for g in perturbable if score(box(_perturb(g)), g).acc]
    assert wrong_perturbed == []


def test_integer_golds_accept_model_formats():
    data = _data_dir()
    for name in ("aime24", "amc23"):
        for line in (data / f"{name}.jsonl").open():
            row = json.loads(line)
            assert score(box(row["answer_normalized"]), row["answer"]).acc
            assert score(f"Answer: {int(row['answer_normalized']):,}", row["answer"]).acc


# ----------------------------------------------------------------------------------------------
# Adversarial inputs: bounded time, no crash, nothing executed
# ----------------------------------------------------------------------------------------------

MARKER = "/tmp/reward_test_pwned"
_NESTED = "{" * 10_000 + "1" + "}" * 10_000
ADVERSARIAL = [
    ("power-tower", r"\boxed{9^{9^{9^{9}}}}", "1"),
    ("power-tower-sympy", r"\boxed{9^{9^{9^{9}}}}", r"\frac12"),
    ("power-tower-2", r"\boxed{2^{2^{2^{2^{2^{2}}}}}}", r"\sqrt2"),
    ("power-tower-symbol", r"\boxed{x^{10^{10}}}", "x^2"),
    ("tiny-power", r"\boxed{10^{-10^{10}}}", r"\pi"),
    ("nested-powers", r"\boxed{((((x^{200})^{200})^{200})^{200})^{200}}", "x^2"),
    ("nested-powers-int", r"\boxed{((((2^{200})^{200})^{200})^{200})^{200}}", r"\frac12"),
    ("exp-tower", r"\boxed{e^{e^{e^{e^{e^{10}}}}}}", r"\pi"),
    ("factorial", r"\boxed{1000000!}", "1"),
    ("factorial-sympy", r"\boxed{1000000!}", r"\frac12"),
    ("factorial-of-power", r"\boxed{(10^{100})!}", r"\frac12"),
    ("factorial-of-factorial", r"\boxed{(1000!)!}", r"\frac12"),
    ("binomial", r"\boxed{\binom{10^{10}}{5000000}}", r"\frac12"),
    ("10k-nested-braces", r"\boxed{" + _NESTED + "}", "1"),
    ("10k-nested-braces-sympy", r"\boxed{" + _NESTED + "}", r"\frac12"),
    ("3k-nested-braces", r"\boxed{" + "{" * 3000 + "1" + "}" * 3000 + "}", r"\frac12"),
    ("3k-nested-parens", r"\boxed{" + "(" * 3000 + "1" + ")" * 3000 + "}", r"\frac12"),
    ("nested-fracs", r"\boxed{" + r"\frac{1}{" * 500 + "2" + "}" * 500 + "}", r"\frac12"),
    ("nested-sqrts", r"\boxed{" + r"\sqrt{" * 1000 + "2" + "}" * 1000 + "}", r"\sqrt2"),
    ("5k-minus-signs", r"\boxed{" + "-" * 5000 + "1}", r"\frac12"),
    ("long-sum", r"\boxed{" + "1+" * 3000 + "1}", r"\frac12"),
    ("many-pm", r"\boxed{" + r"1\pm" * 200 + "1}", r"\frac12"),
    ("1MB-letters", "a" * 2**20, "1"),
    ("1MB-digits", "1" * 2**20, "1"),
    ("1MB-spaces", " " * 2**20, r"\frac12"),
    ("1MB-dollars", "$" * 2**20, r"\frac12"),
    ("1MB-answer-markers", "Answer:" * 150_000, "1"),
    ("1MB-open-text", "\\text{" * 170_000, "1"),
    ("100k-boxes", r"\boxed{1}" * 100_000, "2"),
    ("100k-boxes-sympy", r"\boxed{1}" * 100_000, r"\frac12"),
    ("100k-bare-boxed", "\\boxed" * 100_000, "1"),
    ("million-digit-integer", r"\boxed{" + "9" * 10**6 + "}", "8"),
    ("7k-digit-integer", "9" * 10**6 + r" \boxed{" + "9" * 7000 + "}", r"\frac12"),
    ("5k-digit-integer-int-gold", r"\boxed{" + "9" * 5000 + "}", "8" * 5000),
    ("sin-of-huge", r"\boxed{" + "+".join(rf"\sin(10^{{4000}}+{k})" for k in range(40)) + "}",
     r"\frac12"),
    ("sqrt-of-400-digits", r"\boxed{\sqrt{" + "7" * 399 + "}}", r"\sqrt{" + "7" * 399 + "1}"),
    ("inject-os-system", rf"\boxed{{__import__('os').system('touch {MARKER}')}}", r"\frac12"),
    ("inject-os-system-int", rf"\boxed{{__import__('os').system('touch {MARKER}')}}", "1"),
    ("inject-answer-line", f"Answer: __import__(\"os\").system(\"touch {MARKER}\")", "x^2"),
    ("inject-exec", rf"\boxed{{exec(\"open('{MARKER}','w').write('x')\")}}", r"\frac12"),
    ("inject-eval-compile", rf"\boxed{{eval(compile('open(\"{MARKER}\",\"w\")','a','exec'))}}",
     "x"),
    ("inject-lambda", rf"\boxed{{(lambda: open('{MARKER}', 'w'))()}}", r"\frac12"),
    ("inject-dunder", r"\boxed{Symbol('x').__class__.__mro__[-1].__subclasses__()}", "x"),
    ("inject-in-text", rf"\boxed{{\text{{__import__('os').system('touch {MARKER}')}}}}",
     r"\text{yes}"),
    ("nul-bytes", "\x00" * 100_000 + "\\boxed{\x00}", r"\frac12"),
    ("lone-surrogate", "\\boxed{\ud800}", r"\frac12"),
    ("lone-surrogate-after", "\\boxed{41}\udfff", "42"),
    ("surrogate-pair-halves", "\ud83d\\boxed{\ud83d\ude00 1/2}", r"\frac12"),
    ("rtl-override", "\\boxed{\u202e24}", "42"),  # displays as 42, is 24
    ("rtl-marks", "\u200f\u202e\\boxed{\u2066\\frac{1}{3}\u2069}", r"\frac12"),
    ("prose-copula-chain", "Answer: " + "it is 1 " * 1500, "1"),
    ("unclosed-dollars-line", "Answer: the value is " + "$" * 8000, "1"),
    ("1k-joined-boxes", r"\boxed{1} and " * 1000, "2"),
    ("long-name", r"\boxed{" + "AB" * 900 + "!=4}", "4"),
    ("many-named-groups", r"\boxed{" + "p=1,q=2;" * 200 + "}", r"(1, 2)"),
    ("unspaced-or-list", r"\boxed{" + "1or" * 600 + "}", "1"),
    ("nested-sums", r"\boxed{" + r"\sum_{k=\sum_{j=0}^{1} j}^{n}" * 15 + "k}", r"\sum_{k=0}^{n} k"),
    ("json-answer-flood", '"answer": "' * 5000, "1"),
    ("closing-sentence-flood", "x = 1 = " * 3000 + "2.", "2"),
    ("closing-remark-flood", "The total is 2. " + "I think that's the answer. " * 3000, "2"),
    ("left-bracket-nest", r"\boxed{" + r"\left[" * 500 + "1" + r"\right]" * 500 + "}", "2"),
    ("scientific-huge-exponent", r"\boxed{1e999}", r"\frac12"),
    ("true-chain-of-400-sides", r"\boxed{" + "=".join(["2+2"] * 400) + "=4}", r"\frac12"),
]


@pytest.fixture(autouse=False)
def no_marker():
    if os.path.exists(MARKER):
        os.remove(MARKER)
    yield
    assert not os.path.exists(MARKER), "an injected string was executed"


@pytest.mark.parametrize("name,response,gold", ADVERSARIAL, ids=[a[0] for a in ADVERSARIAL])
def test_adversarial_score_is_fast_and_incorrect(name, response, gold, no_marker):
    start = time.monotonic()
    result = score(response, gold)
    assert time.monotonic() - start < 2.0
    assert isinstance(result, RewardResult)
    assert result.acc is False  # every adversarial case above is a wrong answer


def test_adversarial_score_batch_is_bounded(no_marker):
    """Each case alone and all of them in one batch, through the worker pool."""
    score_batch([box("k+k")], ["2k"], workers=2)  # start the pool outside the timing
    for name, response, gold in ADVERSARIAL:
        start = time.monotonic()
        assert score_batch([response], [gold], workers=2)[0].acc is False, name
        assert time.monotonic() - start < 2.0, name
    start = time.monotonic()
    results = score_batch([a[1] for a in ADVERSARIAL], [a[2] for a in ADVERSARIAL], workers=2)
    assert time.monotonic() - start < 2.0 * len(ADVERSARIAL) / 2
    assert [r.acc for r in results] == [False] * len(ADVERSARIAL)


def test_no_eval_exec_sympify_in_the_verifier_source():
    """Choice 4, statically: the names never appear in code (docstrings and comments aside)."""
    banned = {"eval", "exec", "sympify", "parse_expr", "lambdify", "__import__", "parse_latex",
              "latex2sympy", "pickle", "marshal"}
    for path in [REPO / "reward.py", *sorted((REPO / "verifier").glob("*.py"))]:
        names = {tok.string for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
                 if tok.type == tokenize.NAME}
        assert names & banned == set(), path.name


def test_no_eval_or_exec_at_run_time(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("eval/exec called while scoring")

    for _rule, gold, response, _expected in CASES[:: 3]:
        score(response, gold)  # a first pass: sympy's lazy imports run exec once, which is import, not scoring
    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    for _rule, gold, response, expected in CASES[:: 3]:
        assert score(response, gold).acc is expected


def test_numeric_golds_are_read_as_text():
    assert score(box("27"), 27.0).acc and score(box("42"), 42).acc  # type: ignore[arg-type]
    assert [r.acc for r in score_batch([box("27"), box("0.5")], [27.0, 0.5])] == [True, True]


def test_score_never_raises_on_odd_input():
    for response in (None, 42, b"\\boxed{1}", ["x"]):
        assert score(response, "1") == RewardResult(False, -1.0, None)  # type: ignore[arg-type]
    assert score(r"\boxed{1}", None).acc is False  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------------------
# score_batch: the worker pool
# ----------------------------------------------------------------------------------------------


def test_score_batch_kills_overrunning_workers_and_recovers():
    """A sympy check that takes ~0.2 s against a 20 ms bound: its worker is killed and
    replaced, the item scores -1 with timeout=True, the integer fast path in the caller is
    unaffected, and the pool works again afterwards."""
    slow = box("+".join(rf"\tan(\sin(10^{{4000}}+{k}))" for k in range(40)))
    responses, golds = [slow, box("42"), box("2(k+1)")], [r"\frac12", "42", "2k+2"]
    score_batch([box("k+k")], ["2k"], workers=2)  # a worker-path pair: starts the pool
    old_pids = {w.proc.pid for w in pool._POOL.workers}
    timed = score_batch(responses, golds, timeout_s=0.02, workers=2)
    assert timed[0] == RewardResult(False, -1.0, None, timeout=True)
    assert timed[1] == RewardResult(True, 1.0, "42")
    new_pids = {w.proc.pid for w in pool._POOL.workers}
    assert len(new_pids) == 2 and new_pids != old_pids
    assert all(w.proc.poll() is None for w in pool._POOL.workers)
    again = score_batch(responses[1:], golds[1:], workers=2)
    assert [(r.acc, r.timeout) for r in again] == [(True, False), (True, False)]


_FIRST_USE_IMPORTS = """
import importlib, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
from verifier import pool
for name in pool.PRELOAD:
    importlib.import_module(name)
importlib.import_module(pool.CHECK[0])
from reward import extract_answer
from reward_cases import CASES
check = getattr(sys.modules[pool.CHECK[0]], pool.CHECK[1])
before = set(sys.modules)
for _, gold, response, _ in CASES:
    pred = extract_answer(response)
    if pred is not None:
        check(pred, gold)
print(sorted(set(sys.modules) - before))
"""


def test_a_worker_imports_everything_before_it_reports_ready():
    """No job pays an import inside its time bound: after a worker's PRELOAD, checking the whole
    case table imports nothing more (sympy's Add imports sympy.tensor.tensor on its first sum,
    22-40 ms, which was once a job's worst latency)."""
    import subprocess

    out = subprocess.run([sys.executable, "-c", _FIRST_USE_IMPORTS, str(REPO)], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    assert out.strip() == "[]", f"modules first imported by a job: {out}"


_STAND_IN_WORKER = """
import sys, time
print("ready", flush=True)
for line in sys.stdin:
    if "slow" in line:
        time.sleep(60)
    if "crash" in line:
        sys.exit(1)
    print("1", flush=True)
"""


def test_pool_timeout_crash_and_replacement_with_a_stand_in_worker():
    workers = pool.Pool(2, argv=[sys.executable, "-c", _STAND_IN_WORKER])
    try:
        jobs = {0: ("slow", "g"), 1: ("ok", "g"), 2: ("crash", "g"), 3: ("ok", "g")}
        start = time.monotonic()
        out = workers.run(jobs, timeout_s=0.5)
        assert time.monotonic() - start < 5.0
        assert out == {0: None, 1: True, 2: None, 3: True}
        assert len(workers.workers) == 2
        assert all(w.proc.poll() is None for w in workers.workers)  # replacements are alive
        assert workers.run({7: ("ok", "g")}, timeout_s=5.0) == {7: True}
    finally:
        workers.close()


def test_workers_are_capped_in_memory():
    score_batch([box("k+k")], ["2k"], workers=2)
    for w in pool._POOL.workers:
        limits = Path(f"/proc/{w.proc.pid}/limits")
        if not limits.exists():
            pytest.skip("no /proc on this system")
        line = next(ln for ln in limits.read_text().splitlines() if ln.startswith("Max address space"))
        assert line.split()[3] == str(pool.WORKER_MEMORY_BYTES)


def test_a_forked_child_gets_its_own_pool_and_leaves_the_parents_alone():
    score_batch([box("k+k")], ["2k"], workers=2)
    parents = pool._POOL
    parents.pid = -1  # as seen from a forked child: the pool belongs to another process
    try:
        assert score_batch([box("k+k")], ["2k"], workers=2)[0].acc
        assert pool._POOL is not parents
        assert all(w.proc.poll() is None for w in parents.workers)  # not killed by the child
    finally:
        parents.close()


def test_score_batch_validates_lengths():
    with pytest.raises(ValueError, match="one ground truth per response"):
        score_batch(["a", "b"], ["1"])


def test_score_batch_on_empty_and_fast_only_batches_starts_no_pool(monkeypatch):
    monkeypatch.setattr(pool, "Pool", None)  # any attempt to build a pool would fail
    assert score_batch([], []) == []
    results = score_batch([box("073"), "no answer", box(r"\text{(C)}")], ["73", "1", "(C)"])
    assert [r.acc for r in results] == [True, False, True]


# ----------------------------------------------------------------------------------------------
# Overlong shaping (DAPO paper section 3.4), hand-computed
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("length,factor,expected", [
    (0, 1.0, 0.0),
    (16384, 1.0, 0.0),  # expected length = 20480 - 4096
    (17408, 1.0, -0.25),  # 1024 into the buffer: -1024/4096
    (18432, 1.0, -0.5),
    (20480, 1.0, -1.0),
    (20480, 0.5, -0.5),
    (30000, 1.0, -1.0),  # past the maximum: clipped (reward.overlong_penalty)
])
def test_overlong_penalty(length, factor, expected):
    assert overlong_penalty(length, 20480, 4096, factor) == pytest.approx(expected)


def test_overlong_penalty_rejects_a_bad_buffer():
    with pytest.raises(ValueError, match="buffer_len"):
        overlong_penalty(100, 20480, 0, 1.0)
