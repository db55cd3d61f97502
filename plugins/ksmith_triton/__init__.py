"""ksmith built-in plugin: the Triton / NVIDIA evaluation backend.

Every candidate runs in a killable child process (``python -m ksmith_triton.worker``); reference outputs come
from a separate reference process the candidate never reaches, which also judges the outputs. See
``evaluator.py`` for the protocol, ``guards.py`` for the anti-hacking checks made inside the child.
"""

# Bump when anything that changes measured numbers or verdicts changes: it is part of every cache key.
PROTOCOL_VERSION = 1
