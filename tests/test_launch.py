"""The launch: the collective timeout read back from the process groups two gloo ranks create under
ZeRO-3 (the configured value and the default), and an accelerate config that disagrees with the
training YAML refused in one line naming the file, the default one included.

Run as a script under `accelerate launch` (what the timeout test does), this file builds the
accelerator as train.py does, prepares the tiny policy under ZeRO-3 (DeepSpeed creates its own
data-parallel group here) and writes the timeout of every process group of its rank, read from the
groups' backends, to `<out>.rank<N>.json`.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "WANDB_SILENT": "true", "OMP_NUM_THREADS": "1"}
ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", "29615"]  # parallel files


def probe(out: str, overrides: list[str]) -> None:
    """The script side: accelerator and ZeRO-3 engine as train.py builds them, then every group's timeout."""
    sys.path.insert(0, str(REPO))
    import torch
    from torch.distributed import distributed_c10d

    import config
    from infra import launch
    from infra.model import load_policy
    from infra.policy import Policy

    cfg = config.load("tiny_qae.yaml", ["deepspeed.zero_stage=3", *overrides])
    accelerator = launch.make_accelerator(cfg)
    hf = load_policy(cfg.model, str(REPO / "tiny" / "model"))
    accelerator.prepare(Policy(hf), torch.optim.AdamW(hf.parameters(), lr=1e-4))
    groups = {}
    for group, name in distributed_c10d._world.pg_names.items():  # every group this process belongs to
        for device in group._device_types:
            groups[f"{name}/{device.type}"] = group._get_backend(device).options._timeout.total_seconds()
    Path(f"{out}.rank{accelerator.process_index}.json").write_text(json.dumps(groups))


# configs/accelerate/zero3.yaml: accelerate starts the processes through deepspeed.init_distributed;
# the plain --multi_gpu launch: through torch.distributed.init_process_group (accelerate state.py).
LAUNCHES = {"deepspeed": ["--config_file", str(REPO / "configs" / "accelerate" / "zero3.yaml"), "--num_processes", "2",
                          "--mixed_precision", "no"],
            "plain": ["--multi_gpu", "--num_processes", "2"]}


@pytest.mark.parametrize("launch_kind, overrides, minutes", [
    ("deepspeed", ["trainer.collective_timeout_min=7"], 7.0),
    ("plain", [], 10.0),  # the key absent: config.py's default
    ("plain", ["trainer.collective_timeout_min=0.5"], 0.5),
])
def test_every_process_group_holds_the_configured_collective_timeout(tmp_path, launch_kind, overrides, minutes):
    out = tmp_path / "groups"
    proc = subprocess.run([*ACCELERATE, *LAUNCHES[launch_kind], __file__, str(out), *overrides], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for rank in (0, 1):
        groups = json.loads(Path(f"{out}.rank{rank}.json").read_text())
        # the default group and DeepSpeed's data-parallel clone of it (utils/groups._clone_world_group)
        assert len({k.split("/")[0] for k in groups}) >= 2, groups
        assert groups == {k: minutes * 60 for k in groups}, groups


# ----------------------------------------------------------------------------------------------
# Stale launch settings
# ----------------------------------------------------------------------------------------------


def cli(*argv: str):
    """accelerate's parsed launch command line."""
    from accelerate.commands.launch import launch_command_parser

    return launch_command_parser().parse_args([*argv, "train.py", "--config", "tiny_qae.yaml"])


def tiny(*overrides: str):
    import config

    return config.load("tiny_qae.yaml", list(overrides))


def test_the_launcher_command_line_names_the_config_file_read(tmp_path, monkeypatch):
    import accelerate.commands.config as accelerate_config

    from infra import launch

    cmdline = tmp_path / "cmdline"
    cmdline.write_bytes(b"\0".join([b"python", b"-m", b"accelerate.commands.launch", b"--config_file", b"x.yaml",
                                    b"--num_processes", b"2", b"train.py", b"--config", b"tiny_qae.yaml", b""]))
    args = launch.launcher_args({"ACCELERATE_MIXED_PRECISION": "no"}, cmdline)
    assert (args.config_file, args.num_processes, args.training_script) == ("x.yaml", 2, "train.py")
    assert launch.launch_config_file(args) == Path("x.yaml").resolve()
    assert launch.launcher_args({}, cmdline) is None  # not started by accelerate launch
    default = tmp_path / "default_config.yaml"
    monkeypatch.setattr(accelerate_config, "default_config_file", str(default))
    assert launch.launch_config_file(cli()) is None  # no default file
    default.write_text("compute_environment: LOCAL_MACHINE\n")
    assert launch.launch_config_file(cli()) == default  # read by a launch without --config_file
    assert launch.launch_config_file(cli("--cpu")) is None  # ... unless --cpu


def test_a_stale_default_config_is_refused_naming_the_file_the_field_and_the_fix(tmp_path):
    from infra import launch

    default = tmp_path / "default_config.yaml"
    env = {"ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_USE_DEEPSPEED": "true",
           "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"}
    stops, _ = launch.launch_problems(tiny("deepspeed.zero_stage=3"), env, cli(), default, gpus=None)
    assert stops == [f"`deepspeed_config.zero_stage` in `{default}` (accelerate's default config, read by every "
                     "`accelerate launch` without --config_file) sets ACCELERATE_DEEPSPEED_ZERO_STAGE=2, but config "
                     "key `deepspeed.zero_stage` gives 3; the training YAML decides: edit or delete that file, or "
                     "launch with --config_file configs/accelerate/zero3.yaml"]
    # the same value given on the command line is the command line's, with its own fix
    stops, _ = launch.launch_problems(tiny("deepspeed.zero_stage=3"), env, cli("--zero_stage", "2"), default, None)
    assert stops[0].startswith("the launch command's --zero_stage sets ACCELERATE_DEEPSPEED_ZERO_STAGE=2")
    assert stops[0].endswith("change --zero_stage in the launch command")


def test_mixed_precision_and_process_count_against_the_yaml_and_the_node(tmp_path):
    from infra import launch

    file = tmp_path / "launch.yaml"
    bf16 = {"ACCELERATE_MIXED_PRECISION": "bf16", "LOCAL_WORLD_SIZE": "2"}
    stops, _ = launch.launch_problems(tiny(), bf16, cli("--config_file", str(file)), file, gpus=None)  # fp32 model
    assert len(stops) == 1 and stops[0].startswith(f"`mixed_precision` in `{file}` asks for mixed_precision bf16")
    assert "config key `model.dtype` gives float32" in stops[0]
    bf16_model = tiny("model.dtype=bfloat16")
    assert launch.launch_problems(bf16_model, bf16, cli("--config_file", str(file)), file, gpus=None) == ([], [])
    # 2 processes from the file on an 8-GPU node: stopped; asked for on the command line: allowed; 9: never
    stops, _ = launch.launch_problems(bf16_model, bf16, cli("--config_file", str(file)), file, gpus=8)
    assert stops == [f"`num_processes` in `{file}` starts 2 process(es) on this node, which has 8 GPUs; edit that "
                     "file, or pass --num_processes 8"]
    asked = cli("--config_file", str(file), "--num_processes", "2")
    assert launch.launch_problems(bf16_model, bf16, asked, file, 8)[0] == []
    assert launch.launch_problems(bf16_model, {**bf16, "LOCAL_WORLD_SIZE": "9"}, None, None, gpus=8)[0] != []
    dynamo = {"ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_DYNAMO_BACKEND": "INDUCTOR"}
    assert "torch.compile" in launch.launch_problems(tiny(), dynamo, None, None, None)[0][0]


def test_fields_the_yaml_overrides_are_notes_not_errors(tmp_path):
    from infra import launch

    file = tmp_path / "launch.yaml"
    env = {"ACCELERATE_MIXED_PRECISION": "no", "ACCELERATE_USE_DEEPSPEED": "true",
           "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3", "ACCELERATE_GRADIENT_ACCUMULATION_STEPS": "4",
           "ACCELERATE_GRADIENT_CLIPPING": "1.0"}
    stops, notes = launch.launch_problems(tiny("model.dtype=bfloat16", "deepspeed.zero_stage=3"), env,
                                          cli("--config_file", str(file)), file, None)
    assert stops == [] and len(notes) == 2
    assert notes[0] == f"mixed_precision no (`mixed_precision` in `{file}`): model.dtype bfloat16 decides"
    assert notes[1].startswith(f"gradient_accumulation_steps 4 (`deepspeed_config.gradient_accumulation_steps` in "
                               f"`{file}`)")
    multi_gpu = {"ACCELERATE_MIXED_PRECISION": "no"}  # a MULTI_GPU launch config next to zero_stage 3
    stops, notes = launch.launch_problems(tiny("deepspeed.zero_stage=3"), multi_gpu, cli("--config_file", str(file)),
                                          file, None)
    assert stops == [] and notes[0].startswith(f"the launch asks for no DeepSpeed (`distributed_type` in `{file}`)")


STALE = {  # default configs `accelerate config` might have saved for another project
    "zero2": "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n  offload_optimizer_device: none\n"
             "  offload_param_device: none\nmixed_precision: 'no'\n",
    "bf16": "distributed_type: MULTI_GPU\nmixed_precision: bf16\n",
}


@pytest.mark.parametrize("kind, field", [("zero2", "deepspeed_config.zero_stage"), ("bf16", "mixed_precision")])
def test_plain_launch_with_a_stale_default_config_stops_in_one_line(tmp_path, kind, field):
    """`accelerate launch train.py --config ...` on a machine whose default accelerate config asks for
    2 processes and ZeRO-2, or bf16: the first line train.py prints is the error, naming that file."""
    default = tmp_path / "hf" / "accelerate" / "default_config.yaml"
    default.parent.mkdir(parents=True)
    default.write_text("compute_environment: LOCAL_MACHINE\n" + STALE[kind] + "machine_rank: 0\nnum_machines: 1\n"
                       "num_processes: 2\nuse_cpu: false\n")
    command = [*ACCELERATE, "train.py", "--config", "tiny_qae.yaml", f"trainer.output_dir={tmp_path / 'run'}"]
    proc = subprocess.run(command, cwd=REPO, env={**ENV, "HF_HOME": str(tmp_path / "hf")}, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0
    lines = proc.stderr.splitlines()
    ours = [x for x in lines if x.startswith("error: ")]
    assert len(ours) == 1 and f"`{field}` in `{default}` (accelerate's default config" in ours[0], proc.stderr[-3000:]
    # Only the launcher's own DeepSpeed import (zero2: accelerate's DeepSpeed launcher) may print before it.
    before = lines[:lines.index(ours[0])]
    assert all("real_accelerator.py" in x for x in before), before
    assert ours[0] in proc.stderr.split("Root Cause")[-1]  # torch elastic's summary names it too (the error file)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("rank, world, printed, slept", [("0", "2", True, []), ("1", "2", False, [10.0]),
                                                         ("0", "1", True, [])])
def test_only_rank_0_prints_and_the_others_give_it_time_to(monkeypatch, capsys, rank, world, printed, slept):
    """Every rank fails alike on bad input; were rank 1 to exit first, the launcher would kill rank 0 before its
    line (seen on a loaded machine), so the other ranks wait ending.STOP_GRACE_S before they exit."""
    from infra import ending

    monkeypatch.setenv("RANK", rank)
    monkeypatch.setenv("WORLD_SIZE", world)
    monkeypatch.delenv("TORCHELASTIC_ERROR_FILE", raising=False)
    waits = []
    monkeypatch.setattr(ending.time, "sleep", waits.append)
    with pytest.raises(SystemExit) as e:
        ending.stop("bad input\nsecond line")
    assert e.value.code == 2 and waits == slept
    assert capsys.readouterr().err == ("error: bad input\n" if printed else "")


def test_an_error_line_starts_its_own_line_in_a_log_file_while_a_bar_draws(tmp_path):
    """A progress bar's line has no newline until it closes; in a log file (stderr redirected, as under SLURM) the
    `error:` line must still start a line, where `grep ^error:` finds it. Read as bytes, split at newlines only."""
    log = tmp_path / "job.err"
    code = ("import sys\nfrom tqdm import tqdm\nfrom infra.ending import stop\n"
            "bar = tqdm(total=4, desc='train', file=sys.stderr)\nbar.update(1)\n"
            "stop('at step 2, something broke', code=1)\n")
    with open(log, "wb") as err:
        proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, stderr=err, env={**os.environ, "RANK": "0"})
    lines = log.read_bytes().split(b"\n")
    assert proc.returncode == 1 and b"error: at step 2, something broke" in lines, lines


if __name__ == "__main__":
    probe(sys.argv[1], sys.argv[2:])
