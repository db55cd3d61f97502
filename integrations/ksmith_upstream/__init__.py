"""Upstream kernels in, upstream patches out: ``ksmith import`` and ``ksmith patch sglang|lmdeploy``."""
