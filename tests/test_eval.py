"""eval.py, infra/evalsets.py and scripts/plot_runs.py: the pass@k estimator by hand, sharding, the
gold formats of the bundled benchmarks, settings from the config's `eval` section under the flags,
end-to-end runs on the tiny model (sample, rescore, evaluate()), bad input, and the comparison
plot."""

import doctest
import json
import math
import os
import random
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

import config
import eval as ev
import reward
import rollout
from infra import evalsets as bm
from infra import plots
from test_vllm_rollout import needs_vllm

REPO = Path(__file__).resolve().parents[1]
FAST = ["--config", "tiny_qae.yaml", "--n", "4", "--max-tokens", "16", "--limit", "2"]


# ----------------------------------------------------------------------------------------------
# pass@k, by hand
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n, c, k, expected", [
    (4, 1, 2, 1 - 3 / 6),  # 1 - C(3,2)/C(4,2) = 1 - 3/6 = 0.5
    (5, 2, 2, 1 - 3 / 10),  # 1 - C(3,2)/C(5,2) = 0.7
    (5, 2, 3, 1 - 1 / 10),  # 1 - C(3,3)/C(5,3) = 0.9
    (32, 1, 16, 1 - 16 / 32),  # 1 - C(31,16)/C(32,16) = 1 - (32-16)/32 = 0.5
    (10, 3, 1, 3 / 10),  # pass@1 = c/n
    (8, 0, 4, 0.0),  # c = 0: never solved
    (8, 8, 4, 1.0),  # c = n: always solved
    (8, 5, 4, 1.0),  # n - c = 3 < k: every draw of 4 holds a correct one
])
def test_pass_at_k_by_hand(n, c, k, expected):
    assert bm.pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_binomials_and_stays_finite_at_large_n():
    for n in range(1, 13):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert bm.pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)
    big = 1 - Fraction(math.comb(1997, 1000), math.comb(2000, 1000))  # exact; C(2000, 1000) ~ 1e600 overflows a float
    assert bm.pass_at_k(2000, 3, 1000) == pytest.approx(float(big), abs=1e-12)


@pytest.mark.parametrize("n, c, k", [(4, 1, 5), (4, 1, 0), (4, 5, 2), (4, -1, 2)])
def test_pass_at_k_rejects_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        bm.pass_at_k(n, c, k)


def test_summary_of_hand_made_verdicts():
    # problem 0: 1 of 4 correct; problem 1: 4 of 4 correct; lengths 1..8
    acc = [True, False, False, False, True, True, True, True]
    records = [{"problem_index": i // 4, "problem_id": f"p{i // 4}", "sample": i % 4, "answer": "1", "acc": a,
                "len": i + 1, "truncated": i == 0, "timeout": False, "pred": "1" if a else None}
               for i, a in enumerate(acc)]
    metrics, problems = bm.summarize(records)
    assert [p["correct"] for p in problems] == [1, 4]
    assert metrics["pass@1"] == pytest.approx((1 / 4 + 1) / 2)  # mean accuracy, 5/8
    assert metrics["pass@2"] == pytest.approx((0.5 + 1) / 2)
    assert metrics["pass@4"] == 1.0
    assert metrics["len_mean"] == 4.5 and metrics["truncated_frac"] == 1 / 8 and metrics["n"] == 4
    with pytest.raises(bm.EvalError, match="--k 8"):
        bm.summarize(records, ks=[8])


def test_docstring_examples():
    assert doctest.testmod(ev).failed == 0 and doctest.testmod(bm).failed == 0
    assert ev.pass_at_k is bm.pass_at_k and ev.EvalError is bm.EvalError  # still importable from eval


# ----------------------------------------------------------------------------------------------
# Sharding over processes
# ----------------------------------------------------------------------------------------------


class CountingEngine:
    """A stand-in rollout engine: response j of call-prompt i is [seed + i*n + j, EOS] (vLLM's seeding)."""

    def __init__(self):
        self.cfg = config.RolloutConfig(backend="hf", max_response_len=8)
        self.eos_ids = [0]

    def sample(self, prompt_ids, n, seed):
        return [[seed + i * n + j, 0] for i in range(len(prompt_ids)) for j in range(n)], {}


class Digits:
    def batch_decode(self, rows, skip_special_tokens=True):
        return [f"Answer: {row[0]}" for row in rows]


@pytest.mark.parametrize("num, world", [(7, 1), (7, 3), (2, 4), (8, 4)])
def test_shards_cover_every_problem_once_with_equal_call_counts(num, world):
    shards = [ev.shard(num, rank, world) for rank in range(world)]
    assert len({len(indices) for indices, _ in shards}) == 1  # the same number of generate calls everywhere
    real = [i for indices, k in shards for i in indices[:k]]
    assert real == list(range(num))


@pytest.mark.parametrize("world, batch_size", [(3, 1), (2, 2), (4, 3)])
def test_sharded_sampling_equals_one_process(world, batch_size):
    problems = [bm.Problem(problem=f"q{i}", answer=str(i), prompt_ids=[1, 2], id=f"p{i}") for i in range(7)]
    single = ev.sample_shard(CountingEngine(), Digits(), problems, *ev.shard(7, 0, 1), n=3, seed=10, batch_size=4,
                             progress=False)
    gathered = []
    for rank in reversed(range(world)):  # gather order must not matter
        gathered += ev.sample_shard(CountingEngine(), Digits(), problems, *ev.shard(7, rank, world), n=3, seed=10,
                                    batch_size=batch_size, progress=False)
    assert ev.merge_shards(gathered, 7) == single
    # seed + i*n + j
    assert [r["response"] for r in single[:4]] == ["Answer: 10", "Answer: 11", "Answer: 12", "Answer: 13"]
    with pytest.raises(RuntimeError, match="expected 0..7"):
        ev.merge_shards(single, 8)


def test_sampling_settings_are_restored():
    engine = CountingEngine()
    before = engine.cfg
    with ev.sampling_settings(engine, temperature=0.7, top_p=0.9, max_tokens=None) as cfg:
        assert (cfg.temperature, cfg.top_p, cfg.max_response_len) == (0.7, 0.9, 8)
    assert engine.cfg is before


# ----------------------------------------------------------------------------------------------
# The bundled benchmarks' gold formats, used as the files give them (infra/evalsets.py)
# ----------------------------------------------------------------------------------------------


def test_contest_golds_with_leading_zeros_and_floats_are_judged_as_integers():
    rows = [json.loads(line) for name in ("aime24", "aime25", "amc23")
            for line in (REPO / "data" / f"{name}.jsonl").open()]
    assert any(r["answer"].startswith("0") for r in rows) and any(r["answer"].endswith(".0") for r in rows)
    golds = [bm.read_benchmark(name) for name in ("aime24", "aime25", "amc23")]
    assert [g["answer"] for gs in golds for g in gs] == [r["answer"] for r in rows]  # used as given
    right = reward.score_batch([f"Answer: {r['answer_normalized']}" for r in rows], [r["answer"] for r in rows])
    wrong = reward.score_batch([f"Answer: {int(r['answer_normalized']) + 1}" for r in rows],
                               [r["answer"] for r in rows])
    assert all(x.acc for x in right) and not any(x.acc for x in wrong)


def test_math500_golds_match_themselves():
    rows = bm.read_benchmark("math500")
    assert len(rows) == 500
    results = reward.score_batch([rf"The answer is $\boxed{{{r['answer']}}}$." for r in rows],
                                 [r["answer"] for r in rows])
    assert [r["id"] for r, x in zip(rows, results) if not x.acc] == []


# ----------------------------------------------------------------------------------------------
# End to end on the tiny model
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def easy_file(tmp_path_factory):
    """Difficulty-1 problems of tiny/test.jsonl (the warm start solves ~60%), under other column names."""
    path = tmp_path_factory.mktemp("bench") / "easy.jsonl"
    rows = [json.loads(line) for line in (REPO / "tiny" / "test.jsonl").open()]
    easy = [r for r in rows if r["difficulty"] == 1][:3]
    path.write_text("".join(json.dumps({"question": r["problem"], "solution": r["answer"], "id": r["id"]}) + "\n"
                            for r in easy))
    return path


@pytest.fixture(scope="module")
def eval_run(tmp_path_factory, easy_file):
    out = tmp_path_factory.mktemp("eval")
    ev.main([*FAST, "--benchmarks", "aime24", "aime25", "amc23", "math500", "tiny/test.jsonl", "--out", str(out)])
    ev.main([*FAST, "--benchmarks", str(easy_file), "--problem-key", "question", "--answer-key", "solution",
             "--out", str(out / "easy")])
    return out


def test_eval_writes_sane_results_and_every_generation(eval_run):
    results = json.loads((eval_run / "results.json").read_text())
    assert list(results["benchmarks"]) == ["aime24", "aime25", "amc23", "math500", "tiny/test.jsonl"]
    generations = [json.loads(line) for line in (eval_run / "generations.jsonl").open()]
    assert len(generations) == 5 * 2 * 4  # benchmarks x problems x n
    for g in generations:  # each verdict is reward.score's on the saved response
        verdict = reward.score(g["response"], g["answer"])
        assert (g["pred"], g["acc"]) == (verdict.pred, verdict.acc)
    for name, b in results["benchmarks"].items():
        m, s = b["metrics"], b["settings"]
        assert (s["temperature"], s["top_p"], s["max_tokens"], s["reward_mode"], m["n"], m["num_problems"]) == (
            0.7, 1.0, 16, "verify", 4, 2)  # scored in verify mode unless --reward-mode names another
        assert 0.0 <= m["pass@1"] <= m["pass@2"] <= m["pass@4"] <= 1.0
        mine = [g for g in generations if g["benchmark"] == name]
        assert m["pass@1"] == pytest.approx(sum(g["acc"] for g in mine) / len(mine))
        assert 1 <= m["len_mean"] <= 16 and all(g["len"] <= 16 for g in mine)
        assert [p["id"] for p in b["problems"]] == list(dict.fromkeys(g["problem_id"] for g in mine))
    assert results["benchmarks"]["aime24"]["problems"][0]["answer"] == "204"
    table = (eval_run / "results.md").read_text()
    assert "| aime24 | 2 | 4 | 0.7 | 1.0 | -1 | 16 |" in table and "pass@4 (%)" in table


def test_eval_extracts_answers_on_the_task_it_was_trained_for(eval_run):
    b = json.loads((eval_run / "easy" / "results.json").read_text())["benchmarks"]
    (bench,) = b.values()
    preds = [p for problem in bench["problems"] for p in problem["preds"]]
    assert sum(p is not None for p in preds) >= len(preds) // 2  # the warm-started model writes "Answer: ..."
    assert bench["metrics"]["pass@1"] > 0  # and is right on some easy problems
    assert [p["answer"] for p in bench["problems"]] == [json.loads(line)["answer"]
                                                        for line in (REPO / "tiny" / "test.jsonl").open()
                                                        if json.loads(line)["difficulty"] == 1][:2]  # --limit 2


def test_rescore_reproduces_the_numbers(eval_run, tmp_path):
    ev.main(["--rescore", str(eval_run / "generations.jsonl"), "--out", str(tmp_path)])
    before = json.loads((eval_run / "results.json").read_text())["benchmarks"]
    after = json.loads((tmp_path / "results.json").read_text())["benchmarks"]
    assert after == before
    assert (tmp_path / "generations.jsonl").read_text() == (eval_run / "generations.jsonl").read_text()


def test_evaluate_with_a_training_engine(tmp_path):
    from infra.model import load_policy, load_tokenizer

    cfg = config.load("tiny_qae.yaml")
    tokenizer = load_tokenizer(cfg.model.name_or_path)
    engine = rollout.make_sampler(cfg.rollout, load_policy(cfg.model, cfg.model.name_or_path), tokenizer,
                                  max_model_len=128)
    problems = ev.load_benchmark("tiny/test.jsonl", cfg.data, tokenizer, limit=3)
    assert [p.id for p in problems] == ["test-00000", "test-00001", "test-00002"] and problems[0].answer == "1052"
    kwargs = dict(n=2, seed=3, temperature=1.0, top_p=0.7, max_tokens=12)
    metrics = ev.evaluate(engine, tokenizer, problems, **kwargs)
    assert set(metrics) >= {"pass@1", "pass@2", "len_mean", "truncated_frac", "num_problems", "temperature", "top_p",
                            "max_tokens", "reward_mode"} and metrics["reward_mode"] == "verify"
    assert ((metrics["temperature"], metrics["top_p"], metrics["max_tokens"], metrics["num_problems"])
            == (1.0, 0.7, 12, 3))
    assert (engine.cfg.temperature == cfg.rollout.temperature
            and engine.cfg.max_response_len == cfg.rollout.max_response_len)
    assert ev.evaluate(engine, tokenizer, problems, **kwargs) == metrics  # seeded


@pytest.mark.slow
def test_eval_on_two_ranks_holds_the_training_collective_timeout(tmp_path, easy_file):
    """Each process group of two gloo ranks, read back from the groups (infra.launch.report_timeouts), waits
    trainer.collective_timeout_min; the problems are split over the ranks and gathered."""
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", "29614",  # parallel files
           "--multi_gpu", "--num_processes", "2", "eval.py", *FAST,
           "--benchmarks", str(easy_file), "--problem-key", "question", "--answer-key", "solution", "--out",
           str(tmp_path), "trainer.collective_timeout_min=7"]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "collective timeout: 7 min on all" in proc.stderr, proc.stderr[-3000:]
    tail = proc.stderr.rsplit("generations.jsonl", 1)[1]  # after the outputs' line: each rank closed, then nothing
    markers = ("rank 0: done", "rank 1: done")  # (two processes' lines may interleave in one pipe)
    assert all(tail.count(m) == 1 for m in markers) and not tail.replace(markers[0], "").replace(markers[1], "").strip()
    (bench,) = json.loads((tmp_path / "results.json").read_text())["benchmarks"].values()
    assert bench["metrics"]["num_problems"] == 2 and bench["metrics"]["n"] == 4


@pytest.mark.slow
@needs_vllm
def test_eval_with_vllm_reads_the_checkpoint_itself(tmp_path, easy_file):
    """The vLLM engine loads the checkpoint from disk (no weights in the evaluating process, no sync): on the
    easy problems the warm-started model is right on some, which random or dummy weights are not."""
    cmd = [sys.executable, "eval.py", *FAST, "--benchmarks", str(easy_file), "--problem-key", "question",
           "--answer-key", "solution", "--out", str(tmp_path), "rollout.backend=vllm", "rollout.enforce_eager=true"]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    (bench,) = results["benchmarks"].values()
    assert results["backend"] == "vllm" and bench["metrics"]["pass@1"] > 0


# ----------------------------------------------------------------------------------------------
# Settings: the flag, else the --sampling preset (temperature, top_p), else the config's `eval` section
# ----------------------------------------------------------------------------------------------

EVAL_SECTION = {"benchmarks": "aime24, amc23", "n": 3, "limit": 2, "temperature": 0.5, "top_p": 0.9, "max_tokens": 12}


def resolved(argv, cfg):
    run, settings = ev.resolve_args(ev.parse_args(argv), cfg)
    return run.benchmarks, run.n, run.limit, settings["temperature"], settings["top_p"], settings["max_tokens"]


def test_settings_come_from_the_config_unless_a_flag_or_preset_is_given():
    cfg = config.from_dict({"eval": EVAL_SECTION})
    assert resolved([], cfg) == (["aime24", "amc23"], 3, 2, 0.5, 0.9, 12)
    flags = ["--benchmarks", "math500", "--n", "5", "--limit", "1", "--temperature", "0.8", "--top-p", "0.6",
             "--max-tokens", "7"]
    assert resolved(flags, cfg) == (["math500"], 5, 1, 0.8, 0.6, 7)
    assert resolved(["--sampling", "verl"], cfg)[3:5] == (1.0, 0.7)  # the preset over eval.temperature / eval.top_p
    assert resolved(["--sampling", "paper"], cfg)[3:5] == (0.7, 1.0)
    assert resolved(["--sampling", "verl", "--top-p", "0.95"], cfg)[3:5] == (1.0, 0.95)  # a flag over the preset
    assert ev.resolve_args(ev.parse_args(["--reward-mode", "dapo"]), cfg)[1]["reward_mode"] == "dapo"
    defaults = config.from_dict({})  # config.py's defaults are the paper's protocol
    assert resolved([], defaults) == (["aime24", "aime25", "amc23"], 32, None, 0.7, 1.0,
                                      defaults.rollout.max_response_len)


def test_a_bad_value_names_the_flag_or_config_key_it_came_from():
    with pytest.raises(config.ConfigError, match=r"config key `eval.max_tokens` must be null or >= 1, got 0"):
        config.from_dict({"eval": {"max_tokens": 0}})  # the config itself is refused, before eval.py sees it
    with pytest.raises(ev.EvalError, match=r"--max-tokens must be >= 1, got 0"):
        ev.resolve_args(ev.parse_args(["--max-tokens", "0"]), config.from_dict({"eval": {"max_tokens": 12}}))


def test_eval_runs_with_the_config_eval_section_and_flags_override_it(tmp_path):
    cfg_file = tmp_path / "tiny_eval.yaml"
    cfg_file.write_text("base: tiny_qae.yaml\neval:\n  benchmarks: tiny/test.jsonl\n  n: 3\n  limit: 2\n"
                        "  temperature: 0.5\n  max_tokens: 8\n")

    def run(*flags):
        ev.main(["--config", str(cfg_file), *flags, "--out", str(tmp_path / "out")])
        (bench,) = json.loads((tmp_path / "out" / "results.json").read_text())["benchmarks"].values()
        generations = [json.loads(line) for line in (tmp_path / "out" / "generations.jsonl").open()]
        assert len(generations) == bench["metrics"]["n"] * bench["metrics"]["num_problems"]
        return (bench["metrics"]["n"], bench["metrics"]["num_problems"], bench["settings"]["temperature"],
                bench["settings"]["max_tokens"])

    assert run() == (3, 2, 0.5, 8)  # 3 samples of 2 problems, as the config says
    assert run("--n", "2", "--limit", "1", "--temperature", "1.0", "--max-tokens", "6") == (2, 1, 1.0, 6)


# ----------------------------------------------------------------------------------------------
# Bad input: one line, exit code 2, before anything loads (the model path does not exist)
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("extra, message", [
    (["--benchmarks", "aime23"], "unknown benchmark `aime23`"),
    (["--benchmarks", "tiny/test.jsonl", "--problem-key", "question"], "has no column `question`"),
    (["--benchmarks", "tiny/test.jsonl", "--answer-key", "gold"], "has no column `gold`"),
    (["--benchmarks", "aime24", "--n", "4", "--k", "8"], "--k 8 is impossible with --n 4"),
    (["--benchmarks", "missing.jsonl"], "benchmark file `missing.jsonl` not found"),
    (["--benchmarks", "aime24", "--top-p", "0"], "--top-p must be in (0, 1]"),
    (["--reward-mode", "strict"], "--reward-mode must be one of ['dapo', 'verify'], got 'strict'"),
])
def test_bad_input_is_one_line_and_exit_2(extra, message, capsys):
    with pytest.raises(SystemExit) as e:
        ev.main(["--config", "tiny_qae.yaml", "--model", "no/such/model", *extra])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and message in err[-1], err


def test_rescore_refuses_a_file_that_is_not_generations(tmp_path, capsys):
    bad = tmp_path / "metrics.jsonl"
    bad.write_text('{"step": 1}\n')
    with pytest.raises(SystemExit) as e:
        ev.main(["--rescore", str(bad)])
    assert e.value.code == 2 and "not a generations.jsonl row" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# scripts/plot_runs.py
# ----------------------------------------------------------------------------------------------


def test_plot_runs_writes_a_png_from_two_runs(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("plot_runs", REPO / "scripts" / "plot_runs.py")
    plot_runs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot_runs)
    assert doctest.testmod(plot_runs).failed == 0
    rng = random.Random(0)
    for run in ("qae", "dapo"):
        rows = [{"step": s, "reward/mean": rng.uniform(-1, 1), "reward/acc": rng.random(),
                 "policy/entropy": rng.random(), "adv/zero_frac": rng.random(), "response/len_mean": rng.uniform(5, 20)}
                for s in range(1, 13)]
        rows[3]["policy/entropy"] = float("nan")  # skipped, not plotted
        (tmp_path / run).mkdir()
        (tmp_path / run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "cmp.png"
    plot_runs.main([str(tmp_path / "qae"), str(tmp_path / "dapo" / "metrics.jsonl"), "--labels", "QAE", "DAPO",
                    "--smooth", "3", "--out", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    steps, values = plots.curve(plot_runs.read_metrics(tmp_path / "qae" / "metrics.jsonl"), "policy/entropy")
    assert 4 not in steps and len(values) == 11
    with pytest.raises(SystemExit) as e:
        plot_runs.main([str(tmp_path / "qae"), str(tmp_path / "nothing")])
    assert e.value.code == 2


def test_a_checkpoint_is_evaluated_with_its_runs_config_and_benchmarks_split_on_commas(tmp_path):
    model = tmp_path / "run" / "checkpoints" / "step_000002" / "model"
    model.mkdir(parents=True)
    assert ev.run_config(str(model)) is None  # no config.yaml beside the run: the defaults apply
    (tmp_path / "run" / "config.yaml").write_text("rollout:\n  backend: hf\n")
    assert ev.run_config(str(model)) == str(tmp_path / "run" / "config.yaml")
    assert ev.run_config(str(tmp_path)) is None and ev.run_config(None) is None
    args = ev.parse_args(["--model", str(model), "--benchmarks", "aime24,amc23", "math500"])
    assert args.benchmarks == ["aime24", "amc23", "math500"]
