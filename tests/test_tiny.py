"""The embedded tiny default (tiny/, built by scripts/make_tiny.py): the committed artifact loads
offline and is what the configs expect, and the build script still produces a loadable folder.

Runs on CPU in well under a minute; nothing is downloaded.
"""

import doctest
import json
import re
import subprocess
import sys
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "tiny"
COLUMNS = {"id", "problem", "answer", "difficulty"}
PROBLEM_RE = re.compile(r"^Compute (\d+)([+-])(\d+)\.$")


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_model_folder(folder: Path):
    """Loads offline; Qwen3 with head_dim 32 and an embedding padded past the tokenizer."""
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    cfg = model.config
    assert cfg.model_type == "qwen3"
    assert cfg.head_dim == 32  # vLLM's CPU attention supports 32, 64, ...; 16 fails
    assert cfg.tie_word_embeddings
    assert cfg.vocab_size % 64 == 0 and cfg.vocab_size > len(tok)
    assert model.get_input_embeddings().weight.shape == (cfg.vocab_size, cfg.hidden_size)
    assert tok.pad_token == "<|endoftext|>" and tok.eos_token == "<|im_end|>"
    assert tok.convert_tokens_to_ids("<|im_start|>") < len(tok)
    assert cfg.eos_token_id == tok.eos_token_id
    assert tok.eos_token_id in model.generation_config.eos_token_id
    return tok, model


def test_committed_model_and_tokenizer():
    tok, model = check_model_folder(TINY / "model")
    messages = [{"role": "user", "content": "Compute 37+845."}]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nCompute 37+845.<|im_end|>\n<|im_start|>assistant\n"
    ids = tok("Answer: 10982")["input_ids"]
    assert [tok.decode([i]) for i in ids][-5:] == list("10982")  # one token per digit
    assert tok.decode(ids) == "Answer: 10982"
    size_mb = (TINY / "model" / "model.safetensors").stat().st_size / 1e6
    assert size_mb < 5, f"tiny model should stay under 5 MB, is {size_mb:.1f} MB"
    with torch.no_grad():
        logits = model(**tok([text], return_tensors="pt")).logits  # (1, T, V)
    assert logits.shape[-1] == model.config.vocab_size


def test_committed_model_is_warm_started():
    """Greedy decoding solves most easiest-level test problems and stops with <|im_end|>."""
    tok = AutoTokenizer.from_pretrained(TINY / "model")
    model = AutoModelForCausalLM.from_pretrained(TINY / "model")
    tok.padding_side = "left"
    rows = [r for r in read_jsonl(TINY / "test.jsonl") if r["difficulty"] == 1][:16]
    prompts = [tok.apply_chat_template([{"role": "user", "content": r["problem"]}],
                                       tokenize=False, add_generation_prompt=True) for r in rows]
    batch = tok(prompts, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, do_sample=False, max_new_tokens=48)  # (B, L + T)
    responses = out[:, batch["input_ids"].shape[1]:].tolist()
    assert all(tok.eos_token_id in r for r in responses), "every response should end with <|im_end|>"
    texts = tok.batch_decode(responses, skip_special_tokens=True)
    correct = sum(t.strip().endswith(f"Answer: {r['answer']}") for t, r in zip(texts, rows))
    assert correct >= len(rows) // 2, texts


def test_committed_data_files():
    train, test = read_jsonl(TINY / "train.jsonl"), read_jsonl(TINY / "test.jsonl")
    assert 2000 <= len(train) <= 10000 and 200 <= len(test) <= 1000
    for row in train + test:
        assert set(row) == COLUMNS
        a, op, b = PROBLEM_RE.match(row["problem"]).groups()
        assert int(row["answer"]) == (int(a) + int(b) if op == "+" else int(a) - int(b))
        assert row["answer"] == str(int(row["answer"]))  # a plain integer string
        assert isinstance(row["difficulty"], int) and 1 <= row["difficulty"] <= 5
    assert {r["problem"] for r in train}.isdisjoint(r["problem"] for r in test)
    assert {r["difficulty"] for r in test} == {r["difficulty"] for r in train} == {1, 2, 3, 4, 5}
    assert len({r["id"] for r in train + test}) == len(train) + len(test)


def test_make_tiny_quick(tmp_path):
    """--quick runs the whole build with a few SFT steps; the data and tokenizer do not depend
    on --quick, so they must match the committed ones byte for byte (the build is seeded)."""
    out = tmp_path / "tiny"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_tiny.py"), "--quick", "--out", str(out)],
                   check=True, cwd=ROOT, timeout=600)
    check_model_folder(out / "model")
    for name in ("train.jsonl", "test.jsonl", "model/tokenizer.json", "model/chat_template.jinja"):
        assert (out / name).read_bytes() == (TINY / name).read_bytes(), name
    assert "--quick" in (out / "README.md").read_text()



def test_build_script_docstring_examples(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "scripts"))
    import make_tiny
    import tiny_task

    assert doctest.testmod(tiny_task).failed == 0 and doctest.testmod(make_tiny).failed == 0
