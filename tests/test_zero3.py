"""The GPU path's CPU twin: train.py with DeepSpeed ZeRO-3 over gloo, two processes, against one
plain process (no DeepSpeed).

The twin forces what differs at scale:
- several micro-batches per optimizer step (an 88-token budget: one or two sequences each): ZeRO-3 must add every
  micro-batch's gradient, which it does only when each goes through the engine's forward;
- unequal work on the two ranks (`perf/filler_passes` > 0): ranks with fewer micro-batches run
  zero-weighted passes, or the all-gathers of the busier rank hang;
- several output-layer chunks per pass (8 tokens per chunk), unequal across ranks;
- two mini-batches per step, and dynamic sampling that needs several generation batches, with
  kept groups pooled over ranks and dealt out mini-batch by mini-batch (rollout.deal_groups).
Two processes must train what one trains: every metric within fp32's noise floor (RTOL below,
1e-6 absolute) and the gathered weights within 1e-5. The launch is the plain form (`accelerate launch --multi_gpu
--num_processes 2 train.py ...`, no --config_file: ZeRO-3 comes from the training YAML's
`deepspeed` section); the resume uses configs/accelerate/zero3.yaml, which must agree with the
YAML, and a disagreeing launch stops with one line. A checkpoint resumes on another number of
processes (2 -> 1, 1 -> 2: the optimizer shards rebuilt), and SIGUSR1 to one rank stops both after
the same step, in a checkpoint. A hang fails the test (timeouts kill the process group).
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from infra.logger import read_metrics

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # 2-process launches: the file is scheduled first (conftest.py)
# plain: no --config_file
PORT = ["--main_process_port", "29611"]  # own port: parallel files (pyproject.toml, -n)
LAUNCH = [sys.executable, "-m", "accelerate.commands.launch", *PORT, "--multi_gpu", "--num_processes", "2"]
LAUNCH_FILE = [sys.executable, "-m", "accelerate.commands.launch", *PORT,
               "--config_file", str(REPO / "configs" / "accelerate" / "zero3.yaml"),
               "--num_processes", "2", "--mixed_precision", "no"]  # the tiny model trains in fp32
TWIN = ["--config", "tiny_qae.yaml", "trainer.train_batch_size=8", "trainer.gen_batch_size=8",
        "trainer.mini_batch_size=4", "rollout.n=4", "rollout.prompts_per_call=4", "trainer.adaptive_gen_batch=false",
        "trainer.micro_batch_max_tokens=88", "trainer.logprob_chunk_tokens=8",
        "optim.lr=3e-4", "trainer.total_steps=2", "trainer.save_every=1", "trainer.keep_last=2",
        "eval.every=1", "eval.limit=3", "eval.n=2"]
ENV = {**os.environ, "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
TIMEOUT = 900  # a hang (unequal collectives) fails here instead of blocking the suite
# fp32 noise floor: one process run with a 200-token instead of a 96-token micro-batch budget (the
# same samples, other padding and summation order) moves loss/ratio_max by 1.1e-5 and the gradient
# norm by 1e-5 relative after one update; two processes differ from one by no more than that.
RTOL = 2e-5


def run(cmd, out_dir, *extra):
    """Run to completion or kill the whole process group at TIMEOUT; returns (returncode, output)."""
    proc = subprocess.Popen([*cmd, *TWIN, f"trainer.output_dir={out_dir}", *extra], cwd=REPO, env=ENV, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd[:6])} ... did not finish in {TIMEOUT} s (a collective hang?):\n{out[-3000:]}")
    return proc.returncode, out


def weights(run_dir: Path, step: int) -> dict:
    from safetensors.torch import load_file

    return load_file(run_dir / "checkpoints" / f"step_{step:06d}" / "model" / "model.safetensors")


def comparable(rows):
    """Metrics that must agree. Not: timings, throughput, memory, how the update was cut into
    passes (per rank), and evaluation (HF `generate` seeds per call, so its samples depend on how
    problems split over processes)."""
    return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/", "eval/"))} for r in rows]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("zero3")
    code, log = run([sys.executable, "train.py"], root / "single", "deepspeed.zero_stage=0")
    assert code == 0, log[-3000:]
    t0 = time.perf_counter()
    code, log = run([*LAUNCH, "train.py"], root / "zero3", "deepspeed.zero_stage=3")
    print(f"2-process ZeRO-3 run: {time.perf_counter() - t0:.0f} s")
    assert code == 0, log[-3000:]
    return root, log


def test_two_zero3_processes_train_what_one_process_trains(runs):
    root, log = runs
    assert "rank 0: done" in log and "rank 1: done" in log  # every rank finished its work
    a, b = read_metrics(root / "single" / "metrics.jsonl"), read_metrics(root / "zero3" / "metrics.jsonl")
    assert [r["step"] for r in b] == [1, 2] and all(r["optim/updates"] == 2 for r in b)  # two mini-batches per step
    # What the twin must force, or it proves nothing:
    assert max(r["sampling/gen_batches"] for r in b) >= 2, "dynamic sampling never needed a second generation batch"
    assert all(r["perf/micro_batches"] > 2 * r["optim/updates"] for r in b), (
        "fewer than 2 micro-batches per optimizer step")
    assert sum(r["perf/filler_passes"] for r in b) > 0, "the ranks never had unequal numbers of micro-batches"
    assert all(0 <= r["eval/test/pass@1"] <= 1 for r in b)  # evaluation ran under ZeRO-3 on both ranks
    for x, y in zip(comparable(a), comparable(b)):
        assert x.keys() == y.keys()
        for k in x:  # same samples, rewards, advantages, losses and gradient norms
            assert y[k] == pytest.approx(x[k], rel=RTOL, abs=1e-6), k
    wa, wb = weights(root / "single", 2), weights(root / "zero3", 2)
    assert wa.keys() == wb.keys()
    from safetensors.torch import load_file

    init = load_file(REPO / "tiny" / "model" / "model.safetensors")
    moved = max((wa[k] - init[k]).abs().max().item() for k in wa)
    gap = max((wa[k] - wb[k]).abs().max().item() for k in wa)
    print(f"weights moved {moved:.3g}; 1 vs 2 processes differ by {gap:.3g}")
    assert moved > 1e-3 and gap < 1e-5, (moved, gap)  # the shards trained, and gathered to the same model


def test_one_zero3_process_without_a_launcher_trains_what_one_plain_process_trains(runs, tmp_path):
    """`python train.py` (or accelerate's one-GPU launch, which sets no RANK) with ZeRO-3: the
    process gets single-process settings instead of DeepSpeed's MPI discovery, and its
    micro-batches are summed, not overwritten (the gradient norm would be the last one's)."""
    root, _ = runs
    code, out = run([sys.executable, "train.py"], tmp_path / "one", "deepspeed.zero_stage=3", "trainer.total_steps=1")
    assert code == 0, out[-3000:]
    a, b = read_metrics(root / "single" / "metrics.jsonl")[0], read_metrics(tmp_path / "one" / "metrics.jsonl")[0]
    assert b["perf/micro_batches"] > 2 * b["optim/updates"]
    for k, v in comparable([a])[0].items():
        assert b[k] == pytest.approx(v, rel=RTOL, abs=1e-6), k

    # Its 1-process checkpoint resumed on 2 processes: the shards rebuilt for two ranks (infra/reshard.py).
    code, out = run([*LAUNCH, "train.py"], tmp_path / "two", "deepspeed.zero_stage=3", "--resume",
                    str(tmp_path / "one" / "checkpoints" / "step_000001"))
    assert code == 0 and "written by 1 processes, on 2: each rank's optimizer shard is rebuilt" in out, out[-3000:]
    same_as_uninterrupted(root / "zero3", tmp_path / "two")


def same_as_uninterrupted(straight: Path, resumed: Path) -> None:
    """Step 2 of a run resumed from step 1 on another number of processes, against the uninterrupted
    run's: the twin's tolerance between 1 and 2 processes (metrics RTOL, weights 1e-5)."""
    a, b = comparable(read_metrics(straight / "metrics.jsonl"))[1], comparable(read_metrics(resumed / "metrics.jsonl"))
    b = b[-1]
    assert b["step"] == 2 and a.keys() == b.keys()
    for k in a:
        assert b[k] == pytest.approx(a[k], rel=RTOL, abs=1e-6), k
    wa, wb = weights(straight, 2), weights(resumed, 2)
    gap = max((wa[k] - wb[k]).abs().max().item() for k in wa)
    assert gap < 1e-5, gap


def test_zero3_checkpoint_is_whole_tensors_and_resumes_on_one_process(runs):
    root, _ = runs
    from transformers import AutoModelForCausalLM

    ckpt = root / "zero3" / "checkpoints" / "step_000001"
    model = AutoModelForCausalLM.from_pretrained(ckpt / "model")  # consolidated: whole tensors, not shards
    assert sum(p.numel() for p in model.parameters()) > 500_000
    assert sorted(p.name for p in ckpt.glob("rank_*.pt")) == ["rank_00000.pt", "rank_00001.pt"]

    # Without DeepSpeed the optimizer state is kept whole: a one-line error before the model loads.
    code, out = run([sys.executable, "train.py"], root / "plain", "deepspeed.zero_stage=0", "--resume", str(ckpt))
    assert code == 2 and "was written with DeepSpeed ZeRO-3" in out and "deepspeed.zero_stage=3" in out, out[-2000:]
    # On one ZeRO-3 process the two ranks' shards are rebuilt into one (infra/reshard.py).
    code, out = run([sys.executable, "train.py"], root / "one", "deepspeed.zero_stage=3", "--resume", str(ckpt))
    assert code == 0 and "written by 2 processes, on 1" in out, out[-3000:]
    same_as_uninterrupted(root / "zero3", root / "one")
    # The exact resume on as many processes, under the launch config file: the stopped twin's (below).


def test_sigusr1_to_one_rank_stops_both_in_a_checkpoint_and_the_resume_is_exact(runs, tmp_path):
    """SIGUSR1 to rank 1's worker alone, during step 1: both ranks agree to stop after step 1 and
    write the checkpoint that only the stop asks for (no periodic saves); the resume, on 2 processes
    under the launch config file, gives the uninterrupted run's step 2 and weights exactly."""
    import psutil

    root, _ = runs
    out = tmp_path / "stopped"
    proc = subprocess.Popen([*LAUNCH, "train.py", *TWIN, f"trainer.output_dir={out}", "deepspeed.zero_stage=3",
                             "trainer.save_every=0"], cwd=REPO, env=ENV, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(proc.stdout), daemon=True)  # the pipe never fills
    reader.start()
    try:  # step 1 has begun once the run's config.yaml is written: a signal during start-up stops before step 1
        deadline = time.monotonic() + TIMEOUT
        while not (out / "config.yaml").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        workers = [p for p in psutil.Process(proc.pid).children(recursive=True) if "train.py" in p.cmdline()]
        rank1 = [p for p in workers if p.environ().get("RANK") == "1"]
        assert len(workers) == 2 and len(rank1) == 1, "".join(log)[-3000:]
        rank1[0].send_signal(signal.SIGUSR1)
        proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("the stopped twin did not finish (a rank stopped alone?)")
    reader.join(timeout=30)
    text = "".join(log)
    assert proc.returncode == 0, text[-3000:]
    assert "stopped after step 1 of 2 (SIGUSR1)" in text and "rank 0: done" in text and "rank 1: done" in text
    assert sorted(p.name for p in (out / "checkpoints").glob("step_*")) == ["step_000001"]

    code, text = run([*LAUNCH_FILE, "train.py"], out, "deepspeed.zero_stage=3", "trainer.save_every=0", "--resume")
    assert code == 0 and "rank 0: done" in text and "rank 1: done" in text, text[-3000:]
    a, b = weights(root / "zero3", 2), weights(out, 2)
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    assert comparable(read_metrics(root / "zero3" / "metrics.jsonl")) == comparable(read_metrics(out / "metrics.jsonl"))


def test_two_zero3_ranks_pick_the_covariance_tokens_one_process_picks(tmp_path):
    """KL-Cov over two ZeRO-3 ranks with real collectives: the mini-batch's sums all-reduced in float64, each rank's
    n best tokens all-gathered (train.pick_tokens), the penalty's A = 0 responses kept in the gradient passes. Two
    processes pick and train what one process does: a rank-local pick would take n tokens per rank."""
    kl_cov = ["algorithm.policy_loss=kl-cov", "algorithm.clip_eps_low=null", "algorithm.clip_eps_high=null",
              "algorithm.clip_c=null", "algorithm.kl_cov_ratio=0.02", "algorithm.kl_cov_coef=1.0",
              "trainer.total_steps=1", "eval.every=0"]
    code, log = run([sys.executable, "train.py"], tmp_path / "single", "deepspeed.zero_stage=0", *kl_cov)
    assert code == 0, log[-3000:]
    code, log = run([*LAUNCH, "train.py"], tmp_path / "zero3", "deepspeed.zero_stage=3", *kl_cov)
    assert code == 0 and "rank 1: done" in log, log[-3000:]
    (a,), (b,) = (comparable(read_metrics(tmp_path / d / "metrics.jsonl")) for d in ("single", "zero3"))
    assert a["loss/cov_selected"] > 0 and a.keys() == b.keys()
    for k in a:
        assert b[k] == pytest.approx(a[k], rel=RTOL, abs=1e-6), k
    wa, wb = weights(tmp_path / "single", 1), weights(tmp_path / "zero3", 1)
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-5


def test_a_launch_config_that_disagrees_with_the_training_yaml_stops_with_one_line(tmp_path):
    code, out = run([*LAUNCH_FILE, "train.py"], tmp_path / "x", "deepspeed.zero_stage=0")
    assert code != 0
    line = next((x for x in out.splitlines() if x.startswith("error: ")), None)
    assert line is not None, out[-3000:]
    assert "ACCELERATE_DEEPSPEED_ZERO_STAGE=3, but config key `deepspeed.zero_stage` gives 0" in line
    assert not (tmp_path / "x").exists()  # stopped before anything was written


def test_gpu_command_fails_fast_on_a_cpu_machine(tmp_path):
    """The design card's launch line, on a machine without CUDA: one line within seconds, not a
    traceback deep in a run."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "accelerate.commands.launch", "train.py",
                           "--config", "qwen3_8b_qae.yaml", f"trainer.output_dir={tmp_path / 'gpu'}"],
                          cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert "error: this config is sized for CUDA GPUs" in proc.stderr
    assert "Traceback" not in proc.stderr.split("error: this config")[0]  # the message comes first
    assert time.perf_counter() - t0 < 120
