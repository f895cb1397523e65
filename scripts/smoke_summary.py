"""scripts/gpu_smoke.sh's checks and summary: reads each run's exit status, log, config and metrics, prints every
check as PASS or FAIL, the engine-vs-trainer gaps measured, what the smoke cannot show on one GPU, and the table for
docs/gpu.md's Measured section; exits 1 if a check failed.

    python scripts/smoke_summary.py WORK RESULTS DTYPE SECONDS   # as gpu_smoke.sh runs it, SMOKE_CPU set

The runs (gpu_smoke.sh says how each is launched): zero3_hf and plain_hf (check 3: ZeRO-3 gradient accumulation);
vllm_scale, vllm_resume, vllm_broken, vllm_2ranks and vllm_dynamic (check 4: vLLM); packing.log (check 5).
"""

import json
import math
import os
import re
import sys
from pathlib import Path

work, results, dtype, total = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
cpu = os.environ.get("SMOKE_CPU") == "1"
TOL = 0.02 if dtype in ("bfloat16", "float16") else 1e-3  # 16 bits: 2^-8 rounding per op; fp32: test_zero3.py sees 1e-5
PACK_TOL = 0.05 if dtype in ("bfloat16", "float16") else 1e-4  # judgement in 16 bits; fp32 on a CPU: 4.9e-7
RUNS = ("zero3_hf", "plain_hf", "vllm_scale", "vllm_resume", "vllm_broken", "vllm_2ranks", "vllm_dynamic")
EXPECTED_EXIT = {"vllm_broken": 1}  # stopped by train.py's engine-vs-trainer check; every other run finishes (0)
KEYS = ["time/sync", "time/rollout", "time/reward", "time/old_logp", "time/update", "time/step", "perf/peak_mem_gb",
        "perf/gen_tokens_per_s", "perf/train_tokens_per_s"]
HEADS = ["sync s", "rollout s", "reward s", "old_logp s", "update s", "step s", "peak GB", "gen tok/s", "upd tok/s"]
failed, rows, logs, table, gaps = [], {}, {}, [], []


def check(ok: bool, what: str) -> bool:
    print(f"  [{'PASS' if ok else 'FAIL'}] {what}")
    if not ok:
        failed.append(what)
    return ok


def rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-12)


def bands(name: str, out: str) -> tuple:
    """(rollout.logp_gap_warn, rollout.logp_gap_max) as the run resolved them (its config.yaml; null: None)."""
    text = (work / out / "config.yaml").read_text()
    found = [re.search(rf"{key}: (\S+)", text).group(1) for key in ("logp_gap_warn", "logp_gap_max")]
    return tuple(None if v == "null" else float(v) for v in found)


def run_table(name: str) -> None:
    """Exit status, wall time, per-step timings of one run, and its row of the Measured table."""
    code, wall = map(int, (work / f"{name}.status").read_text().split())
    metrics = results / f"{name}.metrics.jsonl"
    rows[name] = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    if name == "vllm_resume":  # it appended to vllm_scale's metrics: its own steps are the later ones
        before = max((r["step"] for r in rows.get("vllm_scale", [])), default=0)
        rows[name] = [r for r in rows[name] if r["step"] > before]
    logs[name] = (results / f"{name}.log").read_text(errors="replace")
    smi = work / f"{name}.smi"
    used = [int(x) for x in smi.read_text().split() if x.isdigit()] if smi.exists() else []
    print(f"\n{name}: exit status {code}{' (124: stopped by SMOKE_RUN_TIMEOUT)' if code == 124 else ''}, wall {wall} s"
          + (f", nvidia-smi peak {max(used) / 1024:.2f} GiB in use" if used else ""))
    timeout = re.search(r"^(collective timeout: .*|warning: trainer.collective_timeout_min .*)$", logs[name], re.M)
    print("  process groups: " + (timeout.group(1) if timeout else "no timeout line (one plain process: none)"))
    print("  step " + "".join(f"{h:>11}" for h in HEADS))
    for r in rows[name]:
        print(f"  {r['step']:>4} " + "".join(f"{r[k]:>11.2f}" if k in r else f"{'-':>11}" for k in KEYS))
    last = rows[name][-1] if rows[name] else {}
    group = re.sub(r"^collective timeout: ", "", timeout.group(1)) if timeout else "no process group"
    table.append(f"| {name} | {wall} | " + " | ".join(f"{last[k]:.2f}" if k in last else "-" for k in KEYS)
                 + (f" | {max(used) / 1024:.2f} | " if used else " | - | ") + group + " |")
    steps = sum(r.get("time/step", 0.0) for r in rows[name])
    print(f"  steps {steps:.0f} s; start-up, final checkpoint, shut-down {wall - steps:.0f} s")
    expected = EXPECTED_EXIT.get(name, 0)
    check(code == expected and len(rows[name]) > 0, f"{name}: train.py {'finished' if expected == 0 else 'stopped'} "
          f"(exit status {code}, expected {expected}; log: {results / (name + '.log')})")


def check_zero3() -> None:
    print("\n-- check 3: ZeRO-3 gradient accumulation (step 1: one optimizer step)")
    if not (rows.get("zero3_hf") and rows.get("plain_hf")):
        print("  not compared: needs both runs (DeepSpeed importable, both finished)")
        return
    z, p = rows["zero3_hf"][0], rows["plain_hf"][0]
    for name, r in (("zero3_hf", z), ("plain_hf", p)):
        per_step = r["perf/micro_batches"] / max(r["optim/updates"], 1)
        check(per_step >= 3, f"{name}: {per_step:.0f} micro-batches in its optimizer step (>= 3 needed)")
        check(r["adv/zero_frac"] <= 0.5, f"{name}: adv/zero_frac {r['adv/zero_frac']:.2f} (<= 0.5: the gradient comes "
              "from most micro-batches, not only from one; otherwise dropping micro-batches could go unseen)")
    samples = {n: [json.loads(x)["response"] for x in (results / f"{n}.completions.jsonl").read_text().splitlines()]
               for n in ("zero3_hf", "plain_hf")}
    same = samples["zero3_hf"] == samples["plain_hf"]
    check(same, f"same samples: {len(samples['zero3_hf'])} responses, identical: {same}")
    for key in ("optim/grad_norm", "loss/policy"):
        gap = rel(z[key], p[key])
        check(gap <= TOL or abs(z[key] - p[key]) <= 1e-6,
              f"{key}: ZeRO-3 {z[key]:.6g}, plain {p[key]:.6g}, relative gap {gap:.2e} (tolerance {TOL:g} for {dtype})")
        table.append(f"ZeRO-3 vs plain, step 1: {key} relative gap {gap:.2e} ({dtype})")
    print(f"  (micro-batches: ZeRO-3 {z['perf/micro_batches']}, plain {p['perf/micro_batches']}; "
          f"response/len_mean {z['response/len_mean']:.1f} vs {p['response/len_mean']:.1f})")


def check_vllm(name: str) -> None:
    """One sync per step, and vLLM against the trainer at the bands the run resolved (a broken sync must stop)."""
    print(f"\n-- check 4: {name}")
    out = "vllm_scale" if name == "vllm_resume" else name  # the resume continues vllm_scale's folder
    warn, stop = bands(name, out)
    if name == "vllm_broken":
        line = sorted(set(re.findall(r"error: .*", logs[name])))  # accelerate's launcher repeats the worker's stderr
        gap = rows[name][0]["rollout/logp_diff_mean"] if rows[name] else math.nan
        check(len(line) == 1 and line[0].startswith("error: at step 1, vLLM's log-probs are not the trainer's")
              and "is above rollout.logp_gap_max" in line[0], f"{name}: the sync broken on purpose (every name sent, "
              f"no value) stopped the run at step 1: rollout/logp_diff_mean {gap:.3g} above {stop}: "
              + (line[0][:160] if line else "no error: line"))
        gaps.append(f"{name} (sync broken on purpose) step 1: {gap:.3g}")
        return
    if name == "vllm_resume":
        first = rows[name][0]["step"] if rows[name] else None
        check(first == 3, f"{name}: resumed from vllm_scale's step-2 checkpoint: first step {first} (expected 3), its "
              "gap checked as a start's (the resumed weights reach vLLM)")
    last = max(r["step"] for r in rows[name])
    for r in rows[name]:
        final_eval = r.get("eval/trained_steps") == r["step"] == last  # the last step syncs again for it
        evaluated = f"; evaluation at this step (eval/trained_steps {r['eval/trained_steps']})" \
            if "eval/trained_steps" in r else ""
        check(r["rollout/weight_syncs"] == 1 + final_eval,
              f"{name} step {r['step']}: rollout/weight_syncs {r['rollout/weight_syncs']} (expected {1 + final_eval}"
              f"{', +1 for the final evaluation' if final_eval else ''}); sampling/gen_batches "
              f"{r['sampling/gen_batches']}{evaluated}")
        diff, diff_max = r["rollout/logp_diff_mean"], r["rollout/logp_diff_max"]
        gaps.append(f"{name} step {r['step']}: {diff:.3g} (max {diff_max:.3g})")
        check(stop is not None and diff <= stop and r["rollout/padded_ids"] == 0,
              f"{name} step {r['step']}: vLLM against the trainer: rollout/logp_diff_mean {diff:.3g} (max "
              f"{diff_max:.3g}; train.py stops above rollout.logp_gap_max {stop}, warns above logp_gap_warn {warn}"
              f"{': ABOVE THE WARNING' if warn is not None and diff > warn else ''}), padded ids sampled "
              f"{r['rollout/padded_ids']}")
    if name == "vllm_dynamic":
        gens = [r["sampling/gen_batches"] for r in rows[name]]
        check(min(gens) >= 2, f"{name}: dynamic sampling needed >= 2 generation batches in every step: {gens}")
    for pattern in (r"vLLM model runner: .*", r"\w+ KV cache size: [\d,]+ tokens.*", r"Available KV cache memory: .*",
                    r"Model loading took .*", r"Graph capturing finished .*", r"Memory profiling takes .*",
                    r"vLLM against the trainer, step .*"):
        for line in sorted(set(re.findall(pattern, logs[name])))[:2]:
            print(f"  log: {line.strip()[:220]}")
    tokens = re.search(r"KV cache size: ([\d,]+) tokens", logs[name])
    if name == "vllm_scale" and tokens and not cpu:
        kv_budget(name, int(tokens.group(1).replace(",", "")))


def kv_budget(name: str, tokens: int) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    c = AutoConfig.from_pretrained(work / "peaked")
    per_token = c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 2 * 2  # K and V, 2 B (bf16)
    with torch.device("meta"):
        n_params = sum(p.numel() for p in AutoModelForCausalLM.from_config(c).parameters())  # tied: counted once
    util = float(re.search(r"gpu_memory_utilization: ([\d.]+)", (work / name / "config.yaml").read_text()).group(1))
    total_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    kv_gib, weights_gib = tokens * per_token / 2**30, 2 * n_params / 2**30
    rest = util * total_gib - weights_gib - kv_gib
    print(f"  budget {util} x {total_gib:.1f} GiB = {util * total_gib:.1f} GiB = weights {weights_gib:.2f} + KV cache "
          f"{kv_gib:.2f} ({per_token // 1024} KiB/token) + the rest {rest:.2f} GiB (activations, CUDA graphs, buffers: "
          "docs/gpu.md assumes ~3 GiB for Qwen3-8B)")


def unproven() -> None:
    """What runs only with several ranks: shown by vllm_2ranks where it ran, else unproven on CUDA."""
    why = ("FAILED in vllm_2ranks" if any("vllm_2ranks" in f for f in failed) else
           f"vllm_2ranks: PASS{' (gloo, CPU)' if cpu else ''}" if "vllm_2ranks" in rows else
           "UNPROVEN: one process here (one GPU: NCCL refuses two ranks on one device)" if not cpu else
           "unproven by this CPU run (SMOKE_TWO_RANKS=1 runs it on gloo)")
    fillers = sum(r.get("perf/filler_passes", 0) for r in rows.get("vllm_2ranks", []))
    print("\n-- several ranks (what one process cannot show)")
    print("| at scale | here | CPU twin |\n|---|---|---|")
    for what, twin in (("vLLM engines under external_launcher, one per rank", "tests/test_vllm_zero3.py (gloo)"),
                       ("the stop all-reduce after every step (infra/stop.py), NCCL", "tests/test_zero3.py (gloo)"),
                       ("ZeRO-3 gathers across ranks into every engine, over NCCL", "tests/test_vllm_zero3.py"),
                       ("gather_object of every rank's step record", "tests/test_zero3.py")):
        print(f"| {what} | {why} | {twin} |")
    shown = f"{why}: {fillers:g} filler passes" if fillers else "UNPROVEN here (no rank had fewer micro-batches)"
    print(f"| filler passes of ranks with fewer micro-batches | {shown} | tests/test_zero3.py |")
    print("| a resume on another number of ranks (resharded ZeRO-3 state) | UNPROVEN on CUDA | tests/test_zero3.py |")
    print("| several nodes (NCCL across hosts, shared checkpoint storage) | UNPROVEN | none |")


print(f"gpu_smoke on {'CPU (checks the script only: no speed or memory figure means anything)' if cpu else 'GPU'}; "
      f"dtype {dtype}")
print("\n".join(line for line in (results / "env.txt").read_text().splitlines() if not line.startswith("[")))
print((results / "models.txt").read_text().rstrip() if (results / "models.txt").exists() else "models: not built")
for name in RUNS:
    if (work / f"{name}.status").exists():
        run_table(name)
    else:
        print(f"\n{name}: not run (see above)")
check_zero3()
for name in RUNS[2:]:
    if name in rows and (rows[name] or name == "vllm_broken"):
        check_vllm(name)
unproven()
print("\n-- the table for docs/gpu.md's Measured section (each run's last step; seconds, GB, tokens/s)")
print("| run | wall s | " + " | ".join(HEADS) + " | nvidia-smi peak GiB | process-group timeout |")
print("|---" * (len(HEADS) + 4) + "|")
print("\n".join(table))
if gaps:
    print(f"vLLM vs trainer, rollout/logp_diff_mean ({dtype}): " + "; ".join(gaps))
packing = re.search(r"packed_vs_padded_grad_rel_diff=(\S+) (.*)", (results / "packing.log").read_text()) \
    if (results / "packing.log").exists() else None
if packing:
    print(f"packed vs padded micro-batches: gradient relative gap {packing.group(1)} {packing.group(2)}")
print()
check(packing is not None and float(packing.group(1)) <= PACK_TOL,
      f"packed vs padded: gradient relative gap {packing.group(1) if packing else 'missing'} (<= {PACK_TOL:g} for "
      f"{dtype}; log: {results / 'packing.log'})")
print(f"\nwhole script {total} s")
print("RESULT: " + ("every check passed" if not failed else f"{len(failed)} check(s) FAILED: " + "; ".join(failed)))
sys.exit(1 if failed else 0)
