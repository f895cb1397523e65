"""Every malformed input ends the same way: one line on stderr starting with `error: `
that names the thing (file, line or row, key, flag) and the fix, exit code 2, no traceback, before
any model loads, and nothing written or deleted where the run's files are.

One table, run through the real entry points (train.py, eval.py, config.py) as subprocesses, each
case in a folder of its own; the damaged-checkpoint cases start from one real 2-step tiny run
(a checkpoint after each step). The cases run a few at a time: each one spends its ~2 CPU-seconds
importing torch, and fails before anything else costs time.
"""

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tiny" / "model"
TRAIN = REPO / "tiny" / "train.jsonl"
SMALL = ["eval.every=0", "algorithm.dynamic_sampling=false", "trainer.gen_batch_size=null",
         "trainer.train_batch_size=2", "trainer.mini_batch_size=2", "rollout.n=2", "rollout.max_response_len=8",
         "reward.overlong_buffer_len=0"]
GOOD = {"problem": "Compute 1+1.", "answer": "2"}


# ----------------------------------------------------------------------------------------------
# Building a case's input in its folder `d`; each builder returns the command line after the script.
# ----------------------------------------------------------------------------------------------


def write(d: Path, name: str, text: str | bytes) -> Path:
    path = d / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def jsonl(d: Path, *rows) -> Path:
    """A training file: a good row, then `rows` (dicts as JSON, strings verbatim)."""
    return write(d, "train.jsonl", "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in (GOOD, *rows)))


def train(d: Path, *extra, data=TRAIN, model=TINY) -> list[str]:
    return ["train.py", "--config", "tiny_qae.yaml", *SMALL, f"model.name_or_path={model}", f"data.train_files={data}",
            f"trainer.output_dir={d / 'run'}", *extra]


def evaluate(d: Path, *extra, model=TINY) -> list[str]:
    return ["eval.py", "--config", "tiny_qae.yaml", "--model", str(model), *extra]


def show_config(path, *extra) -> list[str]:
    return ["config.py", "--config", str(path), *extra]


def model_copy(d: Path, drop: str | None = None, truncate: str | None = None) -> Path:
    """tiny/model copied into d/model, less the file `drop`, with the file `truncate` cut to half."""
    folder = Path(shutil.copytree(TINY, d / "model"))
    if drop:
        (folder / drop).unlink()
    if truncate:
        (folder / truncate).write_bytes((folder / truncate).read_bytes()[: (folder / truncate).stat().st_size // 2])
    return folder


class RunsCommand:
    """Unpickled, it runs a shell command that creates `marker`: what a hostile checkpoint would hold."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def damaged_run(d: Path, ck: Path, file: str, how: str, only_first: bool = False) -> Path:
    """The real run copied into d/run, with `file` of its newest checkpoint deleted, truncated, holding a
    command-running object (`plant`), or with numpy's RNG state as an earlier version wrote it (`numpy`)."""
    run = Path(shutil.copytree(ck, d / "run"))
    if only_first:
        shutil.rmtree(run / "checkpoints" / "step_000002")
    target = sorted((run / "checkpoints").glob("step_*"))[-1] / file
    if how == "delete":
        target.unlink()
    elif how == "truncate":
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    else:
        import numpy as np
        import torch

        state = torch.load(target, weights_only=True)
        if how == "plant":
            state["note"] = RunsCommand(d / "PLANTED")  # the case fails if this file appears (nothing may change)
        else:
            state["rng"]["numpy"] = ("MT19937", np.zeros(624, dtype=np.uint32), 0, 0, 0.0)
        torch.save(state, target)
    return run


def killed_run(d: Path, ck: Path) -> Path:
    """A run killed before its first checkpoint: its config and metrics, no checkpoints/."""
    run = Path(shutil.copytree(ck, d / "run"))
    shutil.rmtree(run / "checkpoints")
    return run


def empty_folder(d: Path) -> Path:
    (d / "empty").mkdir()
    return d / "empty"


def parquet(d: Path) -> Path:
    pq.write_table(pa.table({"question": ["1+1"], "solution": ["2"]}), d / "train.parquet")
    return d / "train.parquet"


STEP1, STEP2 = "run/checkpoints/step_000001", "run/checkpoints/step_000002"
NO_HUB = {"HF_HUB_CACHE": "/nonexistent-hub-cache"}  # no cached copy of a hub id

# (name, command built in the case's folder d from the real run ck, what the line must contain ({d}: the folder;
# a tuple: each part), extra environment). `build(...) and command` builds its input, then gives the command.
CASES = [
    # ---- training data (infra/data.py's DataError, through train.py) ----
    ("jsonl line not JSON", lambda d, ck: train(d, data=jsonl(d, '{"problem": "2+2", answer: 4}')),
     "line 2 of `{d}/train.jsonl` is not valid JSON", {}),
    ("empty training file", lambda d, ck: train(d, data=write(d, "train.jsonl", "")),
     "dataset file `{d}/train.jsonl` is empty", {}),
    ("training file is a folder", lambda d, ck: train(d, data=d),
     "dataset path `{d}` is a directory", {}),
    ("no answer column", lambda d, ck: train(d, data=write(d, "train.jsonl", '{"problem": "1+1", "solution": "2"}\n')),
     "`{d}/train.jsonl` has no column `answer` (config key `data.answer_key`)", {}),
    ("parquet without the configured columns", lambda d, ck: train(d, data=parquet(d)),
     "`{d}/train.parquet` has no column `problem` (config key `data.prompt_key`)", {}),
    ("null answer", lambda d, ck: train(d, data=jsonl(d, {"problem": "2+2", "answer": None})),
     "row 1 of `{d}/train.jsonl` has no answer in column `answer`", {}),
    ("empty answer", lambda d, ck: train(d, data=jsonl(d, {"problem": "2+2", "answer": " "})),
     "row 1 of `{d}/train.jsonl` has no answer in column `answer`", {}),
    ("number answer after string answers", lambda d, ck: train(d, data=jsonl(d, {"problem": "2+2", "answer": 4})),
     "line 2 of `{d}/train.jsonl`: field `answer` is a number here but a string on line 1", {}),
    ("list answers", lambda d, ck: train(d, data=write(d, "train.jsonl", '{"problem": "1+1", "answer": ["2"]}\n')),
     "row 0 of `{d}/train.jsonl` has an answer of type list", {}),
    ("null problem", lambda d, ck: train(d, data=jsonl(d, {"problem": None, "answer": "4"})),
     "row 1 of `{d}/train.jsonl` has no problem in column `problem`", {}),
    # ---- the model path (model.check_model, before anything loads) ----
    ("model folder that does not exist", lambda d, ck: train(d, model=d / "no" / "model"),
     "model.name_or_path: local path `{d}/no/model` not found, and it is not a hub id", {}),
    ("model folder that is empty", lambda d, ck: train(d, model=empty_folder(d)),
     "model.name_or_path `{d}/empty` is a folder without a usable model: config.json is missing", {}),
    ("model folder without weights", lambda d, ck: train(d, model=model_copy(d, drop="model.safetensors")),
     "`{d}/model` is a folder without a usable model: model.safetensors is missing", {}),
    ("model folder with truncated weights", lambda d, ck: train(d, model=model_copy(d, truncate="model.safetensors")),
     "`{d}/model` is a folder without a usable model: model.safetensors holds 1265584 bytes but its header", {}),
    ("a file as the model path", lambda d, ck: train(d, model=TINY / "config.json"),
     f"model.name_or_path `{TINY}/config.json` is a file", {}),
    ("tokenizer without a chat template", lambda d, ck: train(d, model=model_copy(d, drop="chat_template.jinja")),
     "the tokenizer of `{d}/model` has no chat template and config key `data.chat_template` is true; set "
     "data.chat_template=false", {}),
    ("hub id, hub unreachable", lambda d, ck: train(d, model="owner/name"),
     "`owner/name` is not a local folder (relative to `{d}`), so it was read as a hub id, but the hub "
     "(http://127.0.0.1:9) could not be reached", {**NO_HUB, "HF_ENDPOINT": "http://127.0.0.1:9"}),
    ("hub id, offline mode", lambda d, ck: train(d, model="owner/name"),
     "read as a hub id, but HF_HUB_OFFLINE is set and it is not in the local hub cache",
     {**NO_HUB, "HF_HUB_OFFLINE": "1"}),
    # ---- --resume and the run directory (checkpoint.resume_from, checkpoint.problem) ----
    ("truncated trainer_state.pt",
     lambda d, ck: damaged_run(d, ck, "trainer_state.pt", "truncate") and train(d, "--resume"),
     (f"checkpoint `{{d}}/{STEP2}` is damaged: trainer_state.pt is truncated",
      f"; resume from the previous checkpoint with `--resume {{d}}/{STEP1}`"), {}),
    ("missing trainer_state.pt",
     lambda d, ck: damaged_run(d, ck, "trainer_state.pt", "delete") and train(d, "--resume"),
     f"checkpoint `{{d}}/{STEP2}` is damaged: trainer_state.pt is missing; resume from the previous", {}),
    ("missing rank file", lambda d, ck: damaged_run(d, ck, "rank_00000.pt", "delete") and train(d, "--resume"),
     "is damaged: rank_00000.pt is missing; resume from the previous checkpoint", {}),
    ("missing model/config.json",
     lambda d, ck: damaged_run(d, ck, "model/config.json", "delete") and train(d, "--resume"),
     "is damaged: model/config.json is missing", {}),
    ("truncated model/model.safetensors",
     lambda d, ck: damaged_run(d, ck, "model/model.safetensors", "truncate") and train(d, "--resume"),
     "is damaged: model/model.safetensors holds", {}),
    ("a command-running object in trainer_state.pt",
     lambda d, ck: damaged_run(d, ck, "trainer_state.pt", "plant") and train(d, "--resume"),
     (f"checkpoint `{{d}}/{STEP2}` is refused: trainer_state.pt holds objects that are not plain data (`posix.system`)",
      f"so it was not loaded; resume from the previous checkpoint with `--resume {{d}}/{STEP1}`"), {}),
    ("a command-running object in a rank file",
     lambda d, ck: damaged_run(d, ck, "rank_00000.pt", "plant", only_first=True) and train(d, "--resume"),
     (f"checkpoint `{{d}}/{STEP1}` is refused: rank_00000.pt holds objects that are not plain data (`posix.system`)",
      "there is no earlier checkpoint"), {}),
    ("an earlier version's rank file (numpy RNG state)",
     lambda d, ck: damaged_run(d, ck, "rank_00000.pt", "numpy") and train(d, "--resume"),
     ("rank_00000.pt holds objects that are not plain data (`numpy.",
      f"convert the checkpoint once with `python scripts/convert_checkpoint.py {{d}}/{STEP2}`"), {}),
    ("the only checkpoint damaged, resumed by path",
     lambda d, ck: damaged_run(d, ck, "rank_00000.pt", "delete", only_first=True) and train(d, "--resume", d / STEP1),
     f"checkpoint `{{d}}/{STEP1}` is damaged: rank_00000.pt is missing; there is no earlier checkpoint", {}),
    ("run killed before its first checkpoint", lambda d, ck: killed_run(d, ck) and train(d),
     "`{d}/run` holds an earlier run's metrics.jsonl but no checkpoint", {}),
    ("run killed before its first checkpoint, --resume", lambda d, ck: killed_run(d, ck) and train(d, "--resume"),
     "--resume: trainer.output_dir `{d}/run` holds an earlier run's metrics.jsonl but no checkpoint", {}),
    # ---- configs (config.py, infra/config_loader.py) ----
    ("YAML that does not parse", lambda d, ck: show_config(write(d, "c.yaml", "model:\n  name_or_path: [x\ndata: 1\n")),
     "config file `{d}/c.yaml` is not valid YAML at line 3", {}),
    ("config file not UTF-8", lambda d, ck: show_config(write(d, "c.yaml", b"\xff\xfemodel: 1\n")),
     "config file `{d}/c.yaml` cannot be read as UTF-8 text", {}),
    ("unknown key in a config file",
     lambda d, ck: show_config(write(d, "c.yaml", "base: tiny_qae\nrollout:\n  nn: 3\n")),
     "unknown config key `rollout.nn` (set in `{d}/c.yaml`) (did you mean `rollout.n`?)", {}),
    ("unknown key on the command line", lambda d, ck: show_config("tiny_qae.yaml", "trainer.totl_steps=3"),
     "unknown config key `trainer.totl_steps` (did you mean `trainer.total_steps`?)", {}),
    ("impossible batch sizes", lambda d, ck: show_config("tiny_qae.yaml", "trainer.mini_batch_size=3"),
     "`trainer.mini_batch_size` (3) must divide `trainer.train_batch_size` (16)", {}),
    ("micro-batch budget below one sequence",
     lambda d, ck: show_config("tiny_qae.yaml", "trainer.micro_batch_max_tokens=10"),
     "`trainer.micro_batch_max_tokens` (10) must hold one full sequence", {}),
    ("a base: cycle",
     lambda d, ck: write(d, "b.yaml", "base: a.yaml\n") and show_config(write(d, "a.yaml", "base: b.yaml\n")),
     "is its own base (`base:` chain {d}/a.yaml -> {d}/b.yaml -> {d}/a.yaml)", {}),
    ("a config that is a list", lambda d, ck: show_config(write(d, "c.yaml", "- a\n- b\n")),
     "config file `{d}/c.yaml` must hold a mapping of sections, got list", {}),
    ("an override without =", lambda d, ck: show_config("tiny_qae.yaml", "rollout.n"),
     "override `rollout.n` must look like `section.key=value`", {}),
    ("a value of the wrong type", lambda d, ck: show_config("tiny_qae.yaml", "rollout.n=eight"),
     "config key `rollout.n` must be int, got 'eight' (str)", {}),
    ("train.py without --config", lambda d, ck: ["train.py"],
     "the following arguments are required: --config (see train.py --help)", {}),
    # ---- eval.py ----
    ("unknown benchmark name", lambda d, ck: evaluate(d, "--benchmarks", "aime23"),
     "unknown benchmark `aime23`: no bundled benchmark and no file has that name; give one of ['aime24', 'aime25'", {}),
    ("benchmark file that does not exist", lambda d, ck: evaluate(d, "--benchmarks", "foo.json"),
     "benchmark file `foo.json` not found (relative to `{d}`); the bundled benchmarks are ['aime24'", {}),
    ("benchmark with list answers",
     lambda d, ck: evaluate(d, "--benchmarks", write(d, "b.jsonl", '{"problem": "1+1", "answer": [2]}\n')),
     "row 0 of benchmark `{d}/b.jsonl` has no usable answer in `answer` (got [2])", {}),
    ("a flag that is not a number", lambda d, ck: evaluate(d, "--n", "four"),
     "argument --n: invalid int value: 'four' (see eval.py --help)", {}),
    ("--model folder that does not exist",
     lambda d, ck: evaluate(d, "--benchmarks", "aime24", model=d / "nope" / "model"),
     "--model: local path `{d}/nope/model` not found, and it is not a hub id", {}),
    ("--model whose tokenizer has no chat template",
     lambda d, ck: evaluate(d, "--benchmarks", "aime24", model=model_copy(d, drop="chat_template.jinja")),
     "the tokenizer of `{d}/model` has no chat template", {}),
]


# ----------------------------------------------------------------------------------------------
# The test
# ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_run(tmp_path_factory) -> Path:
    """A real tiny run of 2 steps with a checkpoint after each (the damaged-checkpoint cases copy it)."""
    run = tmp_path_factory.mktemp("real") / "run"
    proc = subprocess.run([sys.executable, str(REPO / "train.py"), "--config", "tiny_qae.yaml", *SMALL,
                           f"model.name_or_path={TINY}", f"data.train_files={TRAIN}", "trainer.total_steps=2",
                           "trainer.save_every=1", f"trainer.output_dir={run}"],
                          capture_output=True, text=True, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run


def snapshot(folder: Path) -> dict:
    """Every file and folder under `folder`: (size, mtime) of each file, None for a folder."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) if p.is_file() else None
            for p in folder.rglob("*")}


def run_case(case, d: Path, ck: Path) -> list[str]:
    """Build the case in `d`, run it; what is wrong with how it ended (empty if it ended in one `error:` line)."""
    name, build, fragment, env = case
    args = build(d, ck)
    before = snapshot(d)
    proc = subprocess.run([sys.executable, str(REPO / args[0]), *map(str, args[1:])], capture_output=True, text=True,
                          cwd=d, env={**os.environ, **env}, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    expected = [part.replace("{d}", str(d)) for part in ([fragment] if isinstance(fragment, str) else fragment)]
    problems = [
        f"exit code {proc.returncode}, not 2" if proc.returncode != 2 else "",
        f"{len(lines)} lines on stderr, not 1" if len(lines) != 1 else "",
        "a traceback" if "Traceback" in proc.stderr else "",
        "the line does not start with `error: `" if lines and not lines[-1].startswith("error: ") else "",
        f"the line does not contain {expected!r}" if not lines or not all(e in lines[-1] for e in expected) else "",
        "files under the case's folder changed" if snapshot(d) != before else "",
    ]
    problems = [p for p in problems if p]
    return [f"{name}: {'; '.join(problems)}\n    stderr: {proc.stderr.strip()[-1500:]}"] if problems else []


def test_every_malformed_input_is_one_line_exit_2_and_changes_nothing(tmp_path, real_run):
    names = [case[0] for case in CASES]
    assert len(set(names)) == len(names) >= 25
    folders = [tmp_path / f"case{i:02d}" for i in range(len(CASES))]
    for d in folders:
        d.mkdir()
    with ThreadPoolExecutor(max_workers=3) as pool:  # each case is mostly importing torch
        failures = [f for found in pool.map(run_case, CASES, folders, [real_run] * len(CASES)) for f in found]
    assert not failures, f"{len(failures)} of {len(CASES)} cases:\n" + "\n".join(failures)
