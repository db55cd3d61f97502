"""The reference process keeps its allocator's cache between an evaluation's requests and gives it back once
idle (``reference_side.release_cache_when_idle``): checked with a pipe for its stdin and a stand-in for
``torch.cuda``'s two calls, since the CPU has no CUDA cache."""

from __future__ import annotations

import os
import sys
import time
import types

import pytest

from ksmith_triton import reference_side


class FakeCuda:
    def __init__(self, reserved: int) -> None:
        self.reserved = reserved
        self.emptied = 0

    def memory_reserved(self) -> int:
        return self.reserved

    def empty_cache(self) -> None:
        self.emptied += 1
        self.reserved = 0


@pytest.fixture
def stdin_pipe(monkeypatch):
    read_fd, write_fd = os.pipe()
    reader = os.fdopen(read_fd, "r")
    monkeypatch.setattr(sys, "stdin", reader)
    monkeypatch.setattr(reference_side, "IDLE_RELEASE_S", 0.2)
    yield write_fd
    reader.close()
    os.close(write_fd)


def test_idle_process_gives_its_cache_back(stdin_pipe):
    cuda = FakeCuda(reserved=512 << 20)
    started = time.monotonic()
    reference_side.release_cache_when_idle(types.SimpleNamespace(cuda=cuda))
    assert cuda.emptied == 1
    assert time.monotonic() - started >= 0.15  # it waited for a request first


def test_cache_kept_when_the_next_request_is_there(stdin_pipe):
    os.write(stdin_pipe, b'{"op": "compare"}\n')
    cuda = FakeCuda(reserved=512 << 20)
    reference_side.release_cache_when_idle(types.SimpleNamespace(cuda=cuda))
    assert cuda.emptied == 0
    assert sys.stdin.readline().strip() == '{"op": "compare"}'  # the request is still there to be read


def test_nothing_cached_means_no_wait(stdin_pipe):
    cuda = FakeCuda(reserved=0)
    started = time.monotonic()
    reference_side.release_cache_when_idle(types.SimpleNamespace(cuda=cuda))
    assert cuda.emptied == 0
    assert time.monotonic() - started < 0.15
