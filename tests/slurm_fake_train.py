"""A stand-in for `accelerate launch train.py ...` in tests/test_slurm.py, quick enough to run a chain of SLURM jobs in
seconds. It refuses a run folder where train.py does (`refusal`: infra.checkpoint.resume_from's rules, held against
that function by test_slurm.py), then plays one job's part from a plan, writing what train.py writes: a metrics.jsonl
row per step, and checkpoints written into `checkpoints/.tmp-step_N` and renamed into place (copies of a whole
checkpoint that test_slurm.py builds). Exit codes are train.py's own (2: refused input); `accelerate launch` reports
any failure as 1, which a plan entry can play.

Environment: FAKE_PLAN, a JSON list with one entry per launch (the last one serves every later launch); FAKE_LOG, a
file each launch appends its arguments to; FAKE_TEMPLATE, the checkpoint to copy. An entry {"steps": n, "end": END,
"code": c} runs n steps (at most up to trainer.total_steps), saving every trainer.save_every steps and at the last
step, then ends by END:
    exit      exit with `code` (default 0: a finished run; 1 or 137: a crash)
    cut_save  killed while saving the step it reached (one due for a save): a `.tmp-step_N` folder left, exit 137
    warned    wait for a STOP file (the batch script's time-limit trap writes it), save that step, exit 0
    asked     a stop asked for some other way (a STOP file written by hand): save that step, exit 0
    refuse    before any step: one `error:` line and exit `code` (default 2), as train.py on bad input
While it waits for the STOP file, the file FAKE_LOG + ".waiting" exists.
"""

import json
import os
import shutil
import sys
import time
from pathlib import Path


def newest(out: Path) -> Path | None:
    """The newest checkpoint folder, complete or not (infra.checkpoint.newest)."""
    found = [p for p in (out / "checkpoints").glob("step_*") if p.is_dir() and p.name[5:].isdigit()]
    return max(found, key=lambda p: int(p.name[5:]), default=None)


def refusal(out: Path, resume: bool) -> str | None:
    """Why train.py refuses to start in run folder `out` (with --resume when `resume`), or None: the rules of
    infra.checkpoint.resume_from for the folders this file and test_slurm.py make."""
    found = newest(out)
    if not resume and found is not None:
        return f"trainer.output_dir `{out}` already holds checkpoints up to {found.name}; pass --resume"
    if not resume and (out / "metrics.jsonl").exists():
        return f"trainer.output_dir `{out}` holds an earlier run's metrics.jsonl but no checkpoint"
    if resume and found is None:
        return f"--resume: no complete checkpoint in `{out}`"
    if resume and not (found / "trainer_state.pt").is_file():
        return f"--resume: checkpoint `{found}` is damaged: trainer_state.pt is missing"
    return None


def save(out: Path, step: int, template: Path, cut_short: bool = False) -> None:
    """Checkpoint `step` as infra.checkpoint.save writes it: a `.tmp-` folder, renamed into place when whole."""
    tmp, final = out / "checkpoints" / f".tmp-step_{step:06d}", out / "checkpoints" / f"step_{step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(template, tmp, symlinks=True)
    if cut_short:
        (tmp / "trainer_state.pt").unlink()
        sys.exit(137)
    os.rename(tmp, final)


def main(argv: list[str]) -> None:
    assert argv[:2] == ["launch", "train.py"], argv
    log = Path(os.environ["FAKE_LOG"])
    launches = log.read_text().splitlines() if log.exists() else []
    with open(log, "a") as f:
        f.write(json.dumps(argv[2:]) + "\n")
    plan = json.loads(os.environ["FAKE_PLAN"])
    entry = plan[min(len(launches), len(plan) - 1)]
    overrides = dict(a.split("=", 1) for a in argv if "=" in a)
    out, resume = Path(overrides["trainer.output_dir"]), "--resume" in argv
    total, every = int(overrides["trainer.total_steps"]), int(overrides["trainer.save_every"])
    template = Path(os.environ["FAKE_TEMPLATE"])

    why = refusal(out, resume) or ("data file `train.parquet` not found" if entry["end"] == "refuse" else None)
    if why:
        print(f"error: {why}", file=sys.stderr)
        sys.exit(entry.get("code", 2) if entry["end"] == "refuse" else 2)
    out.mkdir(parents=True, exist_ok=True)
    (out / "STOP").unlink(missing_ok=True)  # as infra/stop.py: a STOP file from an earlier stop is removed at start
    start = int(newest(out).name[5:]) if resume else 0
    step, last = start, min(start + entry["steps"], total)
    for step in range(start + 1, last + 1):
        with open(out / "metrics.jsonl", "a") as f:
            f.write(json.dumps({"step": step}) + "\n")
        if step % every == 0 or step == total:
            save(out, step, template, cut_short=entry["end"] == "cut_save" and step == last)
    if entry["end"] == "warned":
        waiting = Path(f"{log}.waiting")
        waiting.touch()
        deadline = time.time() + 30
        while not (out / "STOP").exists() and time.time() < deadline:
            time.sleep(0.02)
        waiting.unlink()
        assert (out / "STOP").exists(), "no STOP file within 30 s"
    if entry["end"] in ("warned", "asked"):
        (out / "STOP").unlink(missing_ok=True)
        if not (out / "checkpoints" / f"step_{step:06d}").is_dir():
            save(out, step, template)
        print(f"stopped after step {step} of {total}: checkpoint written; continue with --resume", file=sys.stderr)
        sys.exit(0)
    sys.exit(entry.get("code", 0))


if __name__ == "__main__":
    main(sys.argv[1:])
