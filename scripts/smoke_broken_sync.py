"""train.py with its weight sync into vLLM broken on purpose: scripts/gpu_smoke.sh's `vllm_broken` run, which
train.py's engine-vs-trainer check must stop at step 1.

    accelerate launch --num_processes 1 scripts/smoke_broken_sync.py --config tiny_qae.yaml ...  # train.py's arguments

Every sync streams each of the policy's names with its shape, so vLLM's loader takes every tensor and the name check
(infra.vllm_sampler.weight_name_problems) passes, but none of the policy's values: each tensor sent is small noise,
uniform in (-1e-3, 1e-3), like the dummy weights a training engine starts on (infra.vllm_sampler, choice 9). It is
what a sync whose copies land where the engine does not read leaves behind, and only the comparison of vLLM's
log-probs with the trainer's can see it: on the smoke's peaked model a miss of whole nats.
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: train.py and its packages

import train  # noqa: E402
from infra import vllm_sampler  # noqa: E402

policy_weights = vllm_sampler.policy_weights  # the real stream: its names, its shapes, its ZeRO-3 gathers


def values_lost(model):
    """The (HF name, tensor) pairs of policy_weights, each tensor replaced by noise of its shape and dtype."""
    for name, tensor in policy_weights(model):
        yield name, torch.empty_like(tensor).uniform_(-1e-3, 1e-3)


if __name__ == "__main__":
    vllm_sampler.policy_weights = values_lost  # VLLMSampler.sync_weights looks it up at each sync
    train.main(sys.argv[1:])
