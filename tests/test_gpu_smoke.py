"""scripts/gpu_smoke.sh in its CPU mode, as a borrowed GPU machine without vLLM runs it (SMOKE_VLLM=0):
the ZeRO-3 run against the plain one, packed against padded micro-batches, and the table it writes for
docs/gpu.md. The vLLM runs it skips
here are the vLLM twins' job (tests/test_vllm_*.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_cpu_smoke_passes_and_writes_its_table(tmp_path):
    env = {**os.environ, "SMOKE_CPU": "1", "SMOKE_VLLM": "0", "SMOKE_WORK": str(tmp_path), "PYTHON": sys.executable,
           "SMOKE_PORT": "29561", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(["bash", "scripts/gpu_smoke.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=900)
    summary = (tmp_path / "results" / "summary.txt").read_text()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "RESULT: every check passed" in summary
    assert "vllm not tried (SMOKE_VLLM=0)" in summary and "vllm_scale: not run" in summary
    rows = {line.split("|")[1].strip(): line for line in summary.splitlines() if line.startswith("| ")}
    assert set(rows) >= {"run", "zero3_hf", "plain_hf"}
    # the process-group timeout in effect, read back by train.py: tiny_qae.yaml's collective_timeout_min
    assert rows["zero3_hf"].rstrip(" |").endswith("min on all 2 process groups")
    assert rows["plain_hf"].rstrip(" |").endswith("no process group")
    assert "ZeRO-3 vs plain, step 1: optim/grad_norm relative gap" in summary
    assert "[PASS] same samples" in summary
    assert "packed vs padded micro-batches: gradient relative gap" in summary and "[PASS] packed vs padded" in summary
