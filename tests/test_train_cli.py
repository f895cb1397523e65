"""train.py refuses bad input with one line, before the model loads."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def write_config(tmp_path, policy, train_file, **sections):
    cfg = {
        "model": {"name_or_path": str(policy), "dtype": "float32", "gradient_checkpointing": False},
        "data": {"train_files": str(train_file), "prompt_key": "problem", "answer_key": "answer",
                 "prompt_template": "{problem}", "max_prompt_len": 64},
        "rollout": {"backend": "hf", "n": 4, "max_response_len": 16},
        "reward": {"overlong_buffer_len": 0},
        "trainer": {"train_batch_size": 4, "gen_batch_size": 8, "mini_batch_size": 2, "micro_batch_max_tokens": 512,
                    "total_steps": 1, "output_dir": str(tmp_path / "run")},
    }
    for section, values in sections.items():
        cfg[section].update(values)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def run_train(*args, cwd=REPO):
    return subprocess.run([sys.executable, str(REPO / "train.py"), *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def assert_one_line_error(proc, message):
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and message in last, last
    assert "Traceback" not in proc.stderr
    assert "Loading weights" not in proc.stderr  # the model never started loading


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algorithm.KK=0.5"], "unknown config key `algorithm.KK` (did you mean `algorithm.K`?)"),
        (["algorithm.K=1.5"], "`algorithm.K` must be null or strictly between 0 and 1"),
        (["trainer.mini_batch_size=3"], "`trainer.mini_batch_size` (3) must divide `trainer.train_batch_size` (4)"),
        (["data.train_files=/no/such/file.jsonl"], "dataset file `/no/such/file.jsonl` not found"),
        (["data.answer_key=solution"], "has no column `solution` (config key `data.answer_key`)"),
    ],
)
def test_bad_input_is_one_line(tmp_path, tiny_policy_dir, tiny_train_file, overrides, message):
    cfg = write_config(tmp_path, tiny_policy_dir, tiny_train_file)
    assert_one_line_error(run_train("--config", cfg, *overrides), message)


def test_missing_config_file(tmp_path):
    assert_one_line_error(run_train("--config", "no_such_config.yaml"), "config file `no_such_config.yaml` not found")


def test_row_without_answer(tmp_path, tiny_policy_dir):
    data = tmp_path / "bad.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [{"problem": "1+1", "answer": "2"},
                                                            {"problem": "2+2", "answer": "4"},
                                                            {"problem": "3+3", "answer": ""}]))
    cfg = write_config(tmp_path, tiny_policy_dir, data)
    assert_one_line_error(run_train("--config", cfg), f"row 2 of `{data}` has no answer in column `answer`")


def test_output_dir_of_another_run_needs_resume(tmp_path, tiny_policy_dir, tiny_train_file):
    cfg = write_config(tmp_path, tiny_policy_dir, tiny_train_file)
    ckpt = tmp_path / "run" / "checkpoints" / "step_000003"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.pt").write_bytes(b"")
    assert_one_line_error(run_train("--config", cfg), "already holds checkpoints up to step_000003; pass --resume")
    assert_one_line_error(run_train("--config", cfg, "--resume", tmp_path / "elsewhere"),
                          "is not a checkpoint directory")


def test_resume_with_nothing_to_resume(tmp_path, tiny_policy_dir, tiny_train_file):
    cfg = write_config(tmp_path, tiny_policy_dir, tiny_train_file)
    assert_one_line_error(run_train("--config", cfg, "--resume"), "--resume: no checkpoint in")
