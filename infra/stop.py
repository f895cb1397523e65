"""A stop asked for from outside the run, ending in a checkpoint instead of lost work.

Clusters end jobs at time limits and for preemption. SLURM can warn a job first (`--signal`), a
preemption sends SIGTERM, and torch elastic's agent forwards SIGTERM to its workers and kills them
30 s later. A stop is asked for by SIGUSR1, SIGTERM, or a file named `STOP` in `trainer.output_dir`
(for schedulers that cannot signal); the run finishes the step it is in, writes a checkpoint and
exits 0 with one line saying how to continue (`--resume`). docs/gpu.md has the SLURM lines.

Choices:
1. The signal handler only records the request, so a second signal during a save changes nothing.
2. Ranks agree at each step boundary through one all-reduce of a flag (`StopRequest.agreed`): all
   stop after the same step, and no collective is left waiting for a rank that stopped alone.
3. A stopped run exits 0: torch elastic counts a non-zero exit as a failure (and may restart it).
4. The handlers are set on train.py's first line, before the minutes of start-up at scale: a stop asked for then
   ends the run before its first step, with nothing to save (`watch` sets them again after the libraries load).
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import torch

STOP_FILE = "STOP"
SIGNALS = (signal.SIGUSR1, signal.SIGTERM)
REASONS = ("a STOP file", "SIGUSR1", "SIGTERM")  # codes 1, 2, 3 in the all-reduce; the largest wins


class StopRequest:
    """Records SIGUSR1 and SIGTERM from the moment it is made (choice 4), and sees a STOP file in the folder it
    watches."""

    def __init__(self):
        self.code = 0  # 0: no stop asked for; else 1 + index in REASONS
        self.file, self.is_main, self.started = None, False, time.time()
        for sig in SIGNALS:
            signal.signal(sig, self.record)  # choice 1

    def watch(self, output_dir: str | Path, is_main: bool) -> None:
        """Watch `output_dir` for a STOP file: one older than this process was left by an earlier stop and is removed
        (this launch was asked to run); one written since (a batch script's answer to a time-limit warning during
        start-up) asks this run to stop. Then take the signals back from any library that set its own handlers."""
        self.file, self.is_main = Path(output_dir) / STOP_FILE, is_main
        if self.file.exists() and self.file.stat().st_mtime < self.started - 1:  # 1 s: file times are coarse
            if is_main:
                self.file.unlink()
                print(f"removed `{self.file}` left by an earlier stop", file=sys.stderr)
        for sig in SIGNALS:
            signal.signal(sig, self.record)

    def record(self, signum, frame) -> None:
        self.code = max(self.code, 1 + REASONS.index(signal.Signals(signum).name))

    def agreed(self, accelerator) -> str | None:
        """Why the run stops after this step, if any rank was asked to, else None. A collective: every rank
        calls it at the same point (choice 2)."""
        if self.file is not None and self.file.exists():
            self.code = max(self.code, 1)
        code = self.code
        if accelerator.num_processes > 1:
            flag = torch.tensor([code], device=accelerator.device)
            torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
            code = int(flag.item())
        return REASONS[code - 1] if code else None

    def close(self) -> None:
        """The STOP file has been acted on: removed, so a resumed run does not stop at once. From here on
        the signals are ignored: one arriving during the exit must not turn a clean exit into a kill (at
        interpreter exit Python puts back the default action of a signal it handles, which ends the process)."""
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        if self.is_main and self.file is not None:
            self.file.unlink(missing_ok=True)
