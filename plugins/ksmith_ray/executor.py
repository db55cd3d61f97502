"""The ``ray`` executor: every evaluation on an actor of a Ray cluster, every verdict back to the driver.

- **Actors.** One per GPU (``num_gpus=1``) when the cluster has GPUs; on a cluster without any, one per CPU
  (``num_cpus=1``). They are started when a job needs one and every running actor is full, up to that count.
  Each actor runs up to ``--ray-slots`` evaluations at once (default 8 on a GPU, as a local run keeps 8 on one
  GPU; 1 on a CPU) with ksmith's own :func:`ksmith_core.engine.evaluate` -- the problem's backend, on that node,
  so the Triton backend still runs every candidate in its own killable child process and its GPU locks keep
  timed loops exclusive on that GPU, with its reference-timing cache there.
  Jobs travel as the frozen dataclasses (the problem carries its source text: no shared filesystem).
- **One pool per process.** All callers share it (``ksmith bench`` calls the executor from several threads);
  each call keeps at most ``parallel`` of its jobs in flight, spread over the least loaded actors.
- **Faults.** An actor that dies under a job (its process or its node lost, ``ray.kill``) is replaced and the
  job is tried again on another actor, :data:`MAX_ATTEMPTS` times in all (a verdict reached after such a loss
  lists them in ``details["worker_losses"]``); a job that loses its worker every time gets a ``crashed``
  verdict with a ``WORKER_LOST: ...`` reason. Nothing of the kind escapes ``run``.
  An error of the *problem* (``ProblemError``) is raised as with the local executor.
- **Priority.** Ray runs its workers at niceness 15; evaluations under an actor run at normal priority instead,
  as in a local run (a local cluster started by the executor gets ``RAY_worker_niceness=0``; an actor lowers
  its own where the OS allows; otherwise the driver warns).
- **The driver stays the only writer.** Actors return verdicts and never touch the run store; the actors are
  not detached, so they end with the driver's Ray job, and a resumed run connects afresh.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

from ksmith_core.capabilities import EvalJob
from ksmith_core.errors import KsmithError, PluginError
from ksmith_core.feedback import feedback_for
from ksmith_core.model import Status, Verdict

log = logging.getLogger(__name__)

MISSING_RAY = "the ray executor needs the 'ray' package: pip install 'kernel-smith[ray]'"
MAX_ATTEMPTS = 3  # a job whose actor dies is tried twice more, each time on another actor
DEFAULT_GPU_SLOTS = 8  # evaluations at once on one GPU actor, as a local run keeps 8 on one GPU
ACTOR_START_TIMEOUT_S = 120.0  # an actor that cannot start (no free GPU or CPU) in this long is given up
# Ray's errors that mean "the worker, its node or the result is gone", not "the job raised".
LOST_WORKER_ERRORS = (
    "RayActorError",  # ActorDiedError, ActorUnavailableError
    "WorkerCrashedError",
    "NodeDiedError",
    "ObjectLostError",
    "OutOfMemoryError",  # Ray's memory monitor killed the worker
)
RAY_NICENESS_ENV = "RAY_worker_niceness"  # Ray's setting for its workers' niceness (15 unless set)
# Which plugins load is the driver's choice: actors load the same ones (they must be installed there too).
FORWARDED_ENV = ("KSMITH_LOAD_PLUGINS", "KSMITH_DISABLE_PLUGINS", "KSMITH_PLUGIN_MODULES")


class RayNotInstalled(PluginError):
    """``--executor ray`` where the ``ray`` package cannot be imported."""


class RayClusterError(PluginError):
    """The Ray cluster cannot be reached, or has no room for a single actor."""


def import_ray():
    """The ``ray`` module, or :class:`RayNotInstalled` with the line that says what to install."""
    try:
        import ray
    except ImportError as exc:
        if getattr(exc, "name", None) == "ray":
            raise RayNotInstalled(MISSING_RAY) from None
        raise RayNotInstalled(f"{MISSING_RAY} (importing it failed: {type(exc).__name__}: {exc})") from None
    return ray


# --------------------------------------------------------------------------------------------------------------
# The actor: ksmith's own evaluate, on whichever node Ray placed it
# --------------------------------------------------------------------------------------------------------------


class EvalActor:
    """Evaluates jobs one at a time in a Ray worker process (wrapped by ``ray.remote`` when first used)."""

    def __init__(self) -> None:
        import ray

        # Ray's OMP_NUM_THREADS=1 stays: with several actors on one host, each running slots of evaluations
        # (candidate, reference and evaluator processes), letting every process use all cores cut two-GPU
        # throughput from 128.7 to 94.3 evaluations/min (docs/benchmarks.md, the Ray section).
        self.gpus = [str(g) for g in ray.get_gpu_ids()]

    def ready(self) -> dict[str, Any]:
        """Where this actor runs (also: the driver waits on this to know the actor started)."""
        return {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "gpus": self.gpus,
            "niceness": normal_priority(),  # what the processes it starts inherit
        }

    def evaluate(self, job: EvalJob) -> Verdict:
        from ksmith_core.engine import evaluate

        normal_priority()  # this thread starts the candidate and reference processes: they inherit its niceness
        options = job.options
        if self.gpus and options.gpu_index is not None:
            # Ray shows this actor its own GPU only; the driver's index means nothing here.
            options = replace(options, gpu_index=None)
        return evaluate(job.problem, job.candidate, options)


def normal_priority() -> int:
    """Undo Ray's worker niceness for the calling thread where the OS allows it; the niceness it runs at.

    Ray starts its workers at ``RAY_worker_niceness`` (15 by default), and every candidate and reference
    process an actor starts inherits it, so a timed loop would yield to anything else on the host at normal
    priority. Evaluations run at normal priority, as in a local run (docs/benchmarks.md §8c: the rates measured
    at 15 and at 0 differ less than machines do). Lowering a niceness needs privilege (root or CAP_SYS_NICE),
    so on a cluster started without ``RAY_worker_niceness=0`` an ordinary user's actors keep 15, and the driver
    warns when an actor reports it.
    Linux keeps a niceness per thread: this sets the calling thread's, which the processes it starts inherit.
    """
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current > 0:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
        except OSError:
            return current
        return os.getpriority(os.PRIO_PROCESS, 0)
    return current


_remote_class: Any = None
_remote_lock = threading.Lock()


def _actor_class(ray):
    global _remote_class
    with _remote_lock:
        if _remote_class is None:
            _remote_class = ray.remote(max_restarts=0, max_task_retries=0)(EvalActor)
        return _remote_class


# --------------------------------------------------------------------------------------------------------------
# The pool: actors shared by every caller of this process
# --------------------------------------------------------------------------------------------------------------


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".strip().rstrip(":")


class ActorPool:
    """Actors of one Ray connection, each taking up to ``slots`` jobs at once; replaced when they die.

    ``capacity`` is how many actors the cluster has room for (its GPUs, else its CPUs); ``slots`` how many
    evaluations one actor runs at once (``--ray-slots``: by default 8 on a GPU, as a local run keeps 8 on
    one GPU, and 1 on a CPU). A job goes to the least loaded actor; a new actor starts only when every
    running one is full.
    """

    def __init__(self, ray, identity: tuple[str, ...], slots: int | None = None) -> None:
        self.ray = ray
        self.identity = identity
        resources = ray.cluster_resources()
        gpus = int(resources.get("GPU", 0))
        self.uses_gpus = gpus > 0
        self.capacity = gpus if self.uses_gpus else max(1, int(resources.get("CPU", 1)))
        self.slots = max(1, int(slots)) if slots else (DEFAULT_GPU_SLOTS if self.uses_gpus else 1)
        self.resources = {"num_gpus": 1} if self.uses_gpus else {"num_cpus": 1}
        self._cond = threading.Condition()
        self._load: dict[Any, int] = {}  # every live actor -> jobs it runs now
        self._starting = 0
        self.started = 0  # actors started over the pool's life
        self.lost = 0  # actors that died under a job
        self._warned_niceness = False
        env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
        self._options: dict[str, Any] = {**self.resources, "max_concurrency": self.slots}
        if env:
            self._options["runtime_env"] = {"env_vars": env}

    # -- actors in and out ---------------------------------------------------------------------------------

    def busy_actors(self) -> list[Any]:
        with self._cond:
            return [actor for actor, load in self._load.items() if load]

    def size(self) -> int:
        with self._cond:
            return len(self._load)

    def actors(self) -> list[Any]:
        """Every live actor (a benchmark warms each of them)."""
        with self._cond:
            return list(self._load)

    def acquire(self) -> Any:
        """The least loaded actor with a free slot, a new one if all are full and there is room, else wait."""
        while True:
            with self._cond:
                while True:
                    open_actors = [actor for actor, load in self._load.items() if load < self.slots]
                    if open_actors:
                        actor = min(open_actors, key=self._load.__getitem__)
                        self._load[actor] += 1
                        return actor
                    if len(self._load) + self._starting < self.capacity:
                        self._starting += 1
                        break
                    self._cond.wait()
            actor = self._start_reserved(load=1)
            if actor is not None:
                return actor

    def start_all(self) -> list[Any]:
        """Start actors until the cluster has no room for another; all live actors (to warm each of them)."""
        while True:
            with self._cond:
                if len(self._load) + self._starting >= self.capacity:
                    break
                self._starting += 1
            if self._start_reserved(load=0) is None:
                break
        return self.actors()

    def _start_reserved(self, load: int) -> Any | None:
        """Start the actor a caller counted in ``_starting``; it joins the pool carrying ``load`` jobs."""
        actor = None
        try:
            actor = self._start()
        finally:
            with self._cond:
                self._starting -= 1
                if actor is not None:
                    self._load[actor] = load
                self._cond.notify_all()
        return actor

    def _start(self) -> Any | None:
        """A new actor, started and answering; ``None`` if there is no room for it but others exist."""
        ray = self.ray
        actor = _actor_class(ray).options(**self._options).remote()
        try:
            where = ray.get(actor.ready.remote(), timeout=ACTOR_START_TIMEOUT_S)
        except ray.exceptions.RayError as exc:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - dead already
                pass
            if isinstance(exc, ray.exceptions.GetTimeoutError):
                kind = "GPU" if self.uses_gpus else "CPU"
                why = f"the cluster had no free {kind} for one in {ACTOR_START_TIMEOUT_S:.0f} s (see `ray status`)"
            else:
                why = _one_line(exc)
            with self._cond:
                others = len(self._load)
                if others:
                    # No room (or no luck) for one more: make do with the actors there are.
                    self.capacity = min(self.capacity, others + self._starting - 1)
                    log.warning(
                        "ray: an evaluation actor could not start (%s); going on with %d", why, others
                    )
                    return None
            raise RayClusterError(f"no Ray evaluation actor could start: {why}") from None
        self.started += 1
        if where.get("niceness", 0) > 0 and not self._warned_niceness:
            self._warned_niceness = True
            log.warning(
                "ray: evaluation actors run at niceness %s, as do the candidates they start (a local run uses "
                "normal priority); start the cluster with RAY_worker_niceness=0 (e.g. `RAY_worker_niceness=0 ray "
                "start ...`)",
                where["niceness"],
            )
        log.info(
            "ray: evaluation actor started on %s (pid %s, GPUs %s, %d slots)",
            where["host"],
            where["pid"],
            where["gpus"],
            self.slots,
        )
        return actor

    def release(self, actor: Any) -> None:
        with self._cond:
            if actor in self._load:
                self._load[actor] -= 1
            self._cond.notify_all()

    def discard(self, actor: Any) -> None:
        """Forget a dead (or unreachable) actor; a new one takes its place when a job needs it.

        Every job the actor ran fails with it and calls this: the actor is counted lost once."""
        with self._cond:
            if self._load.pop(actor, None) is None:
                return  # another of its jobs discarded it already
            self.lost += 1
            self._cond.notify_all()
        try:
            self.ray.kill(actor, no_restart=True)  # unreachable rather than dead: make sure it stays gone
        except Exception:  # noqa: BLE001 - it is dead already
            pass

    def close(self) -> None:
        with self._cond:
            actors = list(self._load)
            self._load.clear()
            self._cond.notify_all()
        for actor in actors:
            try:
                self.ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - gone already
                pass

    # -- one job -------------------------------------------------------------------------------------------

    def evaluate(self, job: EvalJob) -> Verdict:
        """The job's verdict from an actor, retried on another when its actor dies under it."""
        ray = self.ray
        lost = tuple(
            getattr(ray.exceptions, name)
            for name in LOST_WORKER_ERRORS
            if isinstance(getattr(ray.exceptions, name, None), type)
        )
        losses: list[str] = []
        started = time.monotonic()
        for attempt in range(1, MAX_ATTEMPTS + 1):
            actor = self.acquire()
            try:
                verdict = ray.get(actor.evaluate.remote(job))
            except lost as exc:
                self.discard(actor)
                losses.append(_one_line(exc))
                log.warning(
                    "ray: the actor evaluating %s was lost (attempt %d of %d): %s",
                    job.candidate.id,
                    attempt,
                    MAX_ATTEMPTS,
                    losses[-1],
                )
                continue
            except ray.exceptions.RayTaskError as exc:
                self.release(actor)
                if isinstance(exc.cause, KsmithError):
                    raise exc.cause from None  # a problem that cannot be evaluated: as the local executor
                raise
            except BaseException:
                self.discard(actor)  # interrupted: its state is unknown
                raise
            self.release(actor)
            if losses:  # evaluated again after its worker died: say so, the benchmarks count repeats
                verdict = replace(verdict, details={**verdict.details, "worker_losses": losses})
            return verdict
        return worker_lost_verdict(job, losses, time.monotonic() - started)


def worker_lost_verdict(job: EvalJob, losses: list[str], seconds: float) -> Verdict:
    """``crashed``: every actor that took this job died under it."""
    verdict = Verdict(
        status=Status.CRASHED,
        reasons=(
            f"WORKER_LOST: the Ray worker evaluating this candidate died {len(losses)} times "
            f"(last: {losses[-1] if losses else 'unknown'})",
        ),
        error="\n".join(losses),
        device=job.options.device,
        interpreted=job.options.device == "cpu",
        details={"executor": "ray", "attempts": len(losses), "losses": losses},
        eval_seconds=seconds,
    )
    return replace(verdict, feedback=feedback_for(job.candidate, verdict))


# --------------------------------------------------------------------------------------------------------------
# The connection, and the executor itself
# --------------------------------------------------------------------------------------------------------------

_pool: ActorPool | None = None
_pool_lock = threading.Lock()


def _identity(ray) -> tuple[str, ...]:
    """Which connection this is: a new ``ray.init`` (after a shutdown, or in a resumed driver) is another."""
    context = ray.get_runtime_context()
    try:
        return (str(context.get_job_id()), str(context.get_node_id()))
    except Exception:  # noqa: BLE001 - Ray Client connections may not say
        return (str(context.get_job_id()),)


def pool_for(options: Mapping[str, Any]) -> ActorPool:
    """The process's actor pool, connecting to the cluster first if this process is not connected yet.

    Connects to ``options["address"]`` (``--ray-address``), else to ``$RAY_ADDRESS``, else starts a local
    cluster (``ray.init()``). A process already connected (``ray.init`` called by the caller) keeps its
    connection.
    """
    global _pool
    ray = import_ray()
    with _pool_lock:
        if not ray.is_initialized():
            address = options.get("address") or os.environ.get("RAY_ADDRESS") or None
            if address is None:
                # A cluster started here runs its workers at the driver's priority (see normal_priority);
                # the raylet reads this when it starts, and a user's own setting wins.
                os.environ.setdefault(RAY_NICENESS_ENV, "0")
            try:
                ray.init(address=address, logging_level=logging.WARNING)
            except Exception as exc:  # noqa: BLE001 - any failure to connect is one line for the user
                where = f"the Ray cluster at {address}" if address else "a local Ray cluster"
                raise RayClusterError(f"cannot reach {where}: {_one_line(exc)}") from None
        elif options.get("address"):
            log.info("ray: already connected; --ray-address %s is not used", options["address"])
        identity = _identity(ray)
        if (
            _pool is None
            or _pool.identity != identity
            or (options.get("slots") and _pool.slots != options["slots"])
        ):
            if _pool is not None and _pool.identity == identity:
                _pool.close()  # other slots asked: its actors were made with another max_concurrency
            _pool = ActorPool(
                ray, identity, options.get("slots")
            )  # a stale pool's actors ended with its connection
        return _pool


def current_pool() -> ActorPool | None:
    """The pool of this process, if one was made (tests reach its actors through it)."""
    return _pool


def close_pool() -> None:
    """End this process's actors and forget them (the connection stays); call it with no job in flight.

    Actors otherwise live as long as the driver's Ray job, holding their GPU or CPU between steps."""
    global _pool
    with _pool_lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()


def run_on_ray(jobs: Sequence[EvalJob], parallel: int, options: Mapping[str, Any]) -> list[Verdict]:
    """Verdicts for ``jobs`` in their order, at most ``parallel`` of them on actors at once."""
    if not jobs:
        return []
    pool = pool_for(options)
    if parallel <= 1 or len(jobs) == 1:
        return [pool.evaluate(job) for job in jobs]
    with ThreadPoolExecutor(max_workers=min(parallel, len(jobs)), thread_name_prefix="ksmith-ray") as threads:
        return list(threads.map(pool.evaluate, jobs))
