"""The LLM proposers: ``llm`` (any OpenAI-compatible server) and ``vllm`` (offline batch generation).

Settings come from ``run.config.proposer_options`` -- ``base_url`` and ``model`` (the CLI's ``--llm-base-url``
and ``--llm-model``; a local model directory, .gguf file or LoRA adapter given as ``model`` with no server
is generated from in process with transformers, as wherever ``backend`` is ``transformers``), and optionally
``max_tokens``, ``temperature``, ``concurrency``, ``timeout``,
``retries``, ``backoff``, ``hints`` (the user's own guidance, added to every prompt), ``extra_body`` and, for
vllm, ``vllm_args`` (keyword arguments for ``vllm.LLM``). The server
falls back to ``OPENAI_BASE_URL``; the key is read from ``OPENAI_API_KEY`` when the client is made and is
never written to the run. Token totals of the run are kept in ``run.state("llm")`` and stored as
``llm_usage`` events alongside each evaluation of an LLM-made candidate. A generation that is still unusable
after its repair request is noted with ``run.note_dropped`` under one of ``proposer.DROP_REASONS`` (the
engine stores it as a ``dropped`` event at the end of the step).

``seed_from_llm(problem, options)`` asks for a first ``ModelNew`` for a problem that ships no seed.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import click

from ksmith_core import hookimpl
from ksmith_core.capabilities import Proposer, SeedMethod
from ksmith_core.errors import ConfigError
from ksmith_core.model import Problem, Proposal
from ksmith_llm import proposer as core
from ksmith_llm.backends import (
    Generator,
    ServerGenerator,
    Settings,
    TransformersGenerator,
    VllmGenerator,
    is_local_model,
)

PROPOSERS = ("llm", "vllm")

# One generator per run (its client holds the key, so it lives here, never in the run's state).
_generators: weakref.WeakKeyDictionary[Any, Generator] = weakref.WeakKeyDictionary()
_generators_lock = threading.Lock()


BACKENDS = ("server", "transformers")


def make_generator(proposer: str, options: Mapping[str, Any] | None) -> Generator:
    settings = Settings.from_options(options)
    if proposer == "vllm":
        return VllmGenerator(settings, (options or {}).get("vllm_args"))
    backend = (options or {}).get("backend")
    if backend not in (None, *BACKENDS):
        raise ConfigError(f"--llm-option backend must be one of {', '.join(BACKENDS)} (got {backend!r})")
    # A local model path with no server named is loaded in process (a trained adapter, a GGUF file).
    if backend == "transformers" or (
        backend is None and settings.base_url is None and is_local_model(settings.model)
    ):
        return TransformersGenerator(settings)
    return ServerGenerator(settings)


def _generator_for(run: Any) -> Generator:
    with _generators_lock:
        generator = _generators.get(run)
        if generator is None:
            generator = make_generator(run.config.proposer, run.config.proposer_options)
            _generators[run] = generator
        return generator


def _proposer(name: str) -> Callable[[Any, Any], list[Proposal]]:
    def propose(run: Any, selection: Any) -> list[Proposal]:
        return core.propose(run, selection, _generator_for(run), name)

    return propose


def _seed_method(name: str) -> Callable[[Problem, Mapping[str, Any]], Proposal]:
    def seed(problem: Problem, options: Mapping[str, Any]) -> Proposal:
        return seed_from_llm(
            problem, options.get("method_options") or {}, proposer=name, device=options.get("device", "cpu")
        )

    return seed


# The command-line options both proposers (and both seed methods) add to `evolve`, `bench` and `seed`.
CLI_OPTIONS = (
    click.Option(["--llm-base-url"], default=None, help="OpenAI-compatible server for --proposer llm."),
    click.Option(["--llm-model"], default=None, help="Model name for --proposer llm / vllm."),
    click.Option(
        ["--llm-option", "llm_options"],
        multiple=True,
        metavar="KEY=VALUE",
        help="Other LLM settings (max_tokens, temperature, concurrency, timeout, hints, ...).",
    ),
)


def options_from_cli(values: Mapping[str, Any]) -> dict[str, Any]:
    """``--llm-base-url``, ``--llm-model`` and ``--llm-option KEY=VALUE`` as proposer options."""
    options: dict[str, Any] = {}
    for pair in values.get("llm_options") or ():
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--llm-option takes KEY=VALUE (got {pair!r})")
        try:
            value: Any = json.loads(raw)  # numbers, booleans, lists; anything else stays a string
        except json.JSONDecodeError:
            value = raw
        options[key.strip()] = value
    if any(word in key.lower() for key in options for word in ("api_key", "apikey", "secret", "password")):
        raise ConfigError("API keys are read from the environment (OPENAI_API_KEY), never from options")
    for key, param in (("base_url", "llm_base_url"), ("model", "llm_model")):
        if values.get(param):
            options[key] = values[param]
    return options


SERVER_DESCRIPTION = (
    "One targeted edit per step from any OpenAI-compatible server (vLLM, SGLang, llama.cpp, hosted)"
)
VLLM_DESCRIPTION = "One targeted edit per step from a local model through vLLM offline batch generation"


@hookimpl
def ksmith_register_proposers(register):
    register(Proposer("llm", _proposer("llm"), SERVER_DESCRIPTION, CLI_OPTIONS, options_from_cli))
    register(Proposer("vllm", _proposer("vllm"), VLLM_DESCRIPTION, CLI_OPTIONS, options_from_cli))


@hookimpl
def ksmith_register_seed_methods(register):
    register(
        SeedMethod(
            "llm",
            _seed_method("llm"),
            "A first ModelNew written by the LLM server",
            CLI_OPTIONS,
            options_from_cli,
        )
    )
    register(
        SeedMethod(
            "vllm",
            _seed_method("vllm"),
            "A first ModelNew written by a local vLLM model",
            CLI_OPTIONS,
            options_from_cli,
        )
    )


@hookimpl
def ksmith_archive(run, candidate, verdict):
    if candidate.proposer not in PROPOSERS:
        return None
    state = run.state(core.STATE)
    meta = candidate.meta or {}
    if run.replaying:
        # Rebuild the totals from what the candidates recorded (rejected generations are not replayed).
        state["prompt_tokens"] = state.get("prompt_tokens", 0) + int(meta.get("prompt_tokens", 0))
        state["completion_tokens"] = state.get("completion_tokens", 0) + int(meta.get("completion_tokens", 0))
        state["requests"] = state.get("requests", 0) + int(meta.get("requests", 0))
        return None
    with core._state_lock:
        record = {
            "kind": "llm_usage",
            "candidate_id": candidate.id,
            "model": meta.get("model"),
            "prompt_tokens": meta.get("prompt_tokens", 0),
            "completion_tokens": meta.get("completion_tokens", 0),
            "run_prompt_tokens": state.get("prompt_tokens", 0),
            "run_completion_tokens": state.get("completion_tokens", 0),
            "run_requests": state.get("requests", 0),
            "run_rejected": state.get("rejected", 0),
        }
    return [record]


def seed_from_llm(
    problem: Problem,
    options: Mapping[str, Any] | None = None,
    *,
    proposer: str = "llm",
    device: str = "cpu",
    hardware: Mapping[str, Any] | None = None,
) -> Proposal:
    """A first ``ModelNew`` for ``problem`` from the LLM (one shot and one repair request).

    ``options`` are the proposer options (``base_url``, ``model``, ...); ``device`` and ``hardware`` tell the
    model what the kernel will run on. Raises :class:`~ksmith_core.errors.ProposerError` when the server
    cannot be used or gives no usable module. Turn the result into the run's seed with
    ``Candidate.from_proposal``.
    """
    generator = make_generator(proposer, options)
    hints = str((options or {}).get("hints") or "")
    return core.first_kernel(problem, generator, proposer, device=device, hardware=hardware, hints=hints)
