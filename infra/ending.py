"""How a run ends: a failure in one `error:` line (`stop`), or the teardown on every rank (`finish`).

    stop("config key `rollout.n` must be >= 2 ...")   # one line on rank 0, exit code 2 (or `code`), no traceback
    finish(accelerator, engine, stop_request.close, logger.close)  # files, then every process group; "rank R: done"

A line on stderr starts its own line even while a progress bar is drawing (`own_line`), so that a log file's
`grep ^error:` finds it. Several processes fail alike on bad input: rank 0 prints, the others wait STOP_GRACE_S so the
launcher does not kill rank 0 before its line; each writes torch elastic's error file, which the launcher reports.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

STOP_GRACE_S = 10.0  # how long a rank other than 0 waits in `stop` before it exits


def own_line(line: str) -> str:
    """`line`, after a newline when a progress bar is drawing on stderr: a bar's line ends in no newline until it
    closes, so in a log file the message would follow it on its line, where `grep ^error:` misses it."""
    from tqdm import tqdm

    return "\n" + line if any(not bar.disable for bar in list(getattr(tqdm, "_instances", ()))) else line


def stop(message: str, code: int = 2):
    """End the run with one line on stderr (rank 0) that also becomes torch elastic's reported cause:
    under accelerate's multi-process launchers each worker's error file (TORCHELASTIC_ERROR_FILE) is
    what the launcher prints as the failure's `traceback`."""
    line = f"error: {message}".splitlines()[0]
    if os.environ.get("RANK", "0") == "0":
        print(own_line(line), file=sys.stderr, flush=True)
    elif int(os.environ.get("WORLD_SIZE", "1")) > 1:  # rank 0 fails alike: let it print before the launcher, seeing
        time.sleep(STOP_GRACE_S)                      # this rank exit, kills the group (a loaded node: seconds apart)
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        try:
            Path(error_file).write_text(json.dumps({"message": line, "timestamp": int(time.time())}))
        except OSError:
            pass  # the line above is the message; the launcher then says it found no error file
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():  # as train.py's end: skip a teardown that can hang in DeepSpeed
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def finish(accelerator, engine, *closers) -> None:
    """The end of a run on every rank: `closers` called (files: the metrics log, the stop request), then the sampler's
    process groups while they exist, then accelerate's; "rank R: done" is each rank's last line (tests check it)."""
    for close in closers:
        close()
    accelerator.wait_for_everyone()
    engine.close()  # vLLM's process groups go while they exist, not at exit after the default one
    accelerator.end_training()  # also tears down the process group
    print(f"rank {accelerator.process_index}: done", file=sys.stderr, flush=True)
    if accelerator.num_processes > 1:
        sys.stdout.flush()
        os._exit(0)  # all files are closed; skip an interpreter teardown that can abort in DeepSpeed's comm threads
