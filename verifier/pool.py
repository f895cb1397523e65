"""A persistent pool of killable, memory-capped worker processes for the reward's sympy checks.

    run_checks({i: (pred, gold)}, timeout_s, workers) -> {i: True / False, or None on a timeout}

reward.score_batch sends here every answer that reward.bounded_verdict's string work cannot decide,
whichever reward entry asked; each worker answers with verifier.verdict.sympy_verdict(pred, gold)
(CHECK). The bound on a check is a process boundary: a worker that overruns timeout_s is killed and
replaced, and each worker runs under an address-space limit, so no answer can hang or exhaust the
trainer. Nothing here knows about math; a test can drive the pool with a stand-in worker.

Each choice below is repeated at its line.

Choices, numbered (a departure from the paper or verl says so; reasons in docs/algorithm.md, "Choices by module"):
1. Workers are plain `python -c` subprocesses speaking one JSON line per job, not multiprocessing's
   spawn/forkserver children.
2. The pool is created on first use, kept for the life of the process, rebuilt when the requested size
   changes and killed at exit; a forked child never uses its parent's workers but builds its own pool.
3. A worker that dies (e.g. at the memory limit) or overruns its job scores that job None (a timeout, scored
   incorrect) and is replaced; the other jobs are unaffected.
4. If no worker starts within STARTUP_LIMIT_S, or none can start at all, every pending job scores None.
"""

from __future__ import annotations

import atexit
import importlib
import json
import multiprocessing.connection as mp_connection
import os
import subprocess
import sys
import threading
import time
import warnings
from collections import deque

WORKER_MEMORY_BYTES = 1 << 30  # RLIMIT_AS of each worker (one idles at ~55 MB)
STARTUP_LIMIT_S = 60.0  # give up on workers that cannot start within this (choice 4)
CHECK = ("verifier.verdict", "sympy_verdict")  # module and function each worker runs on (pred, gold)
# Imported before a worker reports ready, so no job pays an import inside its time bound: the parser
# and sympy, and the two modules sympy imports on first use (Add on its first sum, 22-40 ms; set
# arithmetic).
PRELOAD = ("verifier.equal", "verifier.parse", "sympy.tensor.tensor", "sympy.sets.setexpr")

# ----------------------------------------------------------------------------------------------
# One worker: a subprocess answering `[pred, gold]` lines with 1 or 0
# ----------------------------------------------------------------------------------------------


def worker_loop(module: str, function: str, preload: list[str]) -> None:
    """Runs inside a worker: cap memory, import the check, then answer each job line."""
    import resource
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the trainer's; atexit kills us
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    for name in preload:  # sympy and the parser, before reporting ready: jobs are timed
        importlib.import_module(name)
    check = getattr(importlib.import_module(module), function)

    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        try:
            verdict = check(*json.loads(line))
        except Exception:  # noqa: BLE001 - a malformed job is incorrect
            verdict = False
        out.write("1\n" if verdict else "0\n")
        out.flush()


def worker_argv(check: tuple[str, str] = CHECK, preload: tuple[str, ...] = PRELOAD) -> list[str]:
    """The command that starts one worker: this interpreter, this folder on sys.path (choice 1)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder holding verifier/
    code = (f"import sys; sys.path.insert(0, {root!r}); from verifier import pool; "
            f"pool.worker_loop({check[0]!r}, {check[1]!r}, {list(preload)!r})")
    return [sys.executable, "-c", code]


class Worker:
    def __init__(self, argv: list[str]):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     close_fds=True)
        self.fd = self.proc.stdout.fileno()
        self.buffer = b""
        self.ready = False
        self.job: int | None = None  # index of the item it is checking
        self.since = 0.0  # when it was handed that job

    def send(self, job: int, payload: bytes) -> None:
        self.job, self.since = job, time.monotonic()
        self.proc.stdin.write(payload)
        self.proc.stdin.flush()

    def read_lines(self) -> list[str] | None:
        """Complete lines now readable; None if the worker has exited."""
        chunk = os.read(self.fd, 4096)
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [line.decode() for line in lines]

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


# ----------------------------------------------------------------------------------------------
# The pool: hand out jobs, kill overrunning workers, replace dead ones
# ----------------------------------------------------------------------------------------------


class Pool:
    """N workers; run() hands each a job and kills any that overruns (then starts a new one)."""

    def __init__(self, size: int, argv: list[str] | None = None):
        self.argv = argv or worker_argv()  # tests pass a stand-in worker
        self.pid = os.getpid()  # choice 2: a forked child must not use (or kill) these workers
        self.workers = [Worker(self.argv) for _ in range(size)]

    def replace(self, w: Worker) -> None:
        w.kill()
        self.workers[self.workers.index(w)] = Worker(self.argv)

    def run(self, jobs: dict[int, tuple], timeout_s: float) -> dict[int, bool | None]:
        """{index: args} -> {index: verdict, or None if it timed out or its worker died}."""
        pending, out = deque(jobs), {}
        started = time.monotonic()
        while pending or any(w.job is not None for w in self.workers):
            for w in list(self.workers):
                if w.ready and w.job is None and pending:
                    i = pending.popleft()
                    try:
                        w.send(i, (json.dumps(jobs[i]) + "\n").encode())
                    except OSError:  # it died while idle: retry the job on its replacement
                        pending.appendleft(i)
                        self.replace(w)
            deadlines = [w.since + timeout_s for w in self.workers if w.job is not None]
            wait_s = max(0.0, min(deadlines, default=time.monotonic() + 0.5) - time.monotonic())
            readable = mp_connection.wait([w.fd for w in self.workers], timeout=wait_s)
            now = time.monotonic()
            for w in list(self.workers):
                lines = w.read_lines() if w.fd in readable else []
                if lines is None:  # choice 3: died (e.g. out of memory); its job is None
                    if w.job is not None:
                        out[w.job] = None
                    self.replace(w)
                    continue
                for line in lines:
                    if line == "ready":
                        w.ready = True
                    elif w.job is not None:
                        out[w.job], w.job = line == "1", None
                if w.job is not None and now - w.since > timeout_s:
                    out[w.job] = None  # choice 3: overran; kill and replace
                    self.replace(w)
            if not any(w.ready for w in self.workers) and now - started > STARTUP_LIMIT_S:
                warnings.warn(f"verifier pool: no worker started within {STARTUP_LIMIT_S} s;"
                              f" {len(pending)} answers scored as timeouts", stacklevel=1)
                out.update({i: None for i in pending})  # choice 4: never hang
                break
        return out

    def close(self) -> None:
        for w in self.workers:
            w.kill()


# ----------------------------------------------------------------------------------------------
# The process-wide pool (choice 2)
# ----------------------------------------------------------------------------------------------

_POOL: Pool | None = None
_POOL_LOCK = threading.Lock()


def shutdown() -> None:
    """Kill this process's workers (also called at exit); the next run_checks starts new ones."""
    global _POOL
    if _POOL is not None and _POOL.pid == os.getpid():
        _POOL.close()
    _POOL = None


atexit.register(shutdown)


def default_workers() -> int:
    return max(1, min(4, len(os.sched_getaffinity(0))))


def run_checks(jobs: dict[int, tuple[str, str]], timeout_s: float,
               workers: int | None = None) -> dict[int, bool | None]:
    """{index: (pred, gold)} -> {index: the check's verdict, or None if it timed out}, on the
    process-wide pool of `workers` processes (default min(4, CPUs)). Never raises on OSError."""
    global _POOL
    if not jobs:
        return {}
    with _POOL_LOCK:
        size = workers or default_workers()
        try:
            if _POOL is None or _POOL.pid != os.getpid() or len(_POOL.workers) != size:
                shutdown()
                _POOL = Pool(size)
            return _POOL.run(jobs, timeout_s)
        except OSError as exc:  # choice 4: cannot start processes (fd or memory exhaustion)
            warnings.warn(f"verifier pool: worker pool failed ({exc}); "
                          f"{len(jobs)} answers scored as timeouts", stacklevel=1)
            shutdown()
            return {i: None for i in jobs}
