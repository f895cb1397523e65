"""scripts/table2_report.py: Table 2 beside our runs, from results.json files written by eval.py's own
writer (infra/evalsets.py benchmark_result + write_outputs), so the format the report reads cannot drift
from the one eval.py writes. Every expected number below is computed by hand in its comment."""

import doctest
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from infra.evalsets import benchmark_result, write_outputs

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "table2_report.py"
spec = importlib.util.spec_from_file_location("table2_report", SCRIPT)
report = importlib.util.module_from_spec(spec)
sys.modules["table2_report"] = report  # its dataclasses look their module up there
spec.loader.exec_module(report)

PAPER = {"temperature": 0.7, "top_p": 1.0}
VERL = {"temperature": 1.0, "top_p": 0.7}


def records(counts: list[tuple[int, int]], n: int) -> list[dict]:
    """Scored records as eval.py's score_records makes them: `problems` problems with c correct of n,
    for each (problems, c) of counts."""
    cs = [c for problems, c in counts for _ in range(problems)]
    return [{"problem_index": i, "problem_id": f"p{i}", "sample": s, "answer": "7", "response": "...",
             "len": 100, "truncated": False, "pred": "7" if s < c else "8", "acc": s < c, "timeout": False}
            for i, c in enumerate(cs) for s in range(n)]


def write_eval(folder: Path, benchmarks: dict[str, tuple[list, int]], sampling: dict, ks=None) -> Path:
    """An evaluation folder as eval.py writes it: benchmark name -> ((problems, c) counts, n)."""
    settings = {"model": "runs/x/checkpoints/step_000300/model", **sampling, "top_k": -1, "max_tokens": 20480,
                "seed": 0}  # the keys eval.py's resolve_args puts in every benchmark's settings
    recs = {name: records(counts, n) for name, (counts, n) in benchmarks.items()}
    results = {"model": settings["model"], "backend": "vllm", "prompt_template": "dapo", "chat_template": "none",
               "benchmarks": {name: benchmark_result(r, ks, settings) for name, r in recs.items()}}
    write_outputs(folder, results, recs)
    return folder


# At the paper's settings, 30 / 30 / 40 problems, n = 32 (pass@16 of c = 1 of 32 is 1 - C(31,16)/C(32,16) = 0.5;
# of c >= 17 it is 1; of c = 16 it is 1 - 1/C(32,16), 1 - 1.7e-9):
# AIME25: 10 x c=32, 3 x c=1, 17 x 0 -> pass@1 (10 + 3/32)/30 = 33.65 %, pass@16 (10 + 1.5)/30 = 38.33 %
# AIME24: 14 x c=24, 4 x c=1, 12 x 0 -> pass@1 (10.5 + 0.125)/30 = 35.42 %, pass@16 (14 + 2)/30 = 53.33 %
# AMC23: 36 x c=32, 2 x c=16, 2 x 0 -> pass@1 (36 + 1)/40 = 92.50 %, pass@16 (36 + 2)/40 = 95.00 %
CLEAN = {"aime25": ([(10, 32), (3, 1), (17, 0)], 32), "aime24": ([(14, 24), (4, 1), (12, 0)], 32),
         "amc23": ([(36, 32), (2, 16), (2, 0)], 32), "math500": ([(5, 3)], 32)}


def table(out: str) -> dict[str, list[str]]:
    """--run name -> the cells of its row, for the body rows of the printed table."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("| Qwen3"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[-1].strip("`")] = cells
    return rows


def run(capsys, *argv: str) -> str:
    report.main(list(argv))
    return capsys.readouterr().out


def test_numbers_and_differences_against_hand_computed_values(tmp_path, capsys):
    folder = write_eval(tmp_path / "eval" / "step_000300", CLEAN, PAPER)
    out = run(capsys, "--run", f"clip-cov+qae={folder}", "--json", str(tmp_path / "t2.json"))
    rows = table(out)
    assert list(rows) == ["clip-higher", "clip-higher+qae", "clip-cov", "clip-cov+qae", "kl-cov", "kl-cov+qae",
                          "gspo", "gspo+qae"]
    # model, method, then per benchmark ours | paper | ours - paper; the paper's clip-cov+qae row is
    # 37.40 / 56.29, 46.04 / 73.16, 90.23 / 96.25
    assert rows["clip-cov+qae"][:11] == [
        "Qwen3-8B-Base", "+ QAE",
        "33.65 / 38.33", "37.40 / 56.29", "-3.75 / -17.96",
        "35.42 / 53.33", "46.04 / 73.16", "-10.62 / -19.83",
        "92.50 / 95.00", "90.23 / 96.25", "+2.27 / -1.25"]
    assert rows["clip-cov+qae"][11] == "T 0.7, top_p 1.0, n 32"
    # a row without a run: the paper's numbers, ours, the difference and the sampling blank
    assert rows["gspo+qae"] == ["Qwen3-30B-A3B-Base", "+ QAE", "", "32.50 / 48.01", "", "", "47.50 / 71.72", "",
                                "", "89.38 / 97.21", "", "", "`gspo+qae`"]
    assert rows["clip-higher"][3] == "32.71 / 56.66" and rows["kl-cov"][9] == "86.02 / 95.00"
    assert "warning" not in out  # the paper's settings, every problem, every benchmark: nothing to warn of
    assert f"`{folder / 'results.json'}`" in out and "max_tokens 20480" in out  # where and how it was measured

    rep = json.loads((tmp_path / "t2.json").read_text())
    cell = rep["rows"][3]["benchmarks"]["amc23"]
    assert cell["ours"] == {"pass@1": 92.5, "pass@16": 95.0} and cell["diff"] == {"pass@1": 2.27, "pass@16": -1.25}
    assert cell["settings"]["temperature"] == 0.7 and cell["settings"]["n"] == 32
    assert rep["rows"][0]["results"] is None and rep["rows"][0]["benchmarks"]["aime25"]["ours"] is None
    assert rep["source"] == "Table 2 of arXiv 2509.22611v2" and rep["warnings"] == []


def test_verl_settings_small_n_and_a_missing_benchmark_warn(tmp_path, capsys):
    # AIME25 at n = 16: 6 x c=16, 24 x 0 -> pass@1 = pass@16 = 6/30 = 20.00 %
    # AIME24 (named by its file) at n = 8: 10 x c=6, 20 x 0 -> pass@1 7.5/30 = 25.00 %, no pass@16; AMC23 absent
    folder = write_eval(tmp_path / "kl", {"aime25": ([(6, 16), (24, 0)], 16),
                                          "data/aime24.jsonl": ([(10, 6), (20, 0)], 8)}, VERL)
    clean = write_eval(tmp_path / "clean", CLEAN, PAPER)
    out = run(capsys, "--run", f"qwen3_8b_kl_cov.yaml={folder / 'results.json'}", "--run", f"gspo={clean}")
    kl = table(out)["kl-cov"]  # the paper: 33.33 / 45.86, 44.90 / 73.00
    assert kl[2:8] == ["20.00 / 20.00", "33.33 / 45.86", "-13.33 / -25.86", "25.00 / n/a", "44.90 / 73.00",
                       "-19.90 / n/a"]
    assert kl[8] == "" and kl[10] == ""  # AMC23: ours and the difference blank
    assert kl[11] == "AIME25: T 1.0, top_p 0.7, n 16; AIME24: T 1.0, top_p 0.7, n 8"
    warnings = [line for line in out.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: kl-cov (`{folder / 'results.json'}`): T 1.0 (the paper: 0.7); "
                        "top_p 0.7 (the paper: 1.0); n 16 (the paper: 32) on aime25; "
                        "n 8 < 16, so no pass@16 (pass@16 needs n >= 16) on aime24; no amc23 in results.json"]


def test_a_subset_of_problems_or_no_pass16_warns(tmp_path, capsys):
    subset = write_eval(tmp_path / "subset", {**CLEAN, "aime24": ([(4, 32), (1, 0)], 32)}, PAPER)
    no16 = write_eval(tmp_path / "no16", CLEAN, PAPER, ks=[1, 32])  # eval.py --k 1 32
    out = run(capsys, "--run", f"gspo={subset}", "--run", f"gspo+qae={no16}")
    assert f"warning: gspo (`{subset / 'results.json'}`): 5 of 30 problems on aime24\n" in out
    assert "gspo+qae" in out and "no pass@16 in results.json (eval.py --k left it out" in out
    assert table(out)["gspo+qae"][2] == "33.65 / n/a"


# Table 2 of arXiv 2509.22611v2 as the repo's spec copies it (model | method | AIME25 | AIME24 | AMC23)
SPEC_TABLE = """\
| Qwen3-8B-Base | Clip-Higher (DAPO) | 32.71 / 56.66 | 39.69 / 71.23 | 92.11 / 97.50 |
| Qwen3-8B-Base | + QAE | 34.90 / 57.92 | 48.23 / 71.63 | 92.97 / 97.50 |
| Qwen3-8B-Base | Clip-Cov | 33.02 / 52.27 | 42.40 / 68.58 | 87.42 / 96.25 |
| Qwen3-8B-Base | + QAE | 37.40 / 56.29 | 46.04 / 73.16 | 90.23 / 96.25 |
| Qwen3-8B-Base | KL-Cov | 33.33 / 45.86 | 44.90 / 73.00 | 86.02 / 95.00 |
| Qwen3-8B-Base | + QAE | 33.44 / 51.62 | 44.69 / 77.08 | 87.97 / 96.25 |
| Qwen3-30B-A3B-Base | GSPO | 31.15 / 46.59 | 43.75 / 67.91 | 90.00 / 99.39 |
| Qwen3-30B-A3B-Base | + QAE | 32.50 / 48.01 | 47.50 / 71.72 | 89.38 / 97.21 |
"""


def test_with_no_run_the_paper_columns_are_table_2(capsys):
    rows = table(run(capsys))
    printed = "".join(f"| {' | '.join(cells[:2] + cells[3:10:3])} |\n" for cells in rows.values())
    assert printed == SPEC_TABLE
    assert all(cells[2::3][:3] == ["", "", ""] and cells[4:11:3] == ["", "", ""] for cells in rows.values())


def bad_inputs(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, what the one error line must say)."""
    good = write_eval(tmp_path / "good", CLEAN, PAPER)
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken.json").write_text('{"benchmarks": {')
    (tmp_path / "other.json").write_text('{"rows": []}')
    entry = json.loads((good / "results.json").read_text())
    del entry["benchmarks"]["aime24"]["settings"]["temperature"]
    (tmp_path / "no_t.json").write_text(json.dumps(entry))
    entry["benchmarks"]["aime24"]["settings"]["temperature"] = 0.7
    entry["benchmarks"]["amc23"]["metrics"]["pass@1"] = "92.5"
    (tmp_path / "str.json").write_text(json.dumps(entry))
    nope = tmp_path / "nope.json"
    return {
        "unknown row": (["--run", f"clip={good}"], "--run: unknown row `clip`; give one of clip-higher,"),
        "no =": (["--run", str(good)], "must be ROW=PATH, e.g. --run clip-cov+qae="),
        "missing file": (["--run", f"gspo={nope}"], f"--run gspo: `{nope}` not found"),
        "folder without results.json": (["--run", f"gspo={tmp_path / 'empty'}"], "holds no results.json"),
        "not JSON": (["--run", f"gspo={tmp_path / 'broken.json'}"], "broken.json` is not JSON"),
        "no benchmarks": (["--run", f"kl-cov={tmp_path / 'other.json'}"], "other.json` has no `benchmarks` object"),
        "no temperature": (["--run", f"kl-cov={tmp_path / 'no_t.json'}"],
                           "benchmark `aime24`: no `settings.temperature`"),
        "a string pass@1": (["--run", f"kl-cov={tmp_path / 'str.json'}"], "`metrics.pass@1` must be a number"),
        "a row twice": (["--run", f"gspo={good}", "--run", f"qwen3_30b_a3b_gspo={good}"], "--run gspo is given twice"),
        "unknown flag": (["--runs", f"gspo={good}"], "unrecognized arguments: --runs"),
    }


def test_bad_input_is_one_error_line_with_exit_code_2(tmp_path, capsys):
    for name, (argv, message) in bad_inputs(tmp_path).items():
        with pytest.raises(SystemExit) as stop:
            report.main(argv)
        out, err = capsys.readouterr()
        assert stop.value.code == 2, name
        assert out == "" and err.startswith("error: ") and err.count("\n") == 1, (name, err)
        assert message in err, (name, err)


def test_the_command_line_prints_no_traceback(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--run", f"gspo={tmp_path / 'nope'}"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"error: --run gspo: `{tmp_path / 'nope'}` not found; give an evaluation folder "
                           "(eval.py --out) or its results.json\n")


def test_docstring_examples():
    assert doctest.testmod(report).failed == 0


def test_every_row_names_a_shipped_config_of_its_model_and_method():
    import config

    methods = {"Clip-Higher (DAPO)": "clip-higher", "Clip-Cov": "clip-cov", "KL-Cov": "kl-cov", "GSPO": "gspo"}
    for above, row in zip((None, *report.ROWS), report.ROWS):
        cfg = config.load(f"{row.config}.yaml")  # it exists and loads
        method = methods[row.method] if row.method != "+ QAE" else methods[above.method]
        assert cfg.algorithm.policy_loss == method and cfg.model.name_or_path == f"Qwen/{row.model}"
        assert cfg.algorithm.baseline == ("quantile" if row.method == "+ QAE" else "mean")
