"""Under ZeRO-3 the output layer is all-gathered once per pass, whatever the number of vocabulary
chunks (infra.policy.OutputHead).

Two gloo ranks run train.py's no-grad log-prob passes and gradient passes (tests/zero3_gathers.py)
on an untied copy of the tiny model with DeepSpeed's `stage3_param_persistence_threshold` at 0, so
the output layer is partitioned as an 8B model's is, and count its all-gathers in DeepSpeed's
parameter coordinator: with 8-row chunks (several chunks per pass, a different number in each
pass) and with one chunk per pass. The counts per pass must be the same, and at most one gather
per forward and one per backward. Before the chunk loop moved into one module call, 8-row chunks
gathered the output layer once per chunk whenever ZeRO-3's recorded trace did not match the pass.
"""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LAUNCH = [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", "29612",  # parallel files
          "--multi_gpu", "--num_processes", "2"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_SILENT": "true"}


@pytest.fixture(scope="module")
def untied_model(tmp_path_factory):
    """tiny/model with its output layer a separate copy of the embedding."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path_factory.mktemp("untied")
    tied = AutoModelForCausalLM.from_pretrained(REPO / "tiny" / "model")
    cfg = AutoConfig.from_pretrained(REPO / "tiny" / "model", tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(cfg)
    state = {k: v.clone() for k, v in tied.state_dict().items()}
    state["lm_head.weight"] = state["model.embed_tokens.weight"].clone()
    model.load_state_dict(state)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(REPO / "tiny" / "model").save_pretrained(folder)
    return folder


def gathers(model_dir: Path, chunk: int, out: Path) -> list[dict]:
    cmd = [*LAUNCH, "tests/zero3_gathers.py", str(model_dir), str(chunk), str(out)]
    proc = subprocess.Popen(cmd, cwd=REPO, env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"the 2-rank worker did not finish in 600 s (a collective hang?):\n{proc.communicate()[0][-3000:]}")
    assert proc.returncode == 0, log[-3000:]
    return [json.loads(Path(f"{out}.rank{r}").read_text()) for r in (0, 1)]


@pytest.mark.slow
def test_output_layer_gathers_per_pass_do_not_grow_with_the_chunk_count(untied_model, tmp_path):
    one, many = gathers(untied_model, 100_000, tmp_path / "one"), gathers(untied_model, 8, tmp_path / "many")
    print(json.dumps({"one chunk": one[0], "8-row chunks": many[0]}))
    for a, b in zip(one, many):
        for phase in ("no_grad", "grad", "no_grad_again", "grad_again"):
            assert a[phase]["passes"] == b[phase]["passes"] >= 2, (phase, a, b)
            assert b[phase]["lm_head"] == a[phase]["lm_head"], (phase, "gathers grew with the chunk count", a, b)
            per_pass = 1 if phase.startswith("no_grad") else 2  # forward; forward and backward
            assert b[phase]["lm_head"] <= per_pass * b[phase]["passes"], (phase, b)
