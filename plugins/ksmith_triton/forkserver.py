"""Candidate workers forked from one process that has already imported torch, Triton and the harness.

Starting a candidate worker from nothing costs seconds of CPU (Python, torch, dynamo and sympy, Triton), and
an evolution starts one per evaluation: eight evaluations in flight kept most of a 16-core machine busy just
starting workers, which slowed the evaluations themselves. A fork server pays those imports once per
environment; each worker is then a ``fork()`` of it that only creates its CUDA context and launches the warm-up
kernel (``candidate_side.warm_up``).

Isolation is the same as a fresh process: the server never runs candidate code, never initialises CUDA (a CUDA
context does not survive ``fork``; this is checked before every fork), and serves one environment (a changed
variable gets a new server, as it gets new spares). Each forked worker is in its own session, reads its job on
its own stdin, writes its own stdout/stderr files and reports on its own pipe, exactly as a worker started with
``subprocess`` does: the driver makes those pipes and files and hands them over with ``SCM_RIGHTS``.

The server is the forked workers' parent, so it reaps them and tells the driver each one's exit status; to the
rest of the harness a forked worker looks like a ``subprocess.Popen`` (``ForkedProcess``: ``pid``, ``stdin``,
``poll``, ``wait``). ``KSMITH_FORKSERVER=0`` turns the server off (workers start with ``subprocess``).
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

MESSAGE_BYTES = 65536
SPAWN_TIMEOUT_S = 30.0
REAP_POLL_S = 0.05


def enabled() -> bool:
    return os.environ.get("KSMITH_FORKSERVER", "1").strip() not in ("0", "false", "no", "off")


# ---------------------------------------------------------------------------------------------------------------
# The driver's side
# ---------------------------------------------------------------------------------------------------------------


class ForkServerGone(OSError):
    """The server died or stopped answering; the caller starts workers another way."""


class ForkServer:
    """One server process for one environment, and the exit statuses of the workers it forked."""

    def __init__(self, env: dict[str, str], scratch: Path) -> None:
        self.scratch = scratch
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with open(scratch / "forkserver.log", "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ksmith_triton.worker", "forkserver", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=scratch,
                env=env,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
            )
        theirs.close()
        self._sock = ours
        self._spawn_lock = threading.Lock()  # one request in flight: the reply is the next "spawned"
        self._changed = threading.Condition()
        self._spawned: list[int | str] = []  # pids, or the server's error for a request
        self._exits: dict[int, int] = {}
        self._running: set[int] = set()
        self._gone = False
        self.ready = threading.Event()  # set once its imports are done: until then, start workers otherwise
        threading.Thread(target=self._read, daemon=True, name="ksmith-forkserver").start()

    def _read(self) -> None:
        while True:
            try:
                raw = self._sock.recv(MESSAGE_BYTES)
            except OSError:
                raw = b""
            if not raw:
                break
            message = json.loads(raw)
            with self._changed:
                if message.get("ready"):
                    self.ready.set()
                elif "exited" in message:
                    self._exits[int(message["exited"])] = int(message["code"])
                    self._running.discard(int(message["exited"]))
                elif "spawned" in message:
                    pid = int(message["spawned"])
                    self._exits.pop(pid, None)  # an earlier worker's pid, reused
                    self._spawned.append(pid)
                    self._running.add(pid)
                elif "error" in message:
                    self._spawned.append(str(message["error"]))
                self._changed.notify_all()
        with self._changed:
            self._gone = True
            self._changed.notify_all()
        self.ready.clear()

    def alive(self) -> bool:
        return not self._gone and self.proc.poll() is None

    def log_tail(self, chars: int = 600) -> str:
        """The end of the server's own output (its imports' errors), for a warning."""
        try:
            return (self.scratch / "forkserver.log").read_bytes()[-chars:].decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def busy(self) -> bool:
        """Some worker it forked still runs (closing the server now would lose that worker's exit status)."""
        with self._changed:
            return bool(self._running)

    def spawn(
        self, args: list[str], cwd: Path, stdout_path: Path, stderr_path: Path, report_fd: int
    ) -> ForkedProcess:
        """Fork a worker running ``python -m ksmith_triton.worker ARGS...`` in ``cwd``; ``report_fd`` is the
        write end of its report pipe (its number is passed in ARGS as the worker expects)."""
        stdin_read, stdin_write = os.pipe()
        theirs = [stdin_read]
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        try:
            theirs += [os.open(stdout_path, flags, 0o600), os.open(stderr_path, flags, 0o600), report_fd]
            with self._spawn_lock:
                request = json.dumps({"args": args, "cwd": str(cwd)}).encode()
                try:
                    socket.send_fds(self._sock, [request], theirs)
                except OSError as exc:
                    raise ForkServerGone(f"the fork server is gone: {exc}") from exc
                reply = self._next_spawned()
        except BaseException:
            os.close(stdin_write)
            raise
        finally:
            for fd in theirs[:3]:  # the worker has its own copies now (the report fd is the caller's)
                os.close(fd)
        if isinstance(reply, str):
            os.close(stdin_write)
            raise ForkServerGone(f"the fork server could not start a worker: {reply}")
        return ForkedProcess(self, reply, os.fdopen(stdin_write, "wb"))

    def _next_spawned(self) -> int | str:
        deadline = time.monotonic() + SPAWN_TIMEOUT_S
        with self._changed:
            while not self._spawned:
                remaining = deadline - time.monotonic()
                if self._gone or remaining <= 0:
                    raise ForkServerGone("the fork server stopped answering")
                self._changed.wait(remaining)
            return self._spawned.pop(0)

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            if pid in self._exits:
                return self._exits[pid]
            if not self._gone:
                return None
        # The server died before reporting: the worker was re-parented; it is over once its /proc entry is.
        return None if _running(pid) else -9

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        """The exit status of ``pid``, or None if it still runs after ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while pid not in self._exits and not self._gone:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._changed.wait(remaining)
        while (code := self.exit_code(pid)) is None:  # the server died: poll the orphan
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(REAP_POLL_S)
        return code

    def close(self) -> None:
        try:  # the server sees end-of-file and exits; its workers live on until theirs ends. shutdown, as
            self._sock.shutdown(socket.SHUT_RDWR)  # close alone would wait for the reader blocked in recv
        except OSError:
            pass
        self._sock.close()
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:  # still importing: it holds nothing worth waiting for
            self.proc.kill()
            self.proc.wait(timeout=5)


def proc_stat_fields(pid: int) -> list[str]:
    """The fields of ``/proc/PID/stat`` after the command's closing parenthesis (the command may hold spaces and
    parentheses), so the state (field 3) comes first; ``OSError`` once the process is gone."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _running(pid: int) -> bool:
    try:
        state = proc_stat_fields(pid)[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


class ForkedProcess:
    """The part of ``subprocess.Popen`` the harness uses, for a worker the fork server started."""

    def __init__(self, server: ForkServer, pid: int, stdin: Any) -> None:
        self._server = server
        self.pid = pid
        self.stdin = stdin
        self.args = ["forked", str(pid)]
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self._server.wait_exit(self.pid, timeout)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode


# ---------------------------------------------------------------------------------------------------------------
# The server's side: ``python -m ksmith_triton.worker forkserver SOCKET_FD``
# ---------------------------------------------------------------------------------------------------------------


def preload() -> None:
    """Everything a candidate worker imports before its job (``candidate_side.warm_up``), CUDA left alone."""
    import torch
    import triton  # noqa: F401

    from ksmith_triton import candidate_side, guards, locks, timing, warmkernel  # noqa: F401

    candidate_side.import_launch_path()
    if torch.cuda.is_initialized():
        raise RuntimeError("the fork server initialised CUDA; a forked worker could not use it")


def serve(argv: list[str]) -> int:
    sock = socket.socket(fileno=int(argv[0]))
    try:
        preload()
    except Exception as exc:  # noqa: BLE001 - told to the driver, which starts workers the other way
        sock.send(json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode())
        return 1
    import torch

    home = os.getcwd()  # what ``python -m`` put first on sys.path
    sock.send(json.dumps({"ready": True}).encode())
    while True:
        _reap(sock)
        readable, _, _ = select.select([sock], [], [], REAP_POLL_S)
        if not readable:
            continue
        try:
            raw, fds, _, _ = socket.recv_fds(sock, MESSAGE_BYTES, 4)
        except OSError:
            raw, fds = b"", []
        if not raw:
            return 0  # the driver is gone; the workers notice on their own stdin
        if torch.cuda.is_initialized():  # never: preload checked, and nothing here touches the GPU
            sock.send(json.dumps({"error": "CUDA was initialised in the fork server"}).encode())
            return 1
        request = json.loads(raw)
        sys.stdout.flush()
        sys.stderr.flush()
        ready_read, ready_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_read)
            _run_worker(sock, request, fds, ready_write, home)  # never returns
        os.close(ready_write)
        for fd in fds:
            os.close(fd)
        os.read(ready_read, 1)  # end-of-file once the worker has its own session: killpg finds it
        os.close(ready_read)
        sock.send(json.dumps({"spawned": pid}).encode())


def _reap(sock: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        sock.send(json.dumps({"exited": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def _run_worker(
    sock: socket.socket, request: dict[str, Any], fds: list[int], ready_write: int, home: str
) -> None:
    """In the forked child: become what ``subprocess`` would have started, run the worker, exit."""
    code = 1
    try:
        os.setsid()
        os.close(ready_write)
        sock.close()
        stdin_fd, stdout_fd, stderr_fd, report_fd = fds
        for fd, target in ((stdin_fd, 0), (stdout_fd, 1), (stderr_fd, 2)):
            os.dup2(fd, target)
            os.close(fd)
        # sys.stdin/stdout/stderr already wrap fds 0-2 (unbuffered: PYTHONUNBUFFERED is set; stdin never read;
        # both flushed before the fork), so they now read and write the worker's own pipe and files.
        os.chdir(request["cwd"])
        args = [str(report_fd) if a == "{report_fd}" else a for a in request["args"]]
        from ksmith_triton import worker

        # As ``python -m`` in its own directory would have them: imports look in the worker's own scratch
        # directory first, never in the server's (shared by every worker it forks).
        if sys.path and sys.path[0] == home:  # (absent under PYTHONSAFEPATH, as it would be for a fresh one)
            sys.path[0] = request["cwd"]
        sys.argv = [worker.__file__, *args]

        code = worker.main(args)
    except SystemExit as exc:  # as the interpreter ends on it: None is 0, anything else not an int is printed
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - as an uncaught exception ends a fresh interpreter
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)
