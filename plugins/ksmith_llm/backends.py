"""Where completions come from: an OpenAI-compatible server over HTTP, vLLM in this process, or a local
transformers model (a base directory or GGUF file, or a LoRA adapter on its base) in this process.

Both answer a batch of conversations with one :class:`Completion` (or the error) per conversation, so the
proposer above them is the same. The server client keeps its own retries (exponential backoff with jitter on
connection errors, 429 and 5xx) and a concurrency limit; the API key is read from the environment when the
client is made and lives only inside it, never in the run, its configuration or its records.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

from ksmith_core.errors import ProposerError

log = logging.getLogger("ksmith_llm")

Conversation = list[dict[str, str]]

DEFAULT_MAX_TOKENS = 2048
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TIMEOUT_S = 300.0
DEFAULT_RETRIES = 4
DEFAULT_CONCURRENCY = 4
BACKOFF_BASE_S = 1.0
BACKOFF_CAP_S = 30.0


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    model: str
    finish_reason: str | None = None


class GenerationFailed(Exception):
    """One generation failed for good (after retries); the others of the step go on."""


class Generator(Protocol):
    model: str

    def chat_batch(self, conversations: list[Conversation]) -> list[Completion | GenerationFailed]: ...


@dataclass(frozen=True)
class Settings:
    """Proposer settings from ``run.config.proposer_options`` (never a key: that comes from the environment)."""

    base_url: str | None = None
    model: str | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = DEFAULT_TEMPERATURE
    concurrency: int = DEFAULT_CONCURRENCY
    timeout: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    backoff: float = BACKOFF_BASE_S  # first retry delay in seconds; doubles each retry (plus jitter)
    extra: Mapping[str, Any] | None = None  # passed to the server as extra_body (e.g. vLLM's top_k)

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> Settings:
        options = dict(options or {})
        if "api_key" in options:
            raise ProposerError("do not put an API key in the proposer options: set OPENAI_API_KEY instead")
        try:
            return cls(
                base_url=options.get("base_url") or os.environ.get("OPENAI_BASE_URL") or None,
                model=options.get("model") or None,
                max_tokens=int(options.get("max_tokens", DEFAULT_MAX_TOKENS)),
                temperature=float(options.get("temperature", DEFAULT_TEMPERATURE)),
                concurrency=max(1, int(options.get("concurrency", DEFAULT_CONCURRENCY))),
                timeout=float(options.get("timeout", DEFAULT_TIMEOUT_S)),
                retries=max(0, int(options.get("retries", DEFAULT_RETRIES))),
                backoff=max(0.0, float(options.get("backoff", BACKOFF_BASE_S))),
                extra=options.get("extra_body") or None,
            )
        except (TypeError, ValueError) as exc:
            raise ProposerError(f"bad llm proposer option: {exc}") from exc


# --------------------------------------------------------------------------------------------------------------
# OpenAI-compatible servers
# --------------------------------------------------------------------------------------------------------------


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise ProposerError(
            "the llm proposer needs the 'openai' package: pip install 'kernel-smith[llm]'"
        ) from exc
    return openai


class ServerGenerator:
    """Chat completions from an OpenAI-compatible server (vLLM, SGLang, llama.cpp, a hosted API)."""

    def __init__(self, settings: Settings) -> None:
        openai = _import_openai()
        self.openai = openai
        self.settings = settings
        api_key = os.environ.get("OPENAI_API_KEY")
        if settings.base_url is None and not api_key:
            raise ProposerError(
                "no LLM server given: pass --llm-base-url (e.g. http://127.0.0.1:8000/v1) or set OPENAI_BASE_URL,"
                " or set OPENAI_API_KEY for a hosted API"
            )
        # max_retries=0: the SDK's own retries would hide connection failures behind its fixed schedule.
        self.client = openai.OpenAI(
            base_url=settings.base_url, api_key=api_key or "EMPTY", timeout=settings.timeout, max_retries=0
        )
        self.url = str(self.client.base_url).rstrip("/")
        self.slots = threading.Semaphore(settings.concurrency)
        self.reached = False
        self.model = settings.model or self._served_model()

    def _unreachable(self, exc: Exception) -> ProposerError:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        cause = exc.__cause__ or exc.__context__
        if cause is not None and str(cause):
            detail += f" ({' '.join(str(cause).split())[:200]})"
        return ProposerError(f"cannot reach the LLM server at {self.url}: {detail}")

    def _refused(self, exc: Exception) -> ProposerError:
        status = getattr(exc, "status_code", "?")
        message = " ".join(str(getattr(exc, "message", exc)).split())[:300]
        return ProposerError(f"the LLM server at {self.url} refused the request (HTTP {status}): {message}")

    def _retrying(self, call: Any) -> Any:
        """Run ``call`` with backoff on transient failures; permanent ones raise at once."""
        openai = self.openai
        attempt = 0
        while True:
            try:
                result = call()
                self.reached = True
                return result
            except (openai.APIConnectionError, openai.RateLimitError, openai.InternalServerError) as exc:
                transient = exc
            except openai.APIStatusError as exc:
                if exc.status_code not in (408, 409, 429) and exc.status_code < 500:
                    raise self._refused(exc) from exc
                transient = exc
            # A server never reached in this run is most likely a wrong URL: say so fast instead of backing off.
            retries = self.settings.retries
            if not self.reached and isinstance(transient, openai.APIConnectionError):
                retries = min(1, retries)
            if attempt >= retries:
                # A timeout means the server is there but slow: that costs one generation, not the run.
                if isinstance(transient, openai.APIConnectionError) and not isinstance(
                    transient, openai.APITimeoutError
                ):
                    raise self._unreachable(transient) from transient
                raise GenerationFailed(f"{type(transient).__name__}: {transient}") from transient
            delay = min(BACKOFF_CAP_S, self.settings.backoff * 2**attempt)
            delay += random.uniform(0, delay)  # jitter, so parallel requests do not retry in lockstep
            log.info(
                "LLM request failed (%s); retry %d in %.1fs", type(transient).__name__, attempt + 1, delay
            )
            time.sleep(delay)
            attempt += 1

    def _served_model(self) -> str:
        """The model to ask when none was named: the first the server lists (vLLM, llama.cpp serve one)."""
        models = self._retrying(lambda: self.client.models.list())
        ids = [m.id for m in getattr(models, "data", [])]
        if not ids:
            raise ProposerError(f"the LLM server at {self.url} lists no models: pass --llm-model")
        return ids[0]

    def chat(self, conversation: Conversation) -> Completion:
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": conversation,
            "max_tokens": self.settings.max_tokens,
            "temperature": self.settings.temperature,
        }
        if self.settings.extra:
            kwargs["extra_body"] = dict(self.settings.extra)
        with self.slots:
            response = self._retrying(lambda: self.client.chat.completions.create(**kwargs))
        choice = response.choices[0] if response.choices else None
        usage = response.usage
        return Completion(
            text=(choice.message.content if choice and choice.message else None) or "",
            prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
            completion_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            model=response.model or self.model,
            finish_reason=choice.finish_reason if choice else None,
        )

    def _chat_or_failure(self, conversation: Conversation) -> Completion | GenerationFailed:
        try:
            return self.chat(conversation)
        except GenerationFailed as exc:
            return exc

    def chat_batch(self, conversations: list[Conversation]) -> list[Completion | GenerationFailed]:
        if len(conversations) <= 1:
            return [self._chat_or_failure(c) for c in conversations]
        with ThreadPoolExecutor(max_workers=min(len(conversations), self.settings.concurrency)) as pool:
            return list(pool.map(self._chat_or_failure, conversations))


# --------------------------------------------------------------------------------------------------------------
# vLLM offline
# --------------------------------------------------------------------------------------------------------------

_vllm_engines: dict[tuple[str, str], Any] = {}
_vllm_lock = threading.Lock()


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ProposerError(
            "the vllm proposer needs the 'vllm' package (and a GPU): pip install 'kernel-smith[vllm]'"
        ) from exc
    return vllm


class VllmGenerator:
    """Offline batch generation with ``vllm.LLM`` in this process; one engine per model, kept for the run."""

    def __init__(self, settings: Settings, engine_args: Mapping[str, Any] | None = None) -> None:
        vllm = _import_vllm()
        if not settings.model:
            raise ProposerError(
                "the vllm proposer needs a model: pass --llm-model /path/to/model (or a hub id)"
            )
        self.settings = settings
        self.model = settings.model
        self.sampling = vllm.SamplingParams(
            n=1, temperature=settings.temperature, max_tokens=settings.max_tokens
        )
        args = dict(engine_args or {})
        key = (settings.model, repr(sorted(args.items())))
        with _vllm_lock:
            if key not in _vllm_engines:
                try:
                    _vllm_engines[key] = vllm.LLM(model=settings.model, **args)
                except Exception as exc:  # noqa: BLE001 - any engine start failure means the proposer cannot work
                    raise ProposerError(
                        f"vLLM could not load {settings.model}: {exc}".splitlines()[0]
                    ) from exc
            self.llm = _vllm_engines[key]

    def chat_batch(self, conversations: list[Conversation]) -> list[Completion | GenerationFailed]:
        if not conversations:
            return []
        outputs = self.llm.chat(conversations, self.sampling, use_tqdm=False)
        completions: list[Completion | GenerationFailed] = []
        for output in outputs:
            if not output.outputs:
                completions.append(GenerationFailed("vLLM returned no output"))
                continue
            first = output.outputs[0]
            completions.append(
                Completion(
                    text=first.text,
                    prompt_tokens=len(output.prompt_token_ids or ()),
                    completion_tokens=len(first.token_ids or ()),
                    model=self.model,
                    finish_reason=first.finish_reason,
                )
            )
        return completions


# --------------------------------------------------------------------------------------------------------------
# transformers, in process (a local base model or a LoRA adapter that ``ksmith train`` wrote)
# --------------------------------------------------------------------------------------------------------------

_local_models: dict[str, Any] = {}
_local_lock = threading.Lock()


def is_local_model(model: str | None) -> bool:
    """Whether ``model`` names a model on this machine (a directory or a .gguf file) rather than a served name."""
    return bool(model) and os.path.exists(os.path.expanduser(str(model)))


class TransformersGenerator:
    """Generation with transformers in this process: no server. Slow next to vLLM; meant for checking a
    trained adapter on a few steps and for CPU tests. Loaded once per model path and kept for the process.

    Needs the ``train`` extra (transformers, peft, gguf); the loading itself is ``ksmith_train.models``.
    """

    def __init__(self, settings: Settings) -> None:
        if not is_local_model(settings.model):
            raise ProposerError(
                f"the transformers backend needs a local model directory, .gguf file or adapter: "
                f"--llm-model {settings.model or 'PATH'} does not exist"
            )
        from ksmith_train.models import load_for_inference

        self.settings = settings
        key = os.path.realpath(os.path.expanduser(str(settings.model)))
        with _local_lock:
            if key not in _local_models:
                _local_models[key] = load_for_inference(key)
            self.hf_model, self.tokenizer, self.model = _local_models[key]
        self.lock = threading.Lock()

    def chat(self, conversation: Conversation) -> Completion:
        import torch

        inputs = self.tokenizer.apply_chat_template(
            conversation, add_generation_prompt=True, return_tensors="pt", return_dict=True
        ).to(self.hf_model.device)
        sampling = self.settings.temperature > 0
        kwargs: dict[str, Any] = {
            "max_new_tokens": self.settings.max_tokens,
            "do_sample": sampling,
            "pad_token_id": self.tokenizer.pad_token_id,
        }
        if sampling:
            kwargs["temperature"] = self.settings.temperature
        else:  # greedy: unset the model's own sampling defaults so transformers does not warn about them
            kwargs.update(temperature=None, top_p=None, top_k=None)
        with self.lock, torch.no_grad():
            output = self.hf_model.generate(**inputs, **kwargs)
        prompt_length = inputs["input_ids"].shape[1]
        new_tokens = output[0][prompt_length:].tolist()
        eos = self.tokenizer.eos_token_id
        stopped = bool(new_tokens) and new_tokens[-1] == eos
        return Completion(
            text=self.tokenizer.decode(new_tokens, skip_special_tokens=True),
            prompt_tokens=int(prompt_length),
            completion_tokens=len(new_tokens),
            model=self.model,
            finish_reason="stop" if stopped or len(new_tokens) < self.settings.max_tokens else "length",
        )

    def chat_batch(self, conversations: list[Conversation]) -> list[Completion | GenerationFailed]:
        results: list[Completion | GenerationFailed] = []
        for conversation in conversations:
            try:
                results.append(self.chat(conversation))
            except RuntimeError as exc:  # e.g. a prompt longer than the model's context
                results.append(
                    GenerationFailed(f"transformers generation failed: {str(exc).splitlines()[0]}")
                )
        return results
