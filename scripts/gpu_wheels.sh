#!/usr/bin/env bash
# The wheels a GPU machine without network needs before `bash scripts/gpu_smoke.sh`: DeepSpeed and the
# requirements of it that such a machine usually lacks, written to .whl/ (git-ignored), 4.8 MiB.
#
#   bash scripts/gpu_wheels.sh                 # here, where pip reaches PyPI
#   # there (Python 3.12, torch, transformers, accelerate, sympy, PyYAML, tqdm already installed):
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
#   PYTHON=python3 bash scripts/gpu_smoke.sh
#
# What it fetches, and why each one:
#  - deepspeed 0.19.8 (requirements.txt's pin): PyPI has only its source, so pip builds the wheel here. It is
#    pure Python as built without DS_BUILD_OPS (the ops it would compile are built on first use, and train.py
#    uses none: torch's AdamW, no offload), so one wheel serves any machine.
#  - hjson, pydantic, pydantic-core, annotated-types, typing-inspection: DeepSpeed's requirements that a
#    machine with torch, transformers and accelerate does not bring (its others, numpy, packaging, psutil,
#    py-cpuinfo, msgpack, ninja, einops, tqdm, come with those or with most CUDA images). Versions are the
#    test set's pins (requirements-test.txt, requirements-cpu.txt). pydantic-core is compiled: its wheel is
#    chosen for CPython $PY_VERSION on manylinux x86_64 (PY_VERSION=3.12 by default, the GPU image's Python).
# Not fetched: vLLM (a CUDA build of several hundred MiB with its own torch; gpu_smoke.sh skips the vLLM
# runs without it, saying so) and datasets (train.py imports it only for parquet files and hub sets; the
# smoke reads jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
PY_VERSION=${PY_VERSION:-3.12}
OUT=.whl
rm -rf "$OUT" && mkdir -p "$OUT"
"$PY" -m pip wheel -q --no-deps -w "$OUT" deepspeed==0.19.8
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$OUT" hjson==3.1.0 pydantic==2.14.4 annotated-types==0.8.0 \
    typing-inspection==0.4.5
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do platforms+=(--platform "$p"); done
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PY_VERSION" --implementation cp \
    "${platforms[@]}" -d "$OUT" pydantic-core==2.50.5
ls -la "$OUT"
du -sh "$OUT"
