#!/usr/bin/env bash
# GPU smoke test: short real runs of train.py on one GPU that exercise what breaks at scale, with the
# figures docs/gpu.md asks for, before a paper-scale run.
#
#   bash scripts/gpu_smoke.sh                # on an NVIDIA GPU (never timed on one yet; each run is stopped after
#                                            # SMOKE_RUN_TIMEOUT, 300 s)
#   SMOKE_CPU=1 bash scripts/gpu_smoke.sh    # the same runs on a CPU with 2-layer models: checks this script only
#
# What it checks, in order (docs/gpu.md, "Smoke test", says why):
#  1. Environment: exits 1 without a CUDA GPU or a package train.py needs (it installs nothing);
#     says whether DeepSpeed and vLLM import. A run that needs a missing one is skipped, saying so.
#  2. Models (scripts/smoke_models.py): a random-init Qwen3 of Qwen3-0.6B's shape (596,049,920 parameters, 151,936
#     tied vocabulary rows) with the tiny task's 286-token tokenizer, whose distribution is nearly flat over all the
#     rows ($WORK/model); and the same model made peaked like a trained one ($WORK/peaked: padded ids ~1e-8 of the
#     mass, the top token ~0.85), on which vLLM either matches the trainer or misses by nats.
#  3. ZeRO-3 gradient accumulation (runs zero3_hf, plain_hf): one training step of the flat model with the HF
#     sampler, under ZeRO-3 (`accelerate launch --num_processes 1`) and as a plain process, same seed, ONE optimizer
#     step over >= 3 micro-batches. Checked: the same samples; step 1's optim/grad_norm and loss/policy within TOL
#     (bf16: 2%; fp32: 1e-3); adv/zero_frac <= 0.5. (A forward that bypassed DeepSpeedEngine.forward kept only the
#     last micro-batch's gradient.) Dynamic sampling and the sparse update are off; the overlong buffer spans the
#     response budget, so rewards fall with length and most advantages are not zero.
#  4. vLLM under ZeRO-3, the production path: vLLM's default model runner, CUDA graphs and torch.compile
#     (enforce_eager false), the level-2 sleep and wake, load_weights into the live tensors. On the peaked model:
#     vllm_scale: 2 steps; train.py's own engine-vs-trainer check at the configs' bands (rollout.logp_gap_warn and
#       rollout.logp_gap_max at auto: 0.05 and 0.2 in bf16), the gap per step printed; the KV cache vLLM reports
#       against the budget; time/sync; memory. Its step-2 checkpoint is kept for:
#     vllm_resume: --resume from it to step 3, whose gap is checked as a start's (the resumed weights reach vLLM).
#     vllm_broken: scripts/smoke_broken_sync.py: every sync sends every name but no value, which the name check
#       passes; train.py must stop at step 1 with one `error:` line on the gap.
#     vllm_2ranks (2+ GPUs, or SMOKE_TWO_RANKS=1): vllm_scale on 2 processes: external_launcher engines, NCCL
#       gathers, the stop all-reduce, gather_object. With one GPU they are listed as unproven (NCCL refuses two
#       ranks on one device), with the CPU twins that check them on gloo.
#     vllm_dynamic: tiny/model (eager), a generation batch half the training batch (>= 2 per step) and evaluation
#       on the awake engine at step 1.
#     All: rollout/weight_syncs 1 per step (2 at the last step when the final evaluation ran); every sync's name check.
#  5. Packed against padded micro-batches (bench/bench_packing.py --gradient-gap): the two gradients' relative gap
#     <= 0.05 in bf16 (a judgement), 1e-4 in fp32 (4.9e-7 measured on a CPU).
#  6. Summary (scripts/smoke_summary.py): per run and step time/sync, time/rollout, time/reward, time/old_logp,
#     time/update, time/step, perf/peak_mem_gb and nvidia-smi's peak; every check's verdict; the engine-vs-trainer
#     gaps; the several-ranks table. All of it goes to $SMOKE_RESULTS/summary.txt: paste it into docs/gpu.md.
#
# Exit status: 0 when every check that ran passed; 1 otherwise (or when the environment is unfit).
# Settings: PYTHON (default .venv/bin/python if present, else python3), SMOKE_WORK (models and runs,
# default /tmp/qae_gpu_smoke), SMOKE_RESULTS (logs and summary, default $SMOKE_WORK/results),
# SMOKE_DTYPE (default bfloat16 on a GPU, float32 on a CPU), SMOKE_VLLM=0 (skip the vLLM runs even where
# vLLM imports: what a GPU machine without vLLM runs), SMOKE_RUNS (the runs to do, default all: "zero3_hf plain_hf
# vllm_scale vllm_resume vllm_broken vllm_2ranks vllm_dynamic"), SMOKE_TWO_RANKS (1: run vllm_2ranks, on gloo on a
# CPU; default 1 where 2 GPUs are visible), SMOKE_RUN_TIMEOUT (seconds per run, default 300 on a GPU, 1800 on a
# CPU), SMOKE_PORT (first of six free TCP ports, default 29531).
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
RUNS=(zero3_hf plain_hf vllm_scale vllm_resume vllm_broken vllm_2ranks vllm_dynamic)
SMOKE_RUNS=${SMOKE_RUNS:-${RUNS[*]}}
for name in model peaked have.sh "${RUNS[@]}" "${RUNS[@]/%/.status}" "${RUNS[@]/%/.smi}"; do rm -rf "${WORK:?}/$name"; done
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
    f.write(f"HAVE_DS={have['deepspeed']}\nHAVE_VLLM={have['vllm']}\nNGPU={torch.cuda.device_count()}\n")
EOF
# shellcheck disable=SC1091
. "$WORK/have.sh"

# shellcheck disable=SC1091
. "$WORK/have.sh"

echo "== 2. random-init Qwen3 with Qwen3-0.6B's shape, flat and peaked -> $WORK/model, $WORK/peaked"
SHAPE=(); if [ "$SMOKE_CPU" = 1 ]; then SHAPE=(--cpu); fi
"$PY" scripts/smoke_models.py "$WORK" "$DTYPE" "${SHAPE[@]}" 2>&1 | grep -v 'Writing model shards\|^\[' \
    | tee "$RESULTS/models.txt"

# want NAME: whether SMOKE_RUNS names the run (otherwise it says it skips it).
want() {
  case " $SMOKE_RUNS " in *" $1 "*) return 0 ;; esac
  echo "-- $1: skipped (not in SMOKE_RUNS)"
  return 1
}
# run NAME LAUNCHER... -- ARGS...: ${ENTRY:-train.py} --config tiny_qae.yaml ARGS under LAUNCHER, writing to
# ${OUT:-$WORK/NAME}, with --resume last where RESUME=1; log in $RESULTS/NAME.log, metrics in
# $RESULTS/NAME.metrics.jsonl, "exit-status wall-seconds" in $WORK/NAME.status, nvidia-smi readings (MiB in use,
# every 200 ms) in $WORK/NAME.smi. The checkpoint train.py writes at the end is timed in the wall time and then
# deleted (disk), unless KEEP=1.
run() {
  local name=$1; shift
  local launcher=() entry=${ENTRY:-train.py} out=${OUT:-$WORK/$name}
  while [ "$1" != "--" ]; do launcher+=("$1"); shift; done
  shift
  echo "-- $name: ${launcher[*]} $entry --config tiny_qae.yaml $*${RESUME:+ ... --resume}"
  local smi_pid="" rc=0 t0=$SECONDS resume=()
  if [ "${RESUME:-0}" = 1 ]; then resume=(--resume); fi  # last: the overrides before it are one positional list
  if [ "$SMOKE_CPU" != 1 ] && command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$WORK/$name.smi" 2>/dev/null &
    smi_pid=$!
  fi
  timeout --kill-after=30 "$TIMEOUT" "${launcher[@]}" "$entry" --config tiny_qae.yaml "$@" \
      "trainer.output_dir=$out" logging.wandb=false trainer.save_every=0 trainer.keep_last=1 "${resume[@]}" \
      > "$RESULTS/$name.log" 2>&1 || rc=$?
  if [ -n "$smi_pid" ]; then kill "$smi_pid" 2>/dev/null || true; fi
  echo "$rc $((SECONDS - t0))" > "$WORK/$name.status"
  for f in metrics.jsonl completions.jsonl; do
    if [ -f "$out/$f" ]; then cp "$out/$f" "$RESULTS/$name.$f"; fi
  done
  if [ "${KEEP:-0}" != 1 ]; then rm -rf "$out/checkpoints"; fi
  echo "   exit status $rc after $((SECONDS - t0)) s"
  if [ "$rc" != 0 ]; then grep -E "^error: " "$RESULTS/$name.log" | sort -u | cut -c1-300 | sed 's/^/   | /'; fi
  if [ "$rc" != 0 ] && [ "$name" != vllm_broken ]; then tail -n 15 "$RESULTS/$name.log" | sed 's/^/   | /'; fi
}
# One process under ZeRO-3: `accelerate launch --num_processes 1` uses its simple launcher, which sets no
# RANK / WORLD_SIZE; train.py then gives itself the single-process values (infra.launch.make_accelerator).
ACCELERATE=("$PY" -m accelerate.commands.launch --num_processes 1)

echo "== 3. ZeRO-3 gradient accumulation: one optimizer step over several micro-batches, ZeRO-3 against a plain process"
if [ "$SMOKE_CPU" = 1 ]; then  # 2 prompts x 4 responses of <= 96 tokens in 160-token micro-batches: ~5 of them
  SIZE_A=(rollout.n=4 trainer.train_batch_size=2 trainer.mini_batch_size=2 rollout.max_response_len=96
          reward.overlong_buffer_len=95 trainer.micro_batch_max_tokens=160 reward.workers=2)
else  # 16 prompts x 8 responses of <= 256 tokens (~140 on average) in 2048-token micro-batches: ~10 of them
  SIZE_A=(rollout.n=8 trainer.train_batch_size=16 trainer.mini_batch_size=16 rollout.max_response_len=256
          reward.overlong_buffer_len=255 trainer.micro_batch_max_tokens=2048)
fi
COMMON_A=("model.name_or_path=$WORK/model" "model.dtype=$DTYPE" model.gradient_checkpointing=true rollout.backend=hf
          algorithm.dynamic_sampling=false trainer.gen_batch_size=null trainer.sparse_update=false
          trainer.total_steps=1 eval.every=0 logging.num_completions=100000 "${SIZE_A[@]}")
if [ "$HAVE_DS" != 1 ]; then
  echo "-- zero3_hf: skipped, DeepSpeed does not import"
elif want zero3_hf; then
  run zero3_hf "${ACCELERATE[@]}" --main_process_port "$PORT" -- "${COMMON_A[@]}" deepspeed.zero_stage=3
fi
if want plain_hf; then run plain_hf "$PY" -- "${COMMON_A[@]}" deepspeed.zero_stage=0; fi

echo "== 4. vLLM: the production path held against the trainer, a broken sync, a resume, KV cache, memory"
if [ "$HAVE_DS" = 1 ]; then
  ZERO_B=deepspeed.zero_stage=3
  launch() { LAUNCH=("${ACCELERATE[@]}" --main_process_port $((PORT + $1))); }  # a port of its own per run
else
  ZERO_B=deepspeed.zero_stage=0
  launch() { LAUNCH=("$PY"); }
  echo "(no DeepSpeed: the vLLM runs are plain processes)"
fi
TWO_RANKS=${SMOKE_TWO_RANKS:-$([ "${NGPU:-0}" -ge 2 ] && echo 1 || echo 0)}
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
# the peaked model on the production path; rollout.logp_gap_warn and rollout.logp_gap_max stay at auto, as configs ship
COMMON_B=("model.name_or_path=$WORK/peaked" "model.dtype=$DTYPE" model.gradient_checkpointing=true rollout.backend=vllm
          "rollout.enforce_eager=$EAGER" algorithm.dynamic_sampling=false trainer.gen_batch_size=null
          trainer.sparse_update=false eval.every=0 "${SIZE_SCALE[@]}" "$ZERO_B")
if [ "$HAVE_VLLM" != 1 ]; then
  echo "-- vllm_scale, vllm_resume, vllm_broken, vllm_2ranks, vllm_dynamic: skipped, vLLM does not import"
else
  if want vllm_scale; then
    launch 1; KEEP=1 run vllm_scale "${LAUNCH[@]}" -- "${COMMON_B[@]}" trainer.total_steps=2
    if want vllm_resume; then  # continues vllm_scale's folder from its step-2 checkpoint
      launch 2
      OUT=$WORK/vllm_scale RESUME=1 run vllm_resume "${LAUNCH[@]}" -- "${COMMON_B[@]}" trainer.total_steps=3
    fi
    rm -rf "$WORK/vllm_scale/checkpoints"
  fi
  if want vllm_broken; then
    launch 3
    ENTRY=scripts/smoke_broken_sync.py run vllm_broken "${LAUNCH[@]}" -- "${COMMON_B[@]}" trainer.total_steps=2
  fi
  if [ "$HAVE_DS" != 1 ]; then
    echo "-- vllm_2ranks: skipped, DeepSpeed does not import"
  elif [ "$TWO_RANKS" != 1 ]; then  # listed as unproven in the summary
    echo "-- vllm_2ranks: skipped, fewer than 2 GPUs (NCCL refuses two ranks on one device; SMOKE_TWO_RANKS=1: gloo)"
  elif want vllm_2ranks; then
    run vllm_2ranks "$PY" -m accelerate.commands.launch --multi_gpu --num_processes 2 \
        --main_process_port $((PORT + 4)) -- "${COMMON_B[@]}" trainer.total_steps=2
  fi
  if want vllm_dynamic; then
    launch 5
    run vllm_dynamic "${LAUNCH[@]}" -- model.name_or_path=tiny/model "model.dtype=$DTYPE" rollout.backend=vllm \
        rollout.enforce_eager=true algorithm.dynamic_sampling=true trainer.total_steps=2 eval.every=1 \
        "${SIZE_DYN[@]}" "$ZERO_B"
  fi
fi

echo "== 5. packed vs padded micro-batches: the same gradient passes both ways (bench/bench_packing.py)"
if [ "$SMOKE_CPU" = 1 ]; then PACK=(cpu "$DTYPE" --mini-batches 1); else PACK=(cuda "$DTYPE" --mini-batches 4); fi
t0=$SECONDS
"$PY" bench/bench_packing.py --gradient-gap "${PACK[@]}" > "$RESULTS/packing.log" 2>&1 || echo "   failed (see $RESULTS/packing.log)"
echo "   $(tail -n 1 "$RESULTS/packing.log") in $((SECONDS - t0)) s"

echo "== 6. summary -> $RESULTS/summary.txt"
rc=0
"$PY" scripts/smoke_summary.py "$WORK" "$RESULTS" "$DTYPE" "$((SECONDS - T_START))" | tee "$RESULTS/summary.txt" \
    || rc=$?
exit "$rc"
