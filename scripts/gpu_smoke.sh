#!/usr/bin/env bash
# GPU smoke test: three real training steps on one GPU, timed by phase, before a paper-scale run.
#
#   bash scripts/gpu_smoke.sh                # on a machine with an NVIDIA GPU; sized for a few minutes (not yet timed on one)
#   SMOKE_CPU=1 bash scripts/gpu_smoke.sh    # the same steps on a CPU with a 2-layer model: checks this script only
#
# In order:
#  1. Environment: exits 1 without a CUDA GPU or without a package train.py needs (it installs
#     nothing; install requirements.txt first); notes whether DeepSpeed imports.
#  2. A random-init Qwen3 of Qwen3-0.6B's shape (hidden 1024, 28 layers, 16 heads, 8 KV heads,
#     head_dim 128, intermediate 3072, vocab 151,936, tied embeddings: 596,049,920 parameters), bf16,
#     with the tiny task's tokenizer (tiny/model, 286 tokens). Ids 286..151,935 are padding rows,
#     as in Qwen's own padded vocabulary; the HF sampler never samples them (rollout.py choice 1).
#  3. With DeepSpeed: the dtype ZeRO-3 stores the parameters in, and the time of the
#     layer-by-layer gather that copies the policy into vLLM each step (rollout.policy_weights),
#     copied here into stand-in tensors since vLLM is not needed.
#  4. train.py, 3 steps on tiny/train.jsonl with the HF sampler (rollout.backend=hf), under
#     `accelerate launch` with configs/accelerate/zero3.yaml and --num_processes 1. One GPU is one
#     process: ZeRO-3 then shards over a single rank, so this measures its code path and overheads,
#     not its communication. Without DeepSpeed: the same run as a plain single process, said so below.
#     Fixed for a random-init model: dynamic sampling off (every answer is wrong, so every group
#     would be filtered) and sparse update off (every response goes through the gradient pass).
#  5. Per step, from metrics.jsonl: time/sync, time/rollout, time/reward, time/old_logp, time/update,
#     time/step, perf/peak_mem_gb; and the most memory nvidia-smi saw in use on the GPU.
#
# Settings: PYTHON (default .venv/bin/python if present, else python3), SMOKE_WORK (model and run,
# default /tmp/qae_gpu_smoke), SMOKE_RESULTS (the small result files, default $SMOKE_WORK/results),
# SMOKE_ACCELERATE_ARGS (extra `accelerate launch` flags, e.g. "--mixed_precision bf16"),
# SMOKE_TRAIN_TIMEOUT (seconds for step 4, default 420). Put measured numbers in docs/gpu.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
WORK=${SMOKE_WORK:-/tmp/qae_gpu_smoke}
RESULTS=${SMOKE_RESULTS:-$WORK/results}
export SMOKE_CPU=${SMOKE_CPU:-0}
rm -rf "$WORK/model" "$WORK/run"
mkdir -p "$WORK" "$RESULTS"
T_START=$SECONDS

echo "== 1. environment"
"$PY" - <<'EOF' | tee "$RESULTS/env.txt"
import importlib.metadata as md, importlib.util, os, sys

try:
    import torch
except ImportError:
    sys.exit(f"gpu_smoke: {sys.executable} cannot import torch; set PYTHON to the interpreter of the GPU environment")
if os.environ["SMOKE_CPU"] != "1" and not torch.cuda.is_available():
    sys.exit(f"gpu_smoke: no CUDA GPU visible (torch {torch.__version__}: torch.cuda.is_available() is False). "
             "Run it on a GPU machine, or SMOKE_CPU=1 to check the script itself on a CPU.")
missing = [m for m in ("accelerate", "transformers", "datasets", "yaml", "sympy", "tqdm") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_smoke: missing Python packages {missing}: install requirements.txt first (this script installs nothing)")
print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda})")
print(", ".join(f"{p} {md.version(p)}" for p in ("accelerate", "transformers", "datasets")), "(requirements.txt pins 1.16.0, 5.19.0, 5.2.0)")
try:
    import deepspeed
    print(f"deepspeed {deepspeed.__version__}: ZeRO-3 run")
except Exception as e:  # absent, or present but missing a dependency
    print(f"deepspeed NOT importable ({type(e).__name__}: {e}): NO ZeRO-3; steps 3 and 4 run as a plain single process")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"GPU {i}: {p.name}, {p.total_memory / 2**30:.1f} GiB")
EOF
ZERO3=0
if "$PY" -c "import deepspeed" >/dev/null 2>&1; then ZERO3=1; fi

echo "== 2. random-init Qwen3 with Qwen3-0.6B's shape -> $WORK/model"
"$PY" - "$WORK/model" <<'EOF'
import os, sys, time

import torch
from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

out, cpu = sys.argv[1], os.environ["SMOKE_CPU"] == "1"
t0 = time.perf_counter()
tokenizer = AutoTokenizer.from_pretrained("tiny/model")  # 286 tokens, Qwen-style chat template
shape = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
             num_key_value_heads=8, head_dim=128)  # Qwen3-0.6B
if cpu:  # checking the script, not measuring: 2 small layers, the same vocabulary
    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=32)
cfg = Qwen3Config(vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=40960, rms_norm_eps=1e-6,
                  rope_parameters={"rope_type": "default", "rope_theta": 1e6}, bos_token_id=tokenizer.pad_token_id,
                  eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **shape)
torch.manual_seed(0)
with torch.device("cpu" if cpu else "cuda"):
    model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
model.save_pretrained(out)
tokenizer.save_pretrained(out)
GenerationConfig.from_pretrained("tiny/model").save_pretrained(out)  # stops on <|im_end|> or <|endoftext|>
n = sum(p.numel() for p in model.parameters())
print(f"{n:,} parameters, vocab {cfg.vocab_size:,} rows for {len(tokenizer)} tokens, bf16; built in {time.perf_counter() - t0:.1f} s")
EOF

ACCELERATE=("$PY" -m accelerate.commands.launch --config_file configs/accelerate/zero3.yaml --num_processes 1)
# shellcheck disable=SC2206  # word splitting of the extra flags is intended
ACCELERATE+=(${SMOKE_ACCELERATE_ARGS:-})
echo "== 3. ZeRO-3 gather of the policy, layer by layer"
if [ "$ZERO3" = 1 ]; then
  cat > "$WORK/gather_check.py" <<'EOF'
import sys, time

import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM

sys.path.insert(0, sys.argv[2])
from rollout import policy_weights  # noqa: E402

accelerator = Accelerator()
accelerator.state.deepspeed_plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = 1  # no DataLoader is prepared
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16)
stored = sorted({str(p.ds_tensor.dtype) for p in model.parameters()})
print(f"parameters loaded with dtype=bfloat16; ZeRO-3 stores them as {stored}")
if "torch.float32" in stored:
    print("WARNING: ZeRO-3 holds fp32 parameters (DeepSpeed's bf16 mode is off: accelerate mixed_precision 'no'), "
          "so the policy trains in fp32 and rollout.py would start vLLM in fp32; set mixed_precision: bf16")
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
model, optimizer = accelerator.prepare(model, optimizer)
policy = model.module
dst = {n: torch.empty(p.ds_shape, dtype=torch.bfloat16, device=accelerator.device)  # stand-ins for vLLM's tensors
       for n, p in policy.named_parameters()}
sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
for rep in range(4):  # pass 0 includes one-time set-up
    sync()
    t0 = time.perf_counter()
    for name, w in policy_weights(model):
        dst[name].copy_(w)
    sync()
    ms = 1000 * (time.perf_counter() - t0)
    layers = policy.config.num_hidden_layers
    print(f"gather + copy of all {len(dst)} tensors, pass {rep}: {ms:.1f} ms = {ms / layers:.2f} ms per each of {layers} decoder layers (embedding and norm counted in)")
EOF
  "${ACCELERATE[@]}" --main_process_port 29511 "$WORK/gather_check.py" "$WORK/model" "$PWD" > "$WORK/gather.log" 2>&1 || true
  grep -E "^(parameters|WARNING|gather)" "$WORK/gather.log" > "$RESULTS/gather.txt" || true
  if ! grep -q "^gather" "$RESULTS/gather.txt"; then echo "FAILED; the end of its log:" >> "$RESULTS/gather.txt"; tail -n 15 "$WORK/gather.log" >> "$RESULTS/gather.txt"; fi
  cat "$RESULTS/gather.txt"
else
  echo "skipped: DeepSpeed is not importable, so there is no ZeRO-3 gather to time" | tee "$RESULTS/gather.txt"
fi

echo "== 4. train.py, 3 steps"
if [ "$SMOKE_CPU" = 1 ]; then
  SIZE=(rollout.n=4 rollout.max_response_len=16 trainer.train_batch_size=4 trainer.mini_batch_size=2 reward.workers=2)
else  # 32 prompts x 8 responses = 256 per step; 2 optimizer steps of 16 prompts; up to 256 new tokens each
  SIZE=(rollout.n=8 rollout.max_response_len=256 trainer.train_batch_size=32 trainer.mini_batch_size=16)
fi
OVERRIDES=("model.name_or_path=$WORK/model" model.dtype=bfloat16 model.gradient_checkpointing=true rollout.backend=hf
           algorithm.dynamic_sampling=false trainer.gen_batch_size=null trainer.sparse_update=false
           trainer.micro_batch_max_tokens=16384 trainer.total_steps=3 trainer.save_every=0 trainer.keep_last=1
           "trainer.output_dir=$WORK/run" logging.wandb=false "${SIZE[@]}")
if [ "$ZERO3" = 1 ]; then LAUNCH=("${ACCELERATE[@]}" --main_process_port 29512); else LAUNCH=("$PY"); fi
SMI_PID=""
if [ "$SMOKE_CPU" != 1 ] && command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 500 > "$WORK/smi.txt" 2>/dev/null &
  SMI_PID=$!
fi
T_TRAIN=$SECONDS
rc=0
timeout "${SMOKE_TRAIN_TIMEOUT:-420}" "${LAUNCH[@]}" train.py --config tiny_qae.yaml "${OVERRIDES[@]}" > "$RESULTS/train.log" 2>&1 || rc=$?
TRAIN_WALL=$((SECONDS - T_TRAIN))
if [ -n "$SMI_PID" ]; then kill "$SMI_PID" 2>/dev/null || true; fi
tail -n 5 "$RESULTS/train.log"
if [ -f "$WORK/run/metrics.jsonl" ]; then cp "$WORK/run/metrics.jsonl" "$RESULTS/"; fi

echo "== 5. summary"
"$PY" - "$WORK" "$ZERO3" "$TRAIN_WALL" "$rc" "$((SECONDS - T_START))" "${SMOKE_ACCELERATE_ARGS:-}" <<'EOF' | tee "$RESULTS/summary.txt"
import json, sys
from pathlib import Path

work, zero3, train_wall, rc, total = Path(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
extra = f", extra flags: {sys.argv[6]}" if sys.argv[6] else ""
print("mode:", f"ZeRO-3 (configs/accelerate/zero3.yaml, 1 process{extra})" if zero3 else "NO ZeRO-3 (DeepSpeed not importable): plain single process")
metrics = work / "run" / "metrics.jsonl"
rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
keys = ["time/sync", "time/rollout", "time/reward", "time/old_logp", "time/update", "time/step", "perf/peak_mem_gb", "response/len_mean"]
print("step  " + "  ".join(f"{k:>16}" for k in keys))
for r in rows:
    print(f"{r['step']:>4}  " + "  ".join(f"{r[k]:>16.2f}" if k in r else f"{'-':>16}" for k in keys))
print("time/* in seconds; perf/peak_mem_gb = torch.cuda.max_memory_allocated / 1e9 (peak RSS on a CPU); '-' = not logged by this train.py")
print("time/sync is ~0 here: the HF sampler has no weight copy; the ZeRO-3 gather that feeds vLLM is step 3's figure")
smi = work / "smi.txt"
used = [int(x) for x in smi.read_text().split() if x.isdigit()] if smi.exists() else []
if used:
    print(f"nvidia-smi, most memory in use on the GPU during train.py: {max(used) / 1024:.2f} GiB (allocator cache and CUDA context included)")
steps = sum(r.get("time/step", 0.0) for r in rows)
print(f"train.py wall {train_wall} s = {steps:.0f} s in {len(rows)} steps + {train_wall - steps:.0f} s start-up, checkpoint, shut-down")
print(f"whole script {total} s; train.py exit status {rc}" + (" (124: stopped by SMOKE_TRAIN_TIMEOUT)" if rc == 124 else ""))
EOF
exit "$rc"
