#!/usr/bin/env bash
# GPU smoke test: short real runs of train.py on one GPU that exercise what breaks at scale, with the
# figures docs/gpu.md asks for, before a paper-scale run.
#
#   bash scripts/gpu_smoke.sh                # on an NVIDIA GPU; about 6 minutes on one H200 (an estimate, not yet timed;
#                                            # each run is stopped after SMOKE_RUN_TIMEOUT, 300 s)
#   SMOKE_CPU=1 bash scripts/gpu_smoke.sh    # the same runs on a CPU with 2-layer models: checks this script only
#
# What it checks, in order:
#  1. Environment: exits 1 without a CUDA GPU or a package train.py needs (it installs nothing);
#     says whether DeepSpeed and vLLM import. A run that needs a missing one is skipped, saying so.
#  2. Models: a random-init Qwen3 of Qwen3-0.6B's shape (hidden 1024, 28 layers, 16 heads, 8 KV heads,
#     head_dim 128, intermediate 3072, vocab 151,936 rows, tied: 596,049,920 parameters) with the tiny
#     task's 286-token tokenizer; ids 286.. are padding rows, as in Qwen's padded vocabulary. And
#     tiny/model as committed (trained on the task, so its groups have mixed correctness).
#  3. ZeRO-3 gradient accumulation (runs zero3_hf, plain_hf): one training step of the 0.6B-shape model
#     with the HF sampler, once under ZeRO-3 (`accelerate launch --num_processes 1 train.py ...
#     deepspeed.zero_stage=3`) and once as a plain process (`python train.py ... deepspeed.zero_stage=0`),
#     same seed. The step is ONE optimizer step over >= 3 micro-batches (a 2048-token budget), so both
#     runs take their gradient at the same weights. Checked: the two runs sampled the same responses,
#     and step 1's optim/grad_norm and loss/policy agree within TOL (bf16: 2%; fp32: 1e-3). A ZeRO-3
#     forward that bypassed DeepSpeedEngine.forward kept only the last micro-batch's gradient: the norm
#     then differs by the missing micro-batches' share, tens of percent.
#     Fixed for a random-init model: dynamic sampling off (every answer is wrong, every group would be
#     filtered), sparse update off (every response goes through the gradient pass), and an overlong
#     buffer of max_response_len - 1 tokens, so rewards fall with length and most advantages are not
#     zero (adv/zero_frac <= 0.5 is checked: were the nonzero ones all in the last micro-batch, as when
#     most responses hit max_response_len, the bug above would go unseen).
#  4. vLLM under ZeRO-3 (runs vllm_scale, vllm_dynamic), each 2 steps:
#     vllm_scale: the 0.6B-shape model, CUDA graphs on, rollout.gpu_memory_utilization at its default:
#       the KV cache vLLM reports (its "KV cache size: N tokens" and "Available KV cache memory" lines)
#       against the budget, time/sync (ZeRO-3 gather + load into vLLM), peak memory.
#     vllm_dynamic: tiny/model with a generation batch half the training batch, so dynamic sampling
#       needs >= 2 generation batches per step, and periodic evaluation on the awake engine at step 1.
#     Both: rollout/weight_syncs must be 1 per step (2 at the last step when the final evaluation
#     ran); every sync checks the names vLLM loaded (a missing one stops the run). vllm_dynamic: train.py's
#     own check of vLLM against the trainer on steps 1-2, in the smoke's dtype (bf16 on a GPU):
#     rollout/logp_diff_mean (|logp_trainer - logp_vllm|) under rollout.logp_gap_max (auto: 0.05 in bf16,
#     1e-3 in fp32) and no sampled padded id, else the run stops with an `error:` line. Off on the
#     random-init model (rollout.logp_gap_max=null): its padded ids, which vLLM masks and the trainer
#     does not, hold almost all the probability (diff ~6.3). The vLLM model runner in use (V1 or V2) is logged.
#  5. Packed against padded micro-batches (bench/bench_packing.py --gradient-gap): the same gradient
#     passes on one model in the smoke's dtype on the GPU, the two gradients' relative gap <= 0.05 in bf16
#     (a judgement), 1e-4 in fp32 (4.9e-7 measured on a CPU).
#  6. Per run and step: time/sync, time/rollout, time/reward, time/old_logp, time/update, time/step,
#     perf/peak_mem_gb and the most memory nvidia-smi saw in use; every check's verdict.
#     All of it goes to $SMOKE_RESULTS/summary.txt: paste that into docs/gpu.md's Measured table.
#
# Exit status: 0 when every check that ran passed; 1 otherwise (or when the environment is unfit).
# Settings: PYTHON (default .venv/bin/python if present, else python3), SMOKE_WORK (models and runs,
# default /tmp/qae_gpu_smoke), SMOKE_RESULTS (logs and summary, default $SMOKE_WORK/results),
# SMOKE_DTYPE (default bfloat16 on a GPU, float32 on a CPU), SMOKE_VLLM=0 (skip the vLLM runs even where
# vLLM imports: what a GPU machine without vLLM runs), SMOKE_RUN_TIMEOUT (seconds per run, default 300 on
# a GPU, 1800 on a CPU), SMOKE_PORT (first of three free TCP ports, default 29531).
#
# On a GPU machine without network that has torch, transformers and accelerate but not DeepSpeed (what a
# borrowed machine usually holds; checked on CPU with transformers 5.17.0 and accelerate 1.15.0, no vLLM,
# no datasets): build the wheels with scripts/gpu_wheels.sh where pip works, carry .whl/ there, then
#   python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
#   PYTHON=python3 bash scripts/gpu_smoke.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PY=.venv/bin/python; fi
export SMOKE_CPU=${SMOKE_CPU:-0}
WORK=${SMOKE_WORK:-/tmp/qae_gpu_smoke}
RESULTS=${SMOKE_RESULTS:-$WORK/results}
if [ "$SMOKE_CPU" = 1 ]; then DTYPE=${SMOKE_DTYPE:-float32}; TIMEOUT=${SMOKE_RUN_TIMEOUT:-1800}
else DTYPE=${SMOKE_DTYPE:-bfloat16}; TIMEOUT=${SMOKE_RUN_TIMEOUT:-300}; fi
PORT=${SMOKE_PORT:-29531}
export WANDB_SILENT=true
RUNS=(zero3_hf plain_hf vllm_scale vllm_dynamic)
for name in model have.sh "${RUNS[@]}" "${RUNS[@]/%/.status}" "${RUNS[@]/%/.smi}"; do rm -rf "${WORK:?}/$name"; done
mkdir -p "$WORK" "$RESULTS"
T_START=$SECONDS

echo "== 1. environment"
"$PY" - "$WORK/have.sh" <<'EOF' | tee "$RESULTS/env.txt"
import importlib.metadata as md, importlib.util, os, sys

try:
    import torch
except ImportError:
    sys.exit(f"gpu_smoke: {sys.executable} cannot import torch; set PYTHON to the interpreter of the GPU environment")
if os.environ["SMOKE_CPU"] != "1" and not torch.cuda.is_available():
    sys.exit(f"gpu_smoke: no CUDA GPU visible (torch {torch.__version__}: torch.cuda.is_available() is False). "
             "Run it on a GPU machine, or SMOKE_CPU=1 to check the script itself on a CPU.")
missing = [m for m in ("accelerate", "transformers", "yaml", "sympy", "tqdm", "safetensors", "pyarrow", "matplotlib") if importlib.util.find_spec(m) is None]
if missing:  # datasets is not needed: train.py imports it only for parquet files and hub sets
    sys.exit(f"gpu_smoke: missing Python packages {missing}: install requirements.txt, or carry wheels "
             "(scripts/gpu_wheels.sh); this script installs nothing")
print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda})")
print(", ".join(f"{p} {md.version(p)}" for p in ("accelerate", "transformers")), "(requirements.txt pins 1.16.0, 5.19.0)")
have = {}
for name in ("deepspeed", "vllm"):
    if name == "vllm" and os.environ.get("SMOKE_VLLM", "1") == "0":
        print("vllm not tried (SMOKE_VLLM=0)")
        have[name] = 0
        continue
    try:
        module = __import__(name)
        print(f"{name} {module.__version__}")
        have[name] = 1
    except Exception as e:  # absent, or present but broken
        print(f"{name} NOT importable ({type(e).__name__}: {str(e)[:200]})")
        have[name] = 0
if not have["deepspeed"]:
    print("  -> no ZeRO-3: check 3 runs the plain process only (no comparison); check 4 runs vLLM without ZeRO-3")
if not have["vllm"]:
    print("  -> no vLLM: check 4 is skipped")
for i in range(torch.cuda.device_count()):
    p = torch.cuda.get_device_properties(i)
    print(f"GPU {i}: {p.name}, {p.total_memory / 2**30:.1f} GiB")
with open(sys.argv[1], "w") as f:
    f.write(f"HAVE_DS={have['deepspeed']}\nHAVE_VLLM={have['vllm']}\n")
EOF
# shellcheck disable=SC1091
. "$WORK/have.sh"

echo "== 2. random-init Qwen3 with Qwen3-0.6B's shape -> $WORK/model"
"$PY" - "$WORK/model" "$DTYPE" <<'EOF'
import os, sys, time

import torch
from transformers import AutoTokenizer, GenerationConfig, Qwen3Config, Qwen3ForCausalLM

out, dtype, cpu = sys.argv[1], getattr(torch, sys.argv[2]), os.environ["SMOKE_CPU"] == "1"
t0 = time.perf_counter()
tokenizer = AutoTokenizer.from_pretrained("tiny/model")  # 286 tokens, Qwen-style chat template
shape = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
             num_key_value_heads=8, head_dim=128)  # Qwen3-0.6B
if cpu:  # checking the script, not measuring: 2 small layers (vLLM's CPU attention needs head_dim >= 32), same vocabulary
    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=32)
cfg = Qwen3Config(vocab_size=151936, tie_word_embeddings=True, max_position_embeddings=40960, rms_norm_eps=1e-6,
                  rope_parameters={"rope_type": "default", "rope_theta": 1e6}, bos_token_id=tokenizer.pad_token_id,
                  eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **shape)
torch.manual_seed(0)
with torch.device("cpu" if cpu else "cuda"):
    model = Qwen3ForCausalLM(cfg).to(dtype)
model.save_pretrained(out)
tokenizer.save_pretrained(out)
GenerationConfig.from_pretrained("tiny/model").save_pretrained(out)  # stops on <|im_end|> or <|endoftext|>
n = sum(p.numel() for p in model.parameters())
print(f"{n:,} parameters, vocab {cfg.vocab_size:,} rows for {len(tokenizer)} tokens, {sys.argv[2]}; built in {time.perf_counter() - t0:.1f} s")
EOF

# run NAME LAUNCHER... -- OVERRIDES...: train.py --config tiny_qae.yaml under LAUNCHER; log in $RESULTS/NAME.log,
# metrics in $RESULTS/NAME.metrics.jsonl, "exit-status wall-seconds" in $WORK/NAME.status, nvidia-smi readings
# (MiB in use, every 200 ms) in $WORK/NAME.smi. The checkpoint train.py writes at the end is timed in the wall
# time and then deleted (disk).
run() {
  local name=$1; shift
  local launcher=()
  while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
  shift
  echo "-- $name: ${launcher[*]} train.py --config tiny_qae.yaml $*"
  local smi_pid="" rc=0 t0=$SECONDS
  if [ "$SMOKE_CPU" != 1 ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$WORK/$name.smi" 2>/dev/null &
    smi_pid=$!
  fi
  timeout --kill-after=30 "$TIMEOUT" "${launcher[@]}" train.py --config tiny_qae.yaml "$@" \
      "trainer.output_dir=$WORK/$name" logging.wandb=false trainer.save_every=0 trainer.keep_last=1 \
      > "$RESULTS/$name.log" 2>&1 || rc=$?
  if [ -n "$smi_pid" ]; then kill "$smi_pid" 2>/dev/null || true; fi
  echo "$rc $((SECONDS - t0))" > "$WORK/$name.status"
  for f in metrics.jsonl completions.jsonl; do
    if [ -f "$WORK/$name/$f" ]; then cp "$WORK/$name/$f" "$RESULTS/$name.$f"; fi
  done
  rm -rf "$WORK/$name/checkpoints"
  echo "   exit status $rc after $((SECONDS - t0)) s"
  if [ "$rc" != 0 ]; then tail -n 15 "$RESULTS/$name.log" | sed 's/^/   | /'; fi
}
# One process under ZeRO-3: `accelerate launch --num_processes 1` uses its simple launcher, which sets no
# RANK / WORLD_SIZE; train.py then gives itself the single-process values (infra.launch.make_accelerator).
ACCELERATE=("$PY" -m accelerate.commands.launch --num_processes 1)

echo "== 3. ZeRO-3 gradient accumulation: one optimizer step over several micro-batches, ZeRO-3 against a plain process"
if [ "$SMOKE_CPU" = 1 ]; then  # 4 prompts x 4 responses of <= 96 tokens in 160-token micro-batches: ~10 of them
  SIZE_A=(rollout.n=4 trainer.train_batch_size=4 trainer.mini_batch_size=4 rollout.max_response_len=96
          reward.overlong_buffer_len=95 trainer.micro_batch_max_tokens=160 reward.workers=2)
else  # 16 prompts x 8 responses of <= 256 tokens (~140 on average) in 2048-token micro-batches: ~10 of them
  SIZE_A=(rollout.n=8 trainer.train_batch_size=16 trainer.mini_batch_size=16 rollout.max_response_len=256
          reward.overlong_buffer_len=255 trainer.micro_batch_max_tokens=2048)
fi
COMMON_A=("model.name_or_path=$WORK/model" "model.dtype=$DTYPE" model.gradient_checkpointing=true rollout.backend=hf
          algorithm.dynamic_sampling=false trainer.gen_batch_size=null trainer.sparse_update=false
          trainer.total_steps=1 eval.every=0 logging.num_completions=100000 "${SIZE_A[@]}")
if [ "$HAVE_DS" = 1 ]; then
  run zero3_hf "${ACCELERATE[@]}" --main_process_port "$PORT" -- "${COMMON_A[@]}" deepspeed.zero_stage=3
else
  echo "-- zero3_hf: skipped, DeepSpeed does not import"
fi
run plain_hf "$PY" -- "${COMMON_A[@]}" deepspeed.zero_stage=0

echo "== 4. vLLM: one weight sync per step, KV cache, memory"
if [ "$HAVE_DS" = 1 ]; then
  ZERO_B=deepspeed.zero_stage=3
  LAUNCH_SCALE=("${ACCELERATE[@]}" --main_process_port $((PORT + 1)))
  LAUNCH_DYN=("${ACCELERATE[@]}" --main_process_port $((PORT + 2)))
else
  ZERO_B=deepspeed.zero_stage=0; LAUNCH_SCALE=("$PY"); LAUNCH_DYN=("$PY")
  echo "(no DeepSpeed: the vLLM runs are plain processes)"
fi
if [ "$SMOKE_CPU" = 1 ]; then
  export VLLM_CPU_KVCACHE_SPACE=1  # GiB of KV cache on a CPU
  EAGER=true  # vLLM's CPU build: no CUDA graphs
  SIZE_SCALE=(rollout.n=4 trainer.train_batch_size=4 trainer.mini_batch_size=2 rollout.max_response_len=16
              reward.overlong_buffer_len=4 trainer.micro_batch_max_tokens=4096 reward.workers=2)
  SIZE_DYN=(rollout.n=4 trainer.train_batch_size=4 trainer.gen_batch_size=2 trainer.mini_batch_size=2
            eval.limit=4 eval.n=2 reward.workers=2)
else
  EAGER=false  # CUDA graphs and torch.compile, as at scale: the sleep/wake and weight load must keep them valid
  SIZE_SCALE=(rollout.n=8 trainer.train_batch_size=32 trainer.mini_batch_size=16 rollout.max_response_len=1024
              reward.overlong_buffer_len=1023 trainer.micro_batch_max_tokens=8192)
  SIZE_DYN=(rollout.n=8 trainer.train_batch_size=16 trainer.gen_batch_size=8 trainer.mini_batch_size=8
            eval.limit=16 eval.n=4)
fi
if [ "$HAVE_VLLM" = 1 ]; then
  run vllm_scale "${LAUNCH_SCALE[@]}" -- "model.name_or_path=$WORK/model" "model.dtype=$DTYPE" model.gradient_checkpointing=true \
      rollout.backend=vllm "rollout.enforce_eager=$EAGER" algorithm.dynamic_sampling=false trainer.gen_batch_size=null \
      trainer.sparse_update=false trainer.total_steps=2 eval.every=0 rollout.logp_gap_max=null "${SIZE_SCALE[@]}" \
      "$ZERO_B"
  run vllm_dynamic "${LAUNCH_DYN[@]}" -- model.name_or_path=tiny/model "model.dtype=$DTYPE" rollout.backend=vllm \
      rollout.enforce_eager=true algorithm.dynamic_sampling=true trainer.total_steps=2 eval.every=1 "${SIZE_DYN[@]}" "$ZERO_B"
else
  echo "-- vllm_scale, vllm_dynamic: skipped, vLLM does not import"
fi

echo "== 5. packed vs padded micro-batches: the same gradient passes both ways (bench/bench_packing.py)"
if [ "$SMOKE_CPU" = 1 ]; then PACK=(cpu "$DTYPE" --mini-batches 1); else PACK=(cuda "$DTYPE" --mini-batches 4); fi
t0=$SECONDS
"$PY" bench/bench_packing.py --gradient-gap "${PACK[@]}" > "$RESULTS/packing.log" 2>&1 || echo "   failed (see $RESULTS/packing.log)"
echo "   $(tail -n 1 "$RESULTS/packing.log") in $((SECONDS - t0)) s"

echo "== 6. summary -> $RESULTS/summary.txt"
rc=0
"$PY" - "$WORK" "$RESULTS" "$DTYPE" "$((SECONDS - T_START))" <<'EOF' | tee "$RESULTS/summary.txt" || rc=$?
import json, math, os, re, sys
from pathlib import Path

work, results, dtype, total = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
cpu = os.environ["SMOKE_CPU"] == "1"
TOL = 0.02 if dtype in ("bfloat16", "float16") else 1e-3  # 16-bit: 2^-8 rounding per op; fp32: tests/test_zero3.py sees 1e-5
PACK_TOL = 0.05 if dtype in ("bfloat16", "float16") else 1e-4  # judgement in 16 bits; fp32 on a CPU: 4.9e-7
failed, rows, table, gaps = [], {}, [], {}
keys = ["time/sync", "time/rollout", "time/reward", "time/old_logp", "time/update", "time/step", "perf/peak_mem_gb",
        "perf/gen_tokens_per_s", "perf/train_tokens_per_s"]
heads = ["sync s", "rollout s", "reward s", "old_logp s", "update s", "step s", "peak GB", "gen tok/s", "upd tok/s"]


def check(ok: bool, what: str) -> None:
    print(f"  [{'PASS' if ok else 'FAIL'}] {what}")
    if not ok:
        failed.append(what)


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


print(f"gpu_smoke on {'CPU (checks the script only: no speed or memory figure means anything)' if cpu else 'GPU'}; dtype {dtype}")
print("\n".join(line for line in (results / "env.txt").read_text().splitlines() if not line.startswith("[")))
for name in ("zero3_hf", "plain_hf", "vllm_scale", "vllm_dynamic"):
    status = work / f"{name}.status"
    if not status.exists():
        print(f"\n{name}: not run (see above)")
        continue
    code, wall = map(int, status.read_text().split())
    metrics = results / f"{name}.metrics.jsonl"
    rows[name] = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    smi = work / f"{name}.smi"
    used = [int(x) for x in smi.read_text().split() if x.isdigit()] if smi.exists() else []
    print(f"\n{name}: exit status {code}{' (124: stopped by SMOKE_RUN_TIMEOUT)' if code == 124 else ''}, wall {wall} s"
          + (f", nvidia-smi peak {max(used) / 1024:.2f} GiB in use" if used else ""))
    timeout = re.search(r"^(collective timeout: .*|warning: trainer.collective_timeout_min .*)$",
                        (results / f"{name}.log").read_text(errors="replace"), re.M)
    print(f"  process groups: {timeout.group(1) if timeout else 'no timeout line (one plain process: no process group)'}")
    print("  step " + "".join(f"{h:>11}" for h in heads))
    for r in rows[name]:
        print(f"  {r['step']:>4} " + "".join(f"{r[k]:>11.2f}" if k in r else f"{'-':>11}" for k in keys))
    last = rows[name][-1] if rows[name] else {}
    table.append(f"| {name} | {wall} | " + " | ".join(f"{last[k]:.2f}" if k in last else "-" for k in keys)
                 + (f" | {max(used) / 1024:.2f} | " if used else " | - | "))
    table[-1] += (re.sub(r"^collective timeout: ", "", timeout.group(1)) if timeout else "no process group") + " |"
    steps = sum(r.get("time/step", 0.0) for r in rows[name])
    print(f"  steps {steps:.0f} s; start-up, final checkpoint, shut-down {wall - steps:.0f} s")
    check(code == 0 and len(rows[name]) > 0, f"{name}: train.py finished (log: {results / (name + '.log')})")

print("\n-- check 3: ZeRO-3 gradient accumulation (step 1: one optimizer step)")
if "zero3_hf" in rows and "plain_hf" in rows and rows["zero3_hf"] and rows["plain_hf"]:
    z, p = rows["zero3_hf"][0], rows["plain_hf"][0]
    for name, r in (("zero3_hf", z), ("plain_hf", p)):
        per_step = r["perf/micro_batches"] / max(r["optim/updates"], 1)
        check(per_step >= 3, f"{name}: {per_step:.0f} micro-batches in its optimizer step (>= 3 needed)")
        check(r["adv/zero_frac"] <= 0.5, f"{name}: adv/zero_frac {r['adv/zero_frac']:.2f} (<= 0.5: the gradient comes from "
              "most micro-batches, not only from one; otherwise dropping micro-batches could go unseen)")
    samples = {n: [json.loads(x)["response"] for x in (results / f"{n}.completions.jsonl").read_text().splitlines()]
               for n in ("zero3_hf", "plain_hf")}
    same = samples["zero3_hf"] == samples["plain_hf"]
    check(same, f"same samples: {len(samples['zero3_hf'])} responses, identical: {same}")
    for key in ("optim/grad_norm", "loss/policy"):
        gap = gaps[key] = rel(z[key], p[key])
        check(gap <= TOL or abs(z[key] - p[key]) <= 1e-6,
              f"{key}: ZeRO-3 {z[key]:.6g}, plain {p[key]:.6g}, relative gap {gap:.2e} (tolerance {TOL:g} for {dtype})")
    print(f"  (micro-batches: ZeRO-3 {z['perf/micro_batches']}, plain {p['perf/micro_batches']}; "
          f"response/len_mean {z['response/len_mean']:.1f} vs {p['response/len_mean']:.1f})")
else:
    print("  not compared: needs both runs (DeepSpeed importable, both finished)")

for name in ("vllm_scale", "vllm_dynamic"):
    if not rows.get(name):
        continue
    print(f"\n-- check 4: {name}")
    last = max(r["step"] for r in rows[name])
    for r in rows[name]:
        final_eval = r.get("eval/trained_steps") == r["step"] == last  # the last step syncs again for the final evaluation
        check(r["rollout/weight_syncs"] == 1 + final_eval,
              f"step {r['step']}: rollout/weight_syncs {r['rollout/weight_syncs']} (expected {1 + final_eval}"
              f"{', +1 for the final evaluation' if final_eval else ''}); sampling/gen_batches {r['sampling/gen_batches']}"
              + (f"; evaluation at this step (eval/trained_steps {r['eval/trained_steps']})" if "eval/trained_steps" in r else ""))
        diff, diff_max = r.get("rollout/logp_diff_mean", math.nan), r.get("rollout/logp_diff_max", math.nan)
        if name == "vllm_dynamic":
            limit = float(re.search(r"logp_gap_max: ([\d.e-]+)", (work / name / "config.yaml").read_text()).group(1))
            gaps.setdefault("engine", []).append((diff, diff_max, limit))
            check(diff <= limit and r["rollout/padded_ids"] == 0,
                  f"step {r['step']}: vLLM against the trainer: rollout/logp_diff_mean {diff:.2e} (train.py stops above "
                  f"rollout.logp_gap_max {limit:g}), max {diff_max:.2e}, padded ids sampled {r['rollout/padded_ids']}")
        else:  # vLLM masks the padded ids, which hold almost all of a random-init model's probability
            print(f"  step {r['step']}: rollout/logp_diff_mean {diff:.2f}, max {diff_max:.2f}: not a sync check on a random-init "
                  f"model (about -log(286 / 151,936) = 6.3: the mass vLLM masks); vllm_dynamic checks it")
    if name == "vllm_dynamic":
        gens = [r["sampling/gen_batches"] for r in rows[name]]
        check(min(gens) >= 2, f"dynamic sampling needed >= 2 generation batches in every step: {gens}")
    log = (results / f"{name}.log").read_text(errors="replace")
    for pattern in (r"vLLM model runner: .*", r"\w+ KV cache size: [\d,]+ tokens.*", r"Available KV cache memory: .*",
                    r"Model loading took .*",
                    r"Graph capturing finished .*", r"Memory profiling takes .*"):
        for line in sorted(set(re.findall(pattern, log)))[:2]:
            print(f"  vLLM: {line.strip()[:220]}")
    tokens = re.search(r"KV cache size: ([\d,]+) tokens", log)
    if name == "vllm_scale" and tokens and not cpu:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        c = AutoConfig.from_pretrained(work / "model")
        per_token = c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 2 * 2  # K and V, 2 B (bf16)
        with torch.device("meta"):
            n_params = sum(p.numel() for p in AutoModelForCausalLM.from_config(c).parameters())  # tied: counted once
        util = float(re.search(r"gpu_memory_utilization: ([\d.]+)", (work / name / "config.yaml").read_text()).group(1))
        total_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
        kv_gib = int(tokens.group(1).replace(",", "")) * per_token / 2**30
        weights_gib = 2 * n_params / 2**30
        print(f"  budget {util} x {total_gib:.1f} GiB = {util * total_gib:.1f} GiB = weights {weights_gib:.2f} "
              f"+ KV cache {kv_gib:.2f} ({per_token // 1024} KiB/token) + the rest {util * total_gib - weights_gib - kv_gib:.2f} GiB "
              "(activations, CUDA graphs, buffers: docs/gpu.md assumes ~3 GiB for Qwen3-8B)")

print("\n-- the table for docs/gpu.md's Measured section (each run's last step; seconds, GB, tokens/s)")
print("| run | wall s | " + " | ".join(heads) + " | nvidia-smi peak GiB | process-group timeout |")
print("|---" * (len(heads) + 4) + "|")
print("\n".join(table))
if "optim/grad_norm" in gaps:
    print(f"ZeRO-3 vs plain, step 1: optim/grad_norm relative gap {gaps['optim/grad_norm']:.2e}, "
          f"loss/policy {gaps['loss/policy']:.2e} ({dtype})")
if "engine" in gaps:
    print("vLLM vs trainer, vllm_dynamic: rollout/logp_diff_mean " + ", ".join(f"{d:.2e} (max {m:.2e})" for d, m, _ in
          gaps["engine"]) + f" per step; rollout.logp_gap_max {gaps['engine'][0][2]:g} ({dtype})")
packing = re.search(r"packed_vs_padded_grad_rel_diff=(\S+) (.*)", (results / "packing.log").read_text()) \
    if (results / "packing.log").exists() else None
if packing:
    print(f"packed vs padded micro-batches: gradient relative gap {packing.group(1)} {packing.group(2)}")
print()
check(packing is not None and float(packing.group(1)) <= PACK_TOL,
      f"packed vs padded: gradient relative gap {packing.group(1) if packing else 'missing'} (<= {PACK_TOL:g} for {dtype}; "
      f"log: {results / 'packing.log'})")
print(f"\nwhole script {total} s")
print("RESULT: " + ("every check passed" if not failed else f"{len(failed)} check(s) FAILED: " + "; ".join(failed)))
sys.exit(1 if failed else 0)
EOF
exit "$rc"
