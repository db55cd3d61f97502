"""UCB1 over edit kinds, rewarded by the speedup each edit gained over its parent.

The bandit is rebuilt from the run's population on every call, so it needs no state of its own to survive a
resume: every evaluated child the mutate proposer made is one pull of its edit kind.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ksmith_core.model import Scored, Verdict

# A relative gain of +GAIN_SCALE maps to reward 1, no change to 0.5, -GAIN_SCALE (or worse) to 0.
GAIN_SCALE = 0.25
# A child that broke a working parent earns this: worse than any slowdown within GAIN_SCALE.
BROKEN_REWARD = 0.0
# UCB1's exploration weight; rewards live in [0, 1] and typical gains are a few percent, so a full weight of
# 1 would keep exploring long after a kind has shown it pays.
EXPLORATION = 0.5


def reward_for(child: Verdict, parent: Verdict) -> float | None:
    """The reward of one edit, or ``None`` when the parent was not a working kernel (no baseline to gain on).

    Without timings (speedup unknown, e.g. interpreted runs that report none) an accepted child earns the
    neutral 0.5, so the bandit still learns which kinds break kernels.
    """
    if not parent.accepted:
        return None
    if not child.accepted:
        return BROKEN_REWARD
    if parent.score <= 0 or child.score <= 0:
        return 0.5
    gain = child.score / parent.score - 1.0
    return min(1.0, max(0.0, 0.5 + 0.5 * gain / GAIN_SCALE))


# A (kind, direction) whose every result so far lost this much (reward below it: more than half of GAIN_SCALE
# slower, or broken) is this much less likely to be picked again within its kind, so the other direction of a
# tuning move gets its turn: num_warps 8 -> 16 at half the speed says little about 8 -> 4.
LOSING_DIRECTION_REWARD = 0.25
LOSING_DIRECTION_WEIGHT = 0.2


@dataclass
class EditBandit:
    pulls: Counter[str] = field(default_factory=Counter)
    total_reward: dict[str, float] = field(default_factory=dict)
    # The same per (kind, direction), for edits that move a value one way ("up" / "down").
    direction_pulls: Counter[tuple[str, str]] = field(default_factory=Counter)
    direction_reward: dict[tuple[str, str], float] = field(default_factory=dict)

    @classmethod
    def from_population(
        cls, population: Iterable[Scored], by_id: Mapping[str, Scored], proposer: str
    ) -> EditBandit:
        """Replay every evaluated child of ``proposer`` whose first parent was evaluated in this run."""
        bandit = cls()
        for scored in population:
            candidate = scored.candidate
            if candidate.proposer != proposer or not candidate.edit_kind or not candidate.parent_ids:
                continue
            parent = by_id.get(candidate.parent_ids[0])
            if parent is None:
                continue
            reward = reward_for(scored.verdict, parent.verdict)
            if reward is not None:
                direction = (candidate.meta.get("detail") or {}).get("direction")
                bandit.record(candidate.edit_kind, reward, str(direction) if direction else None)
        return bandit

    def record(self, kind: str, reward: float, direction: str | None = None) -> None:
        self.pulls[kind] += 1
        self.total_reward[kind] = self.total_reward.get(kind, 0.0) + reward
        if direction is not None:
            key = (kind, direction)
            self.direction_pulls[key] += 1
            self.direction_reward[key] = self.direction_reward.get(key, 0.0) + reward

    def direction_weight(self, kind: str, direction: str | None) -> float:
        """How likely an edit of ``kind`` moving ``direction`` is picked within its kind: less where that
        direction has only lost so far."""
        key = (kind, str(direction))
        n = self.direction_pulls[key]
        if direction is None or not n:
            return 1.0
        losing = self.direction_reward[key] / n < LOSING_DIRECTION_REWARD
        return LOSING_DIRECTION_WEIGHT if losing else 1.0

    def mean(self, kind: str) -> float:
        n = self.pulls[kind]
        return self.total_reward.get(kind, 0.0) / n if n else 0.0

    def choose(self, kinds: list[str], rng: random.Random, pending: Counter[str] | None = None) -> str:
        """The kind with the highest upper confidence bound; kinds never tried come first.

        ``pending`` counts kinds already chosen in this step: each counts as a pull at the kind's current
        mean, so one step's proposals spread over kinds instead of repeating the leader.
        """
        if not kinds:
            raise ValueError("no edit kinds to choose from")
        pending = pending or Counter()
        total = sum(self.pulls[k] + pending[k] for k in kinds)
        best_value, best = -math.inf, []
        for kind in kinds:
            n = self.pulls[kind] + pending[kind]
            if n == 0:
                value = math.inf
            else:
                value = self.mean(kind) + EXPLORATION * math.sqrt(2.0 * math.log(max(total, 1)) / n)
            if value > best_value:
                best_value, best = value, [kind]
            elif value == best_value:
                best.append(kind)
        return best[0] if len(best) == 1 else rng.choice(best)

    def summary(self) -> dict[str, Any]:
        """JSON-ready statistics per kind: pulls and mean reward."""
        return {
            kind: {"pulls": self.pulls[kind], "mean_reward": round(self.mean(kind), 4)}
            for kind in sorted(self.pulls)
        }
