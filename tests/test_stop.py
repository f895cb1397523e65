"""A stop asked for from outside (infra/stop.py) ends in a checkpoint, and --resume continues exactly.

One run of the tiny config is stopped three times, once each way a cluster asks: SIGUSR1 sent again
and again until the process exits (so signals also arrive during the save), a STOP file in the output
directory, and SIGTERM. Each stop must end after a whole step with a checkpoint that exists only
because of the stop (no periodic saves), exit code 0 and one line saying how to continue; the resumed
pieces together must log every step's metrics and reach the weights of an uninterrupted run. The
2-process ZeRO-3 twin's stop, with the signal sent to one rank only, is in test_zero3.py.
"""

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from infra import checkpoint
from infra.logger import read_metrics

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # runs of train.py: the file is scheduled first (conftest.py)
RUN = ["--config", "tiny_qae.yaml", "trainer.train_batch_size=4", "trainer.gen_batch_size=8",
       "trainer.mini_batch_size=2", "rollout.n=4", "eval.every=0", "trainer.total_steps=7", "trainer.save_every=0",
       "trainer.keep_last=5"]


def comparable(rows):
    return [{k: v for k, v in r.items()
             if not k.startswith(("time/", "perf/gen_tokens", "perf/train_tokens", "perf/peak_mem"))}
            for r in rows]


def steps(out: Path) -> list[int]:
    return [r["step"] for r in read_metrics(out / "metrics.jsonl")] if (out / "metrics.jsonl").exists() else []


def stopped_run(out: Path, ask, resume: bool) -> tuple[str, int]:
    """Run until a new step is logged, then `ask(proc)` for a stop (called every 20 ms until it exits);
    returns stderr and the last step logged."""
    before = len(steps(out))
    proc = subprocess.Popen([sys.executable, "train.py", *RUN, f"trainer.output_dir={out}",
                             *(["--resume"] if resume else [])], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while proc.poll() is None and time.time() < deadline and len(steps(out)) == before:
        time.sleep(0.02)
    while proc.poll() is None and time.time() < deadline:
        ask(proc)
        time.sleep(0.02)
    err = proc.communicate()[1]
    assert proc.returncode == 0, err[-3000:]
    return err, steps(out)[-1]


def test_each_stop_ends_in_a_checkpoint_and_the_pieces_train_what_one_run_trains(tmp_path):
    straight = tmp_path / "straight"
    subprocess.run([sys.executable, "train.py", *RUN, f"trainer.output_dir={straight}"], cwd=REPO, check=True,
                   capture_output=True, timeout=600)
    out, last = tmp_path / "stopped", 0

    touched = []

    def stop_file(proc):  # once: the run removes it when it stops
        if not touched:
            (out / "STOP").touch()
            touched.append(True)

    for ask, reason in [(lambda proc: proc.send_signal(signal.SIGUSR1), "SIGUSR1"), (stop_file, "a STOP file"),
                        (lambda proc: proc.send_signal(signal.SIGTERM), "SIGTERM")]:
        err, step = stopped_run(out, ask, resume=last > 0)
        assert last < step < 7, f"{reason}: stopped after step {step}, last stop at {last}"
        line = [line for line in err.splitlines() if line.startswith("stopped after")]
        assert line == [f"stopped after step {step} of 7 ({reason}): checkpoint "
                        f"`{out}/checkpoints/step_{step:06d}` written; continue with the same command and --resume"]
        assert checkpoint.latest(out).name == f"step_{step:06d}" and checkpoint.problem(checkpoint.latest(out)) is None
        assert not (out / "STOP").exists()  # acted on: the resumed run does not stop at once
        last = step
    subprocess.run([sys.executable, "train.py", *RUN, f"trainer.output_dir={out}", "--resume"], cwd=REPO, check=True,
                   capture_output=True, timeout=600)
    assert steps(out) == list(range(1, 8))
    assert comparable(read_metrics(out / "metrics.jsonl")) == comparable(read_metrics(straight / "metrics.jsonl"))
    from safetensors.torch import load_file

    a, b = (load_file(d / "checkpoints" / "step_000007" / "model" / "model.safetensors") for d in (straight, out))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_stop_during_start_up_ends_the_run_before_its_first_step(tmp_path):
    """SIGUSR1 while the inputs are checked (at scale, minutes before the first step: engines and shards are built
    then): the run ends cleanly before step 1, exit 0, one line, nothing written to the run folder; the same
    command then runs. Without a handler from main's first line, SIGUSR1's default action kills the process."""
    out = tmp_path / "run"
    hooked = ("import os, signal, sys\nimport train\nchecked = train.check_inputs\n"
              "def check_inputs(*args, **kwargs):\n    os.kill(os.getpid(), signal.SIGUSR1)\n"
              "    return checked(*args, **kwargs)\n"
              "train.check_inputs = check_inputs\ntrain.main(sys.argv[1:])\n")
    proc = subprocess.run([sys.executable, "-c", hooked, *RUN, f"trainer.output_dir={out}"], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "stopped before step 1 (SIGUSR1): nothing was trained or written" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "rank 0: done"
    assert not out.exists() or not any(out.iterdir())  # no metrics, no checkpoint: the same command starts it again


def test_a_stop_file_older_than_the_launch_is_left_over_and_a_newer_one_asks_to_stop(tmp_path, monkeypatch):
    """A STOP file from an earlier stop is removed at start; one written during start-up (a batch script answering
    a time-limit warning while the engines load) is a request: the run stops before step 1."""
    import os

    from infra.stop import STOP_FILE, StopRequest

    monkeypatch.setattr(signal, "signal", lambda *args: None)  # this test process keeps its own handlers

    class One:
        num_processes = 1

    old = tmp_path / STOP_FILE
    old.write_text("")
    os.utime(old, (time.time() - 60, time.time() - 60))
    request = StopRequest()
    request.watch(tmp_path, is_main=True)
    assert not old.exists() and request.agreed(One()) is None  # left over: removed, nothing asked
    request = StopRequest()
    (tmp_path / STOP_FILE).write_text("")  # written after this launch started
    request.watch(tmp_path, is_main=True)
    assert (tmp_path / STOP_FILE).exists() and request.agreed(One()) == "a STOP file"
