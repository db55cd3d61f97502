"""Child processes: spawning with a scrubbed environment, a scratch directory, limits, timeouts and kill.

A child is ``python -m ksmith_triton.worker ROLE`` (``candidate`` or ``reference``: ``worker.py``) in its own
session (so the whole process group can be killed), with stdout/stderr going to files in its scratch
directory, commands arriving on stdin and reports leaving on a separate pipe. Memory: on CPU the child caps
its own address space (RLIMIT_AS); on CUDA the driver maps huge virtual ranges, so the parent watches the
resident set size instead and kills past the limit.
"""

from __future__ import annotations

import json
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksmith_triton.forkserver import ForkedProcess, ForkServer, proc_stat_fields

SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD")
OUTPUT_TAIL_CHARS = 4000
RSS_POLL_S = 0.1


def scrubbed_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment without any variable whose name mentions a key, token, secret or password."""
    env = {k: v for k, v in os.environ.items() if not any(m in k.upper() for m in SECRET_MARKERS)}
    env.pop("TRITON_INTERPRET", None)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def private_dir(prefix: str) -> Path:
    """A fresh 0700 temporary directory, in memory (/dev/shm) where there is one: outputs pass through it."""
    shm = Path("/dev/shm")
    base = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


def process_cpu_seconds(pid: int) -> float | None:
    """User and system CPU seconds of process ``pid`` and of the children it has waited for (Triton's ptxas, say),
    from ``/proc/PID/stat`` as the kernel keeps them: read from outside, so the candidate cannot change them.
    ``None`` where there is no such file (not Linux, or the process is gone)."""
    try:
        fields = proc_stat_fields(pid)
        # From the state (field 3) on: utime is field 14, stime 15, cutime 16, cstime 17.
        return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


@dataclass
class ChildExit:
    """How a child ended when it ended without a report we waited for."""

    kind: str  # "timeout" | "signal" | "exit" | "memory"
    code: int | None = None
    signal_name: str | None = None

    def describe(self) -> str:
        if self.kind == "signal":
            return f"killed by signal {self.signal_name}"
        if self.kind == "exit":
            return f"exited with code {self.code} before reporting"
        if self.kind == "memory":
            return "killed for exceeding the memory limit"
        return "timed out"


class Child:
    """One worker process and its channels.

    Messages from the worker are JSON lines on a dedicated pipe, each carrying the nonce this parent drew
    for the run; lines without it are counted as forgeries (the candidate shares the worker's process and
    can write to any of its fds, so the verdict never rests on a message alone where it can be avoided).
    """

    def __init__(
        self,
        role: str,
        job: dict[str, Any] | None,
        scratch: Path,
        env_extra: dict[str, str] | None = None,
        rss_limit_mb: int | None = None,
        warm_device: str | None = None,
        forkserver: ForkServer | None = None,
    ) -> None:
        """Start the worker. With ``job=None`` it starts idle (imports done, waiting): ``start(job)`` later.
        ``warm_device`` ("cuda" or "cpu") has an idle candidate worker warm up for that device (CUDA context,
        Triton launch path) before its job arrives. With ``forkserver`` the worker is forked from it (whose
        environment is ``env_extra``'s) instead of started as a new interpreter."""
        self.nonce = secrets.token_hex(16)
        self.scratch = scratch
        self.rss_limit_mb = rss_limit_mb
        self.env = scrubbed_environment(env_extra)
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.forged = 0
        self._cpu_at_kill: float | None = None  # ``cpu_seconds`` once the process is gone
        self.stdout_path = scratch / "stdout.txt"
        self.stderr_path = scratch / "stderr.txt"
        read_fd, write_fd = os.pipe()
        tail = [warm_device] if warm_device else []
        self.proc: subprocess.Popen[bytes] | ForkedProcess
        try:
            if forkserver is not None:
                self.proc = forkserver.spawn(
                    [role, "{report_fd}", *tail], scratch, self.stdout_path, self.stderr_path, write_fd
                )
            else:
                argv = [sys.executable, "-m", "ksmith_triton.worker", role, str(write_fd), *tail]
                with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
                    self.proc = subprocess.Popen(
                        argv,
                        stdin=subprocess.PIPE,
                        stdout=out,
                        stderr=err,
                        cwd=scratch,
                        env=self.env,
                        pass_fds=(write_fd,),
                        start_new_session=True,
                    )
        except BaseException:
            os.close(read_fd)
            raise
        finally:
            os.close(write_fd)
        self._reader = threading.Thread(target=self._read, args=(read_fd,), daemon=True)
        self._reader.start()
        if job is not None:
            self.start(job)

    def start(self, job: dict[str, Any]) -> None:
        """Hand the worker its job (the first line it reads, with the nonce its reports must carry)."""
        self.send({"nonce": self.nonce, **job})

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb") as pipe:
            for raw in pipe:
                try:
                    message = json.loads(raw)
                except ValueError:
                    self.forged += 1
                    continue
                if not isinstance(message, dict) or message.pop("nonce", None) != self.nonce:
                    self.forged += 1
                    continue
                self.messages.put(message)
        self.messages.put(None)  # end of channel

    def send(self, command: dict[str, Any]) -> bool:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write((json.dumps(command) + "\n").encode())
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def cpu_seconds(self) -> float | None:
        """CPU seconds the worker has used so far (see :func:`process_cpu_seconds`); once it was killed, what it
        had used just before (its pid may belong to another process by then)."""
        if self.proc.poll() is None:
            now = process_cpu_seconds(self.proc.pid)
            if now is not None:
                return now
        return self._cpu_at_kill

    def _rss_mb(self) -> float:
        try:
            pages = int(Path(f"/proc/{self.proc.pid}/statm").read_text().split()[1])
            return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
        except (OSError, ValueError, IndexError):
            return 0.0

    def wait_message(
        self, kind: str, timeout_s: float, collect: tuple[str, list[dict[str, Any]]] | None = None
    ) -> dict[str, Any] | ChildExit:
        """The next message of ``kind`` (an ``error`` message also returns), or how the child ended.

        ``collect=(other_kind, into)`` appends the messages of ``other_kind`` that arrive before it to ``into``
        (the timed calls' reports, sent one by one while the child times); other messages are dropped."""
        deadline = time.monotonic() + timeout_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                return ChildExit("timeout")
            if self.rss_limit_mb and self._rss_mb() > self.rss_limit_mb:
                self.kill()
                return ChildExit("memory")
            try:
                message = self.messages.get(timeout=min(RSS_POLL_S, remaining))
            except queue.Empty:
                continue
            if message is None:  # channel closed: the process is gone or going
                return self._exit_status(deadline)
            if message.get("kind") in (kind, "error"):
                return message
            if collect is not None and message.get("kind") == collect[0]:
                collect[1].append(message)

    def _exit_status(self, deadline: float) -> ChildExit:
        try:
            code = self.proc.wait(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            self.kill()
            return ChildExit("timeout")
        self.kill()  # whatever it left behind in its group
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = str(-code)
            return ChildExit("signal", code, name)
        return ChildExit("exit", code)

    def kill(self) -> None:
        if self._cpu_at_kill is None and self.proc.poll() is None:
            self._cpu_at_kill = process_cpu_seconds(self.proc.pid)
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def finish(self, timeout_s: float = 10.0) -> None:
        """Ask the worker to exit, then make sure its whole group is gone."""
        self.send({"op": "exit"})
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    def output_tail(self) -> dict[str, str]:
        def tail(path: Path) -> str:
            try:
                data = path.read_bytes()[-OUTPUT_TAIL_CHARS:]
            except OSError:
                return ""
            return data.decode("utf-8", "replace")

        return {"stdout": tail(self.stdout_path), "stderr": tail(self.stderr_path)}


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
