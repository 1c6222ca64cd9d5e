"""Running the CLI in a forked child under limits on time and memory, for hostile input.

A fork inherits symform already imported and its caches warm, so each run costs
milliseconds, not an interpreter start. The child's address space may grow by
``memory_bytes`` at most (a bigger allocation fails as MemoryError, which the
CLI must never show as a traceback); the parent kills it after ``seconds``.
"""

from __future__ import annotations

import os
import resource
import signal
import tempfile
import time
from dataclasses import dataclass

from symform.interface.cli.cli import main

SECONDS = 20.0
MEMORY_BYTES = 2 * 2**30


@dataclass(frozen=True)
class Outcome:
    code: int | None  # None: killed at the time limit
    out: str
    err: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.code is None


def _address_space() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def run_limited(*argv: str, seconds: float = SECONDS, memory_bytes: int = MEMORY_BYTES, cwd: str | None = None) -> Outcome:
    """``symform ARGV`` in a child process: its exit status, stdout, stderr and wall time."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        pid = os.fork()
        if pid == 0:  # the child: never returns into the test runner
            code = 70
            try:
                os.dup2(out.fileno(), 1)
                os.dup2(err.fileno(), 2)
                limit = _address_space() + memory_bytes
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
                if cwd:
                    os.chdir(cwd)
                import sys

                sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
                sys.stderr = open(2, "w", encoding="utf-8", closefd=False)
                try:
                    code = main(list(argv))
                except SystemExit as e:
                    code = e.code if isinstance(e.code, int) else 1
                except BaseException:
                    import traceback

                    traceback.print_exc()
                    code = 71
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
        code = _wait(pid, seconds)
        elapsed = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        return Outcome(code, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"), elapsed)


def _wait(pid: int, seconds: float) -> int | None:
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return None
        time.sleep(0.005)
