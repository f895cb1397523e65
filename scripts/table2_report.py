"""Table 2 of the QAE paper beside our reproduction: for each of the paper's eight rows, pass@1 /
pass@16 (%) on AIME25, AIME24 and AMC23, ours, the paper's and the difference, read from the
results.json files eval.py writes; each of our numbers comes with the sampling settings it was
measured at.

    python scripts/table2_report.py \
        --run clip-higher=runs/qwen3_8b_dapo/eval/step_000300 \
        --run clip-higher+qae=runs/qwen3_8b_qae/eval/step_000300/results.json \
        --run qwen3_8b_clip_cov_qae=runs/qwen3_8b_clip_cov_qae/eval/step_000300 \
        --json runs/table2.json > runs/table2.md

`--run ROW=PATH`, once per evaluated run: ROW names a row of the table (the name below, or the name
of the config that trains it, with or without .yaml); PATH is an evaluation folder (eval.py's --out,
holding results.json) or a results.json. A row without --run shows the paper's numbers, ours blank.

    ROW               the paper's row                       the config that trains it
    clip-higher       Qwen3-8B-Base, Clip-Higher (DAPO)     configs/qwen3_8b_dapo.yaml
    clip-higher+qae   Qwen3-8B-Base, + QAE                  configs/qwen3_8b_qae.yaml
    clip-cov          Qwen3-8B-Base, Clip-Cov               configs/qwen3_8b_clip_cov.yaml
    clip-cov+qae      Qwen3-8B-Base, + QAE                  configs/qwen3_8b_clip_cov_qae.yaml
    kl-cov            Qwen3-8B-Base, KL-Cov                 configs/qwen3_8b_kl_cov.yaml
    kl-cov+qae        Qwen3-8B-Base, + QAE                  configs/qwen3_8b_kl_cov_qae.yaml
    gspo              Qwen3-30B-A3B-Base, GSPO              configs/qwen3_30b_a3b_gspo.yaml
    gspo+qae          Qwen3-30B-A3B-Base, + QAE             configs/qwen3_30b_a3b_gspo_qae.yaml

A run's results.json comes from, e.g., `python eval.py --config qwen3_8b_clip_cov_qae.yaml --model
runs/qwen3_8b_clip_cov_qae/checkpoints/step_000300/model --benchmarks aime25,aime24,amc23 --n 32
--sampling paper`. Prints Markdown: the table, then each run's file, model and settings, then one
`warning:` line per run whose sampling differs from the paper's, whose n is below 16 (pass@16 needs
n >= 16) or whose results lack a benchmark or some of its problems. `--json PATH` writes the same
as JSON. Bad input stops with one `error:` line and exit code 2.

Choices, numbered:
1. A benchmark of results.json is matched by its name's stem: `aime24`, `data/aime24.jsonl` and a hub set
   `owner/aime24` all fill the AIME24 column; other benchmarks (math500) are left out.
2. The difference is ours minus the paper's, in percentage points, from our number as printed (2 decimals).
3. The paper's sampling: T = 0.7, 32 samples per problem (its section 5); it states no top_p, taken as 1.0
   (eval.py --sampling paper). verl's DAPO scripts validate at T = 1.0, top_p = 0.7 instead.
4. results.json is read as JSON only: nothing in it is executed or unpickled.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: infra.cli

from infra.cli import one_line_errors  # noqa: E402

PAPER = "Table 2 of arXiv 2509.22611v2"
BENCHMARKS = {"aime25": "AIME25", "aime24": "AIME24", "amc23": "AMC23"}  # the paper's column order
SIZES = {"aime25": 30, "aime24": 30, "amc23": 40}  # problems in data/aime25.jsonl, aime24.jsonl, amc23.jsonl
PAPER_SAMPLING = {"temperature": 0.7, "top_p": 1.0, "n": 32}  # choice 3
EXAMPLE = "--run clip-cov+qae=runs/qwen3_8b_clip_cov_qae/eval/step_000300"


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the paper's Table 2."""

    name: str
    """the --run name"""
    model: str
    method: str
    config: str
    """the config in configs/ that trains this row's run, without .yaml"""
    paper: dict[str, tuple[float, float]]
    """benchmark -> (pass@1, pass@16) in percent, as the paper prints them"""


ROWS = (  # Table 2 of arXiv 2509.22611v2: each "+ QAE" row changes only the baseline of the row above it
    Row("clip-higher", "Qwen3-8B-Base", "Clip-Higher (DAPO)", "qwen3_8b_dapo",
        {"aime25": (32.71, 56.66), "aime24": (39.69, 71.23), "amc23": (92.11, 97.50)}),
    Row("clip-higher+qae", "Qwen3-8B-Base", "+ QAE", "qwen3_8b_qae",
        {"aime25": (34.90, 57.92), "aime24": (48.23, 71.63), "amc23": (92.97, 97.50)}),
    Row("clip-cov", "Qwen3-8B-Base", "Clip-Cov", "qwen3_8b_clip_cov",
        {"aime25": (33.02, 52.27), "aime24": (42.40, 68.58), "amc23": (87.42, 96.25)}),
    Row("clip-cov+qae", "Qwen3-8B-Base", "+ QAE", "qwen3_8b_clip_cov_qae",
        {"aime25": (37.40, 56.29), "aime24": (46.04, 73.16), "amc23": (90.23, 96.25)}),
    Row("kl-cov", "Qwen3-8B-Base", "KL-Cov", "qwen3_8b_kl_cov",
        {"aime25": (33.33, 45.86), "aime24": (44.90, 73.00), "amc23": (86.02, 95.00)}),
    Row("kl-cov+qae", "Qwen3-8B-Base", "+ QAE", "qwen3_8b_kl_cov_qae",
        {"aime25": (33.44, 51.62), "aime24": (44.69, 77.08), "amc23": (87.97, 96.25)}),
    Row("gspo", "Qwen3-30B-A3B-Base", "GSPO", "qwen3_30b_a3b_gspo",
        {"aime25": (31.15, 46.59), "aime24": (43.75, 67.91), "amc23": (90.00, 99.39)}),
    Row("gspo+qae", "Qwen3-30B-A3B-Base", "+ QAE", "qwen3_30b_a3b_gspo_qae",
        {"aime25": (32.50, 48.01), "aime24": (47.50, 71.72), "amc23": (89.38, 97.21)}),
)


class ReportError(ValueError):
    """Input the report cannot use; the message names the flag or file and the fix."""


@dataclasses.dataclass(frozen=True)
class Measured:
    """One benchmark of one of our runs, as results.json gives it."""

    pass1: float
    """pass@1 in percent, rounded as printed (choice 2)"""
    pass16: float | None
    """pass@16 in percent, or None when results.json has none (n < 16, or eval.py --k left it out)"""
    n: int
    problems: int | None
    settings: dict
    """the benchmark's sampling settings as eval.py wrote them (temperature, top_p, top_k, max_tokens, seed)"""


# ----------------------------------------------------------------------------------------------
# Reading: --run flags and results.json files, checked before anything is printed.
# ----------------------------------------------------------------------------------------------


def row_named(name: str) -> Row:
    """The row a --run names, by its own name or by its config's.

    >>> row_named("clip-cov+qae").method, row_named("configs/qwen3_8b_qae.yaml").name
    ('+ QAE', 'clip-higher+qae')
    """
    key = Path(name.strip()).name.removesuffix(".yaml").lower()
    for row in ROWS:
        if key in (row.name, row.config):
            return row
    raise ReportError(f"--run: unknown row `{name}`; give one of {', '.join(r.name for r in ROWS)} "
                      f"(or its config's name, e.g. {ROWS[3].config})")


def results_path(path: Path, flag: str) -> Path:
    """The results.json a --run PATH names: the file itself, or the one in an evaluation folder."""
    if path.is_dir():
        if (path / "results.json").is_file():
            return path / "results.json"
        found = sorted(path.glob("eval/*/results.json")) or sorted(path.glob("*/results.json"))
        hint = f", e.g. `{found[-1].parent}`" if found else " (eval.py --out)"
        raise ReportError(f"{flag}: folder `{path}` holds no results.json; give an evaluation folder{hint} "
                          "or a results.json")
    if not path.is_file():
        raise ReportError(f"{flag}: `{path}` not found; give an evaluation folder (eval.py --out) or its results.json")
    return path


def number(value, what: str, low: float, high: float, where: str) -> float:
    """A JSON number in [low, high] (not a bool), else an error naming the key."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ReportError(f"{where}: `{what}` must be a number in [{low:g}, {high:g}], got {value!r:.40}; "
                          "give a results.json written by eval.py")
    return value


def measured(entry, where: str) -> Measured:
    """One benchmark entry of results.json ({"settings", "metrics", ...}, infra/evalsets.py benchmark_result)."""
    fix = "give a results.json written by eval.py (infra/evalsets.py benchmark_result)"
    for key in ("settings", "metrics"):
        if not isinstance(entry, dict) or not isinstance(entry.get(key), dict):
            raise ReportError(f"{where}: no `{key}` object; {fix}")
    settings, metrics = entry["settings"], entry["metrics"]
    for key, source in (("temperature", settings), ("top_p", settings), ("pass@1", metrics), ("n", metrics)):
        if key not in source:
            raise ReportError(f"{where}: no `{'settings' if source is settings else 'metrics'}.{key}`; {fix}")
    number(settings["temperature"], "settings.temperature", 0, float("inf"), where)
    number(settings["top_p"], "settings.top_p", 0, 1, where)
    n = int(number(metrics["n"], "metrics.n", 1, float("inf"), where))
    pass16 = number(metrics["pass@16"], "metrics.pass@16", 0, 1, where) if "pass@16" in metrics else None
    problems = metrics.get("num_problems")
    return Measured(pass1=round(100 * number(metrics["pass@1"], "metrics.pass@1", 0, 1, where), 2),
                    pass16=None if pass16 is None else round(100 * pass16, 2), n=n,
                    problems=problems if isinstance(problems, int) else None, settings=settings)


def read_results(path: Path, flag: str) -> tuple[str, dict[str, Measured]]:
    """The model and the Table 2 benchmarks of one results.json (choice 1), read as JSON only (choice 4)."""
    try:
        results = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise ReportError(f"{flag}: cannot read `{path}` ({e}); give a readable results.json") from None
    except json.JSONDecodeError as e:
        raise ReportError(f"{flag}: `{path}` is not JSON ({e.msg}, line {e.lineno}); give the results.json "
                          "eval.py wrote") from None
    if not isinstance(results, dict) or not isinstance(results.get("benchmarks"), dict):
        raise ReportError(f"{flag}: `{path}` has no `benchmarks` object; give the results.json eval.py wrote")
    found: dict[str, Measured] = {}
    for key, entry in results["benchmarks"].items():
        bench = Path(key).stem.lower()  # choice 1
        if bench not in BENCHMARKS:
            continue
        if bench in found:
            raise ReportError(f"{flag}: `{path}` holds two benchmarks named {bench}; give one results.json per run "
                              "with each benchmark once")
        found[bench] = measured(entry, f"{flag}: `{path}`, benchmark `{key}`")
    return str(results.get("model", "")), found


@dataclasses.dataclass(frozen=True)
class Run:
    """One of our runs, filling one row."""

    row: Row
    path: Path
    """its results.json"""
    model: str
    benchmarks: dict[str, Measured]


def read_runs(specs: list[str]) -> dict[str, Run]:
    """Every --run ROW=PATH, by row name; any bad one stops the report before it prints."""
    runs: dict[str, Run] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not (sep and name.strip() and path.strip()):
            raise ReportError(f"--run `{spec}` must be ROW=PATH, e.g. {EXAMPLE}")
        row = row_named(name)
        flag = f"--run {row.name}"
        if row.name in runs:
            raise ReportError(f"{flag} is given twice (`{runs[row.name].path}` and `{path}`); give each row once")
        file = results_path(Path(path.strip()), flag)
        model, benchmarks = read_results(file, flag)
        runs[row.name] = Run(row, file, model, benchmarks)
    return runs


# ----------------------------------------------------------------------------------------------
# The report: numbers, settings, warnings; Markdown and JSON.
# ----------------------------------------------------------------------------------------------


def sampling(settings: dict) -> str:
    """The settings a number was measured at, short (a report cell's `settings`, which holds n).

    >>> sampling({"temperature": 1.0, "top_p": 0.7, "top_k": -1, "n": 32})
    'T 1.0, top_p 0.7, n 32'
    """
    return f"T {settings['temperature']}, top_p {settings['top_p']}, n {settings['n']}"


def issues(m: Measured, bench: str) -> list[str]:
    """How one benchmark's numbers depart from the paper's measurement (choice 3)."""
    paper, s, found = PAPER_SAMPLING, m.settings, []
    for key, short in (("temperature", "T"), ("top_p", "top_p")):
        if s[key] != paper[key]:
            found.append(f"{short} {s[key]} (the paper: {paper[key]})")
    if m.n < 16:
        found.append(f"n {m.n} < 16, so no pass@16 (pass@16 needs n >= 16)")
    elif m.pass16 is None:
        found.append("no pass@16 in results.json (eval.py --k left it out; rescore with --k 1 16)")
    elif m.n != paper["n"]:
        found.append(f"n {m.n} (the paper: {paper['n']})")
    if m.problems is not None and m.problems != SIZES[bench]:
        found.append(f"{m.problems} of {SIZES[bench]} problems")
    return found


def warning(run: Run) -> str | None:
    """One line naming everything in which a run departs from the paper's measurement, or None."""
    by_issue: dict[str, list[str]] = {}
    for bench, m in run.benchmarks.items():
        for text in issues(m, bench):
            by_issue.setdefault(text, []).append(bench)
    parts = [text if len(benches) == len(run.benchmarks) else f"{text} on {', '.join(benches)}"
             for text, benches in by_issue.items()]
    parts += [f"no {bench} in results.json" for bench in BENCHMARKS if bench not in run.benchmarks]
    return f"warning: {run.row.name} (`{run.path}`): {'; '.join(parts)}" if parts else None


def report(runs: dict[str, Run]) -> dict:
    """Every row's numbers (ours, the paper's, ours - paper), our settings, and the warnings."""
    rows = []
    for row in ROWS:
        run = runs.get(row.name)
        cells = {}
        for bench, (p1, p16) in row.paper.items():
            m = run.benchmarks.get(bench) if run else None
            ours = None if m is None else {"pass@1": m.pass1, "pass@16": m.pass16}
            diff = None if m is None else {  # choice 2: from our number as printed
                "pass@1": round(m.pass1 - p1, 2), "pass@16": None if m.pass16 is None else round(m.pass16 - p16, 2)}
            cells[bench] = {"paper": {"pass@1": p1, "pass@16": p16}, "ours": ours, "diff": diff,
                            "settings": None if m is None else {**m.settings, "n": m.n, "num_problems": m.problems}}
        rows.append({"row": row.name, "model": row.model, "method": row.method, "config": f"configs/{row.config}.yaml",
                     "results": str(run.path) if run else None, "evaluated_model": run.model if run else None,
                     "benchmarks": cells})
    warnings = [w for run in runs.values() if (w := warning(run))]
    return {"source": PAPER, "unit": "percent", "paper_sampling": PAPER_SAMPLING, "rows": rows, "warnings": warnings}


def pair(values: dict | None, signed: bool = False) -> str:
    """"pass@1 / pass@16" of a cell; blank without a run, "n/a" for a number the run lacks.

    >>> pair({"pass@1": 34.9, "pass@16": 57.0}), pair({"pass@1": -0.8, "pass@16": None}, signed=True), pair(None)
    ('34.90 / 57.00', '-0.80 / n/a', '')
    """
    if values is None:
        return ""
    return " / ".join("n/a" if v is None else f"{v:+.2f}" if signed else f"{v:.2f}"
                      for v in (values["pass@1"], values["pass@16"]))


def markdown(rep: dict) -> str:
    """The table, our runs' files and settings, and the warnings."""
    head = ["model", "method"] + [f"{BENCHMARKS[b]} {part}" for b in BENCHMARKS for part in ("ours", "paper", "Δ")]
    head += ["our sampling", "--run"]
    lines = [f"pass@1 / pass@16 (%): ours, the paper's ({rep['source']}) and Δ = ours - paper in points. "
             "The paper samples 32 responses per problem at T = 0.7 (top_p not stated: 1.0 here); "
             "verl's DAPO scripts validate at T = 1.0, top_p = 0.7.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rep["rows"]:
        cells = [row["model"], row["method"]]
        for b in BENCHMARKS:
            c = row["benchmarks"][b]
            cells += [pair(c["ours"]), pair(c["paper"]), pair(c["diff"], signed=True)]
        measured_at = {b: c["settings"] for b, c in row["benchmarks"].items() if c["settings"]}
        short = {b: sampling(s) for b, s in measured_at.items()}
        cells.append(next(iter(short.values())) if len(set(short.values())) == 1
                     else "; ".join(f"{BENCHMARKS[b]}: {text}" for b, text in short.items()))
        cells.append(f"`{row['row']}`")
        lines.append("| " + " | ".join(cells) + " |")
    ours = [row for row in rep["rows"] if row["results"]]
    if ours:
        lines += ["", "Our runs, and the settings each number was measured at:"]
    for row in ours:
        groups: dict[str, list[str]] = {}  # the settings, written out -> the benchmarks measured at them
        for b, c in row["benchmarks"].items():
            if c["settings"]:
                text = ", ".join(f"{k} {v}" for k, v in c["settings"].items() if k not in ("model", "num_problems"))
                groups.setdefault(text, []).append(f"{BENCHMARKS[b]} ({c['settings']['num_problems']} problems)")
        settings = "; ".join(f"{', '.join(benches)}: {text}" for text, benches in groups.items())
        lines.append(f"- `{row['row']}` ({row['config']}): `{row['results']}`, model `{row['evaluated_model']}`; "
                     f"{settings or 'none of AIME25, AIME24, AMC23'}")
    if rep["warnings"]:
        lines += ["", *rep["warnings"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="Table 2 of arXiv 2509.22611 beside our runs' eval results "
                                            "(see the module docstring).")
    one_line_errors(p)  # a bad flag is one `error:` line, exit code 2
    p.add_argument("--run", action="append", default=[], metavar="ROW=PATH",
                   help=f"a row's evaluation folder or results.json, e.g. {EXAMPLE}; rows: "
                        f"{', '.join(r.name for r in ROWS)} (or their configs' names)")
    p.add_argument("--json", type=Path, metavar="PATH", help="also write the report as JSON to PATH")
    args = p.parse_args(argv)
    try:
        rep = report(read_runs(args.run))
        if args.json:
            try:
                args.json.write_text(json.dumps(rep, indent=1) + "\n")
            except OSError as e:
                raise ReportError(f"--json: cannot write `{args.json}` ({e.strerror}); give a writable path") from None
    except ReportError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    print(markdown(rep), end="")


if __name__ == "__main__":
    main()
