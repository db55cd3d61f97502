"""ksmith built-in plugin: the platforms (NVIDIA, MetaX) and ``ksmith doctor``.

What differs between GPU platforms lives behind :class:`ksmith_core.capabilities.Platform`; this package
registers NVIDIA's (``nvidia``, Triton backend ``cuda``) and MetaX's (``metax``, mcTriton backend ``maca``).
MetaX's was written from MetaX's public sources and tested with faked signals only: it has not been run on
MetaX hardware (docs/platforms.md).
"""
