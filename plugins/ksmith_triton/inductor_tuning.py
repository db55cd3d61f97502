"""torch.compile's runtime autotuning, measured the way ksmith measures, so the reference's pick is steady.

A compiled kernel with several configurations (Inductor's reductions, mostly) is benchmarked on its first call:
Inductor's ``CachingAutotuner`` times each configuration once (``benchmarker.benchmark``: about 25 ms of
back-to-back calls, the *minimum* kept) and launches the fastest from then on. ksmith then times the compiled
model by the *median* of calls with the L2 flushed and the launch hidden (``timing.py``). Where two
configurations are close by Inductor's minimum, the pick differs from one machine to the next and the
reference moves with it (docs/evaluation.md, "Steady references", has the measurement).

While :func:`steady_autotuning` is active:

* each configuration is measured with ksmith's own timing loop (``timing.time_calls``: the median of
  :data:`CALLS_PER_ROUND` calls), not Inductor's minimum; Inductor still builds the call (argument cloning,
  zeroing of accumulators), only the measurement is replaced;
* the configurations are measured in :data:`ROUNDS` interleaved rounds, alternating direction, and each keeps
  the median of its rounds: a slow moment of the GPU hits every configuration alike;
* Inductor's autotune caches are off, so a pick stored earlier on this machine (measured Inductor's way) is
  not reused;
* every pick is recorded (kernel, each configuration with its rounds, the one kept), so a verdict can show
  which kernel its reference ran.

The pick is the reference's fastest configuration under the protocol that times it: the reference gets its
best, by the same measure as the candidate. If this torch lacks the internals patched here, nothing is
patched and ``available`` in the record says so; the reference is then Inductor's own pick, as before.
"""

from __future__ import annotations

import contextlib
import statistics
from collections.abc import Iterator
from typing import Any

ROUNDS = 3
CALLS_PER_ROUND = 24


class ProtocolBenchmarker:
    """Stands in for Inductor's ``benchmarker`` inside the runtime autotuner: GPU calls are timed with ksmith's
    loop; anything else (a CPU kernel, another method) goes to Inductor's own."""

    def __init__(self, original: Any, calls: int = CALLS_PER_ROUND) -> None:
        self._original = original
        self._calls = calls
        self._timers: dict[str, Any] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._original, name)

    def benchmark(
        self,
        fn: Any,
        fn_args: tuple[Any, ...] | None = None,
        fn_kwargs: dict[str, Any] | None = None,
        device: Any = None,
        **kwargs: Any,
    ) -> float:
        if str(getattr(device, "type", device)) != "cuda":
            return self._original.benchmark(fn, fn_args, fn_kwargs, device=device, **kwargs)
        from ksmith_triton.timing import reference_timers, time_calls

        if self._timers is None:
            self._timers = reference_timers("cuda")
        args, kw = tuple(fn_args or ()), dict(fn_kwargs or {})

        def call() -> Any:
            return fn(*args, **kw)

        try:
            timed = time_calls("cuda", call, [[]], self._timers, self._calls, 3)
        except Exception as exc:
            if "invalid configuration" in str(exc):  # as Inductor's benchmarker: this config cannot launch
                return float("inf")
            raise
        return float(statistics.median(timed.samples_ms))


def config_label(config: Any) -> str:
    """One configuration as text: its block sizes, warps and stages."""
    kwargs = dict(getattr(config, "kwargs", {}) or {})
    parts = [f"{k}={v}" for k, v in sorted(kwargs.items())]
    parts += [
        f"num_warps={getattr(config, 'num_warps', '?')}",
        f"num_stages={getattr(config, 'num_stages', '?')}",
    ]
    return ", ".join(parts)


def _interleaved_rounds(tuner: Any, picks: list[dict[str, Any]], rounds: int, args: Any, kwargs: Any) -> Any:
    launchers = list(tuner.launchers)
    samples: dict[Any, list[float]] = {launcher: [] for launcher in launchers}
    for index in range(rounds):
        order = launchers if index % 2 == 0 else launchers[::-1]  # ABBA: drift in the GPU's state cancels
        for launcher in order:
            samples[launcher].append(float(tuner.bench(launcher, *args, **kwargs)))
    timings = {launcher: statistics.median(values) for launcher, values in samples.items()}
    coordesc = getattr(tuner, "coordesc_tuner", None)
    if coordesc is not None and hasattr(coordesc, "cache_benchmark_result"):
        for launcher, value in timings.items():
            coordesc.cache_benchmark_result(launcher.config, value)
    reset = getattr(tuner, "reset_to_zero_args", None)
    if reset is not None:
        reset(*args, **kwargs)
    best = min(timings, key=timings.get)
    meta = getattr(tuner, "inductor_meta", None) or {}
    picks.append(
        {
            "kernel": meta.get("kernel_name") or getattr(getattr(tuner, "fn", None), "__name__", "kernel"),
            "configs": [
                {
                    "config": config_label(launcher.config),
                    "rounds_ms": [round(v, 5) for v in samples[launcher]],
                }
                for launcher in launchers
            ],
            "chosen": config_label(best.config),
        }
    )
    return timings


@contextlib.contextmanager
def steady_autotuning(rounds: int = ROUNDS, calls: int = CALLS_PER_ROUND) -> Iterator[dict[str, Any]]:
    """Within: Inductor's runtime autotuner measures with ksmith's loop in interleaved rounds. Yields the record
    ``{"available": bool, "picks": [...], "errors": [...]}``, filled as kernels are tuned; a kernel whose
    measurement failed is left to Inductor's own pick and the error recorded."""
    record: dict[str, Any] = {"available": False, "picks": [], "errors": []}
    try:
        from torch._inductor.runtime import triton_heuristics as heuristics

        tuner_class = heuristics.CachingAutotuner
        original_all = tuner_class.benchmark_all_configs
        original_benchmarker = heuristics.benchmarker
        needed = ("bench", "launchers")
    except (ImportError, AttributeError):
        yield record
        return

    def benchmark_all_configs(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not all(hasattr(self, name) for name in needed) or len(self.launchers) < 2:
            return original_all(self, *args, **kwargs)
        try:
            return _interleaved_rounds(self, record["picks"], rounds, args, kwargs)
        except Exception as exc:  # noqa: BLE001 - never cost the reference its compile: Inductor's pick then
            record["errors"].append(f"{type(exc).__name__}: {exc}"[:500])
            return original_all(self, *args, **kwargs)

    record["available"] = True
    tuner_class.benchmark_all_configs = benchmark_all_configs
    heuristics.benchmarker = ProtocolBenchmarker(original_benchmarker, calls)
    try:
        with _no_stored_picks():
            yield record
    finally:
        tuner_class.benchmark_all_configs = original_all
        heuristics.benchmarker = original_benchmarker


def _no_stored_picks() -> Any:
    """Inductor's autotune caches off: a pick stored on this machine by an earlier compile (a user's own
    torch.compile, measured Inductor's way) would otherwise be reused without measuring. The setting is part of
    the compiled code's cache key, so nothing compiled outside is reused either."""
    import torch._inductor.config as inductor_config

    names = ("autotune_local_cache", "autotune_remote_cache", "bundled_autotune_remote_cache")
    return inductor_config.patch({name: False for name in names if hasattr(inductor_config, name)})


def autotune_summary(record: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Per tuned kernel of a reference: the configuration kept and each configuration's median (ms), for a
    verdict's details."""
    summary = []
    for pick in (record or {}).get("picks", []):
        medians = {c["config"]: round(statistics.median(c["rounds_ms"]), 5) for c in pick["configs"]}
        summary.append({"kernel": pick["kernel"], "chosen": pick["chosen"], "medians_ms": medians})
    return summary
