"""scripts/slurm_job.sh decides from the run folder whether a SLURM job starts, resumes, requeues or stops, and a job
chain ends: no requeue unless the job left a newer complete checkpoint than it started from.

Each test builds a run folder in tmp_path and runs the real script job after job, as SLURM would: `scontrol`, `sbatch`
and `srun` are stubs on PATH that record their calls (a recorded `scontrol requeue` means SLURM would run the script
again), and `accelerate` is tests/slurm_fake_train.py, playing train.py's part from a plan. A chain is cut at MAX_JOBS.
docs/gpu.md's earlier script (--resume whenever checkpoints/ existed, a requeue whenever the final checkpoint was
missing) fails every test here that runs a script: it requeued up to the cut wherever the run had died before its first
complete checkpoint or failed without getting further, launched a finished run again, and requeued a run stopped by
hand; the warned chain of test_a_fresh_run_warned_before_its_first_save_is_requeued_and_finishes it ran alike, without
the script's lines.
"""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import slurm_fake_train
from config import ConfigError
from infra import checkpoint, safe_state

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "slurm_job.sh"
MAX_JOBS = 4
TOTAL, EVERY = 6, 2  # trainer.total_steps and trainer.save_every of every run here: step_000006 is the final checkpoint
RUN = ["--config", "qwen3_8b_qae.yaml", f"trainer.total_steps={TOTAL}", f"trainer.save_every={EVERY}"]


@dataclass
class Job:
    code: int  # the batch script's exit status
    launched: str | None  # "start" (train.py without --resume), "resume", or None: train.py not launched
    requeued: bool
    verdict: str  # the script's last line
    log: str  # everything the job printed, for a failing test's message


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A checkpoint infra.checkpoint.problem finds whole (ZeRO-3's layout, one rank), with tiny/model as its policy."""
    folder = tmp_path_factory.mktemp("template")
    safe_state.save({"step": 0, "world_size": 1, "scheduler": {}}, folder / checkpoint.STATE_FILE, "trainer state")
    safe_state.save({"rng": {}, "optimizer": {}}, checkpoint.rank_file(folder, 0), "rank state")
    (folder / "model").symlink_to(REPO / "tiny" / "model")
    return folder


def run_folder(root: Path, template: Path, metrics: int = 0, complete=(), tmp=(), incomplete=()) -> Path:
    """A run folder `root/run`: metrics.jsonl rows up to step `metrics`, whole checkpoints at the steps `complete`,
    `.tmp-step_N` folders at `tmp`, and step_N folders without trainer_state.pt at `incomplete`."""
    out = root / "run"
    out.mkdir(parents=True)
    if metrics:
        (out / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, metrics + 1)))
    for step in complete:
        slurm_fake_train.save(out, step, template)
    for step, name in [*((s, ".tmp-step") for s in tmp), *((s, "step") for s in incomplete)]:
        (out / "checkpoints" / f"{name}_{step:06d}").mkdir(parents=True)
    return out


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> Path:
    """A PYTHON for the script that answers `config.py *RUN trainer.output_dir=X` with what the real config.py printed
    for RUN once (with X put in), and runs the real Python for anything else: config.py's 1-2 s of imports once per
    file, not once per job."""
    folder = tmp_path_factory.mktemp("replay")
    resolved = subprocess.run([sys.executable, "config.py", *RUN, "trainer.output_dir=/REPLAYED_OUT"], cwd=REPO,
                              check=True, capture_output=True, text=True).stdout
    (folder / "resolved.yaml").write_text(resolved)
    stub, n = folder / "python", len(RUN) + 2  # its arguments: config.py, RUN, trainer.output_dir=X
    stub.write_text("#!/bin/sh\n"
                    f'if [ $# -eq {n} ] && [ "$*" = "config.py {" ".join(RUN)} ${{{n}}}" ]; then\n'
                    f'    exec sed "s|/REPLAYED_OUT|${{{n}#trainer.output_dir=}}|" "{folder}/resolved.yaml"\n'
                    "fi\n"
                    f'exec "{sys.executable}" "$@"\n')
    stub.chmod(0o755)
    return stub


@pytest.fixture
def slurm(tmp_path, template, replay):
    """run(out, plan, args=RUN, real_config=False): the chain of jobs SLURM would run for run folder `out`, as a list
    of Job; config.py's answer is replayed unless `real_config`."""
    bin_dir, calls, launches = tmp_path / "bin", tmp_path / "calls.log", tmp_path / "launches.log"
    bin_dir.mkdir()
    for name in ("scontrol", "sbatch", "srun"):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\n')
    (bin_dir / "accelerate").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{slurm_fake_train.__file__}" "$@"\n')
    for stub in bin_dir.iterdir():
        stub.chmod(0o755)

    def lines(path: Path) -> list[str]:
        return path.read_text().splitlines() if path.exists() else []

    def run(out: Path, plan: list[dict], args=RUN, real_config=False) -> list[Job]:
        python = sys.executable if real_config else str(replay)
        env = os.environ | {"PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHON": python,
                            "SLURM_JOB_ID": "4242", "FAKE_PLAN": json.dumps(plan), "FAKE_LOG": str(launches),
                            "FAKE_TEMPLATE": str(template)}
        jobs = []
        while len(jobs) < MAX_JOBS:
            seen, launched = len(lines(calls)), len(lines(launches))
            proc = subprocess.Popen(["bash", str(SCRIPT), *args, f"trainer.output_dir={out}"], cwd=REPO, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            waiting, deadline = Path(f"{launches}.waiting"), time.time() + 60
            while proc.poll() is None and time.time() < deadline:  # the time-limit warning, when train.py waits for it
                if waiting.exists():  # SLURM's --signal=B:USR1, to the batch shell only; twice: the second is moot
                    os.kill(proc.pid, signal.SIGUSR1)
                    time.sleep(0.02)
                    os.kill(proc.pid, signal.SIGUSR1)
                    while waiting.exists() and proc.poll() is None:
                        time.sleep(0.02)
                time.sleep(0.02)
            log = proc.communicate(timeout=10)[0]
            new_calls, new_launches = lines(calls)[seen:], lines(launches)[launched:]
            assert all(c == "scontrol requeue 4242" for c in new_calls), new_calls  # never sbatch, srun
            assert len(new_launches) <= 1, new_launches
            started = "--resume" not in json.loads(new_launches[0]) if new_launches else None
            jobs.append(Job(proc.returncode, None if started is None else "start" if started else "resume",
                            bool(new_calls), (log.strip().splitlines() or [""])[-1], log))
            if not new_calls:
                break
        return jobs

    return run


def chain(jobs: list[Job]) -> list[tuple]:
    return [(job.launched, job.requeued) for job in jobs]


# ----------------------------------------------------------------------------------------------
# A run that dies before its first complete checkpoint: one job, one line, no requeue
# ----------------------------------------------------------------------------------------------


def test_a_fresh_folder_starts_and_a_run_that_wrote_nothing_ends_the_chain(tmp_path, slurm):
    jobs = slurm(tmp_path / "run", [{"steps": 0, "end": "exit", "code": 1}])  # e.g. out of memory as it loads
    assert chain(jobs) == [("start", False)] and jobs[0].code == 1, jobs
    assert jobs[0].verdict == (f"slurm_job.sh: not requeued: train.py exited 1 before it wrote anything in "
                               f"`{tmp_path}/run`; the lines above say why: fix that and sbatch again")


def test_a_run_that_dies_before_its_first_save_ends_the_chain_naming_its_metrics(tmp_path, slurm):
    jobs = slurm(tmp_path / "run", [{"steps": 1, "end": "exit", "code": 1}])
    assert chain(jobs) == [("start", False)] and jobs[0].code == 1, jobs
    assert jobs[0].verdict.startswith("slurm_job.sh: not requeued: train.py exited 1 before its first complete "
                                      "checkpoint, leaving metrics.jsonl (last step 1) in ")
    assert jobs[0].verdict.endswith("delete `" + f"{tmp_path}/run` (or set trainer.output_dir to a new folder) and "
                                    "sbatch again")


def test_a_run_killed_in_its_first_save_ends_the_chain_naming_the_tmp_folder(tmp_path, slurm):
    jobs = slurm(tmp_path / "run", [{"steps": EVERY, "end": "cut_save"}])
    assert chain(jobs) == [("start", False)] and jobs[0].code == 1, jobs
    assert (f"leaving metrics.jsonl (last step {EVERY}), checkpoints/.tmp-step_{EVERY:06d} (a save cut short) in "
            in jobs[0].verdict)


@pytest.mark.parametrize("metrics", [0, 3])
def test_a_folder_with_only_a_tmp_checkpoint_is_not_launched(tmp_path, slurm, template, metrics):
    out = run_folder(tmp_path, template, metrics=metrics, tmp=[2])
    jobs = slurm(out, [{"steps": TOTAL, "end": "exit"}])
    assert chain(jobs) == [(None, False)] and jobs[0].code == 1, jobs
    found = (f"metrics.jsonl (last step {metrics}), " if metrics else "") + \
        "checkpoints/.tmp-step_000002 (a save cut short)"
    assert jobs[0].verdict == (f"slurm_job.sh: not started, not requeued: `{out}` holds {found} but no complete "
                               "checkpoint to resume (the run ended before its first save); delete "
                               f"`{out}` (or set trainer.output_dir to a new folder) and sbatch again")


def test_a_folder_with_metrics_but_no_checkpoints_is_not_launched(tmp_path, slurm, template):
    out = run_folder(tmp_path, template, metrics=1)
    jobs = slurm(out, [{"steps": TOTAL, "end": "exit"}])
    assert chain(jobs) == [(None, False)] and jobs[0].code == 1, jobs
    assert f"`{out}` holds metrics.jsonl (last step 1) but no complete checkpoint" in jobs[0].verdict


# ----------------------------------------------------------------------------------------------
# Checkpoints: requeue while each job gets further, stop when one does not, done at the final one
# ----------------------------------------------------------------------------------------------


def test_a_complete_checkpoint_is_resumed_and_requeued_while_each_job_gets_further(tmp_path, slurm, template):
    out = run_folder(tmp_path, template, metrics=2, complete=[2])
    jobs = slurm(out, [{"steps": 1, "end": "warned"},  # the time-limit warning after step 3: a stop, a checkpoint
                       {"steps": 1, "end": "exit", "code": 1},  # a crash after step 4, saved
                       {"steps": 0, "end": "exit", "code": 1}])  # a crash before step 5
    assert chain(jobs) == [("resume", True), ("resume", True), ("resume", False)], jobs
    assert [job.code for job in jobs] == [0, 0, 1], jobs
    assert jobs[0].verdict == ("slurm_job.sh: requeued: train.py exited 0 after writing step_000003 (this job started "
                               "from step_000002); the next job resumes from it")
    assert jobs[2].verdict == ("slurm_job.sh: not requeued: train.py exited 1 without writing a checkpoint newer than "
                               "step_000004, so a requeue would end alike; the lines above say why: fix that and "
                               "sbatch again")


def test_a_final_checkpoint_is_done_without_a_launch(tmp_path, slurm, template):
    out = run_folder(tmp_path, template, metrics=TOTAL, complete=[TOTAL - EVERY, TOTAL])
    jobs = slurm(out, [{"steps": TOTAL, "end": "exit"}])
    assert chain(jobs) == [(None, False)] and jobs[0].code == 0, jobs
    assert jobs[0].verdict == (f"slurm_job.sh: done, not requeued: `{out}/checkpoints/step_{TOTAL:06d}` is the run's "
                               f"final checkpoint (trainer.total_steps {TOTAL}); nothing to run")


@pytest.mark.parametrize("code", [2, 1])  # train.py's own code, and how accelerate launch reports it
@pytest.mark.parametrize("complete", [(), (2,)])
def test_a_run_refused_on_bad_input_is_not_requeued(tmp_path, slurm, template, code, complete):
    out = run_folder(tmp_path, template, metrics=2 if complete else 0, complete=complete)
    jobs = slurm(out, [{"steps": 0, "end": "refuse", "code": code}])
    assert chain(jobs) == [("resume" if complete else "start", False)] and jobs[0].code == 1, jobs
    assert jobs[0].verdict.startswith(f"slurm_job.sh: not requeued: train.py exited {code} "
                                      + ("without writing a checkpoint newer than step_000002" if complete else
                                         "before it wrote anything"))


def test_a_config_refused_by_config_py_is_not_launched(tmp_path, slurm):
    jobs = slurm(tmp_path / "run", [{"steps": TOTAL, "end": "exit"}], args=[*RUN, "trainer.total_stepz=3"])
    assert chain(jobs) == [(None, False)] and jobs[0].code == 2, jobs
    assert jobs[0].verdict.startswith("slurm_job.sh: not started, not requeued: config.py refused `--config "
                                      "qwen3_8b_qae.yaml")


def test_a_run_stopped_by_hand_is_not_requeued(tmp_path, slurm, template):
    out = run_folder(tmp_path, template, metrics=2, complete=[2])
    jobs = slurm(out, [{"steps": 1, "end": "asked"}])  # a STOP file written by hand after step 3
    assert chain(jobs) == [("resume", False)] and jobs[0].code == 0, jobs
    assert jobs[0].verdict == ("slurm_job.sh: not requeued: train.py stopped at step_000003 when asked by something "
                               "other than this job's time-limit warning (a STOP file, a signal); sbatch again to "
                               "continue from it")


# ----------------------------------------------------------------------------------------------
# What the tests above stand on
# ----------------------------------------------------------------------------------------------


def test_a_fresh_run_warned_before_its_first_save_is_requeued_and_finishes(tmp_path, slurm):
    """The chain the script is for (the earlier script ran it alike): warned, stopped with a checkpoint, resumed."""
    jobs = slurm(tmp_path / "run", [{"steps": 1, "end": "warned"}, {"steps": TOTAL, "end": "exit"}], real_config=True)
    assert chain(jobs) == [("start", True), ("resume", False)] and [job.code for job in jobs] == [0, 0], jobs
    assert jobs[1].verdict == (f"slurm_job.sh: done, not requeued: train.py exited 0 with "
                               f"`{tmp_path}/run/checkpoints/step_{TOTAL:06d}`, the run's final checkpoint")


def test_the_fake_train_refuses_the_folders_train_py_refuses(tmp_path, template):
    """slurm_fake_train.refusal against infra.checkpoint.resume_from, train.py's check, on every kind of folder here."""
    folders = [dict(), dict(metrics=1), dict(tmp=[2]), dict(metrics=3, tmp=[2]), dict(metrics=2, complete=[2]),
               dict(metrics=3, complete=[2], tmp=[4]), dict(metrics=4, complete=[2], incomplete=[4]),
               dict(metrics=TOTAL, complete=[TOTAL])]
    for i, kind in enumerate(folders):
        out = run_folder(tmp_path / str(i), template, **kind)
        for resume in (None, "latest"):
            try:
                checkpoint.resume_from(resume, out, 1, True)
                real = None
            except ConfigError as e:
                real = str(e)
            fake = slurm_fake_train.refusal(out, resume is not None)
            assert (fake is None) == (real is None), (kind, resume, fake, real)


def test_docs_gpu_md_shows_the_scripts_slurm_lines():
    """Every line of the SLURM block in docs/gpu.md is a line of scripts/slurm_job.sh."""
    doc = (REPO / "docs" / "gpu.md").read_text()
    block = doc[doc.index("    #SBATCH"):].split("\n\n")[0].splitlines()
    script = SCRIPT.read_text().splitlines()
    assert block and all(line[4:] in script for line in block), block
