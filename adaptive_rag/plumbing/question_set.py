"""Which questions a job runs on: one spec, ``QuestionSet(name, split, start, limit, shuffle_seed)``, for every job.

``name`` is an embedded set of the generated world or anything :func:`data_builders.readers.read_qa` reads (a QA
file; a hub dataset with format ``hf``, whose ``split`` this names). An optional seeded shuffle comes before the
slice ``[start, start + limit)``, so two jobs can cut one order into disjoint parts (train on 0-99, evaluate on
100-149 of the same shuffle). Loading is :func:`data_builders.question_loader.load_questions`; this module holds
the spec, its names and its slicing.

Every flat config spells a question set with the same fields: ``dataset``, ``dataset_format``, ``split``,
``start``, ``limit``, ``shuffle_seed`` (a job with a second set prefixes them, e.g. ``eval_dataset``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, TypeVar

from adaptive_rag.plumbing.errors import ConfigError

T = TypeVar("T")

# The embedded world's question sets (data_builders.world, data_builders.adapt_world).
WORLD_SETS = {
    "world-two-hop": "two-hop questions (each needs two passages)",
    "world-single-hop": "fictional single-hop questions (a model cannot know them)",
    "world-common-knowledge": "common-knowledge questions (a model may know them)",
    "world-adapt-train": "ADAPT-LLM's training part of single-hop + common knowledge (adapt_world.world_split)",
    "world-adapt-heldout": "ADAPT-LLM's held-out part of single-hop + common knowledge, split by fact",
}
# The knowing model's sets (data_builders.knowing_sets, docs/knowing_world.md): files its build writes, read from
# runs/knowing/seed<world_seed>/sets (or $ADAPTIVE_RAG_KNOWING_DIR/seed<world_seed>/sets).
KNOWING_BASE_SETS = {
    "single-known": "held-out single-hop questions on open facts the knowing model answers right",
    "single-unknown": "held-out single-hop questions on open facts it answers wrong",
    "bridge": "two-hop bridges: both orders of known/unknown hops, all-known and (as many) all-unknown",
    "bridge-ku": "bridges whose first hop is known and second unknown",
    "bridge-uk": "bridges whose first hop is unknown and second known",
    "comparison": "comparisons of two entities' years or populations, tagged with how many are known",
    "adapt": "ADAPT-LLM's mix: open single-hop facts (as many trained as untrained) and common knowledge",
}
KNOWING_SETS = {f"knowing-{name}{half}": f"{what}{' (tuning half)' if half else ''}"
                for name, what in KNOWING_BASE_SETS.items() for half in ("", "-tune")}
# Spellings of earlier versions: each fails naming the one that replaced it.
OLD_NAMES = {
    "world:two_hop": "world-two-hop",
    "world:single_hop": "world-single-hop",
    "world:common_knowledge": "world-common-knowledge",
    "world-common": "world-common-knowledge",
    "world": "world-adapt-train",
    "world_heldout": "world-adapt-heldout",
}


def is_embedded(name: str) -> bool:
    return name in WORLD_SETS or name in KNOWING_SETS


def check_name(name: str) -> None:
    """An old spelling or an unknown ``world-`` name fails with one line naming the right one."""
    if name in OLD_NAMES:
        raise ConfigError(f"question set '{name}' was renamed: use '{OLD_NAMES[name]}'")
    # not a file: no slash, no dot
    looks_embedded = name.startswith(("world-", "world:", "knowing-")) and "/" not in name and "." not in name
    if looks_embedded and not is_embedded(name):
        known = KNOWING_SETS if name.startswith("knowing-") else WORLD_SETS
        raise ConfigError(f"question set '{name}' is not an embedded set; known: {', '.join(known)}")


@dataclass(frozen=True)
class QuestionSet:
    name: str  # an embedded set (WORLD_SETS) or what read_qa reads: a QA file, a hub dataset (format hf)
    split: str | None = None  # a hub dataset's split (default validation); no other set has splits
    start: int = 0  # first question, after the shuffle
    limit: int | None = None  # how many from start (None: to the end)
    shuffle_seed: int | None = None  # shuffle the whole set with this seed before slicing (None: the set's order)

    def __post_init__(self) -> None:
        if not self.name:
            raise ConfigError("a question set needs a name (dataset)")
        check_name(self.name)
        if self.start < 0:
            raise ConfigError(f"start must be >= 0, got {self.start}")
        if self.limit is not None and self.limit < 1:
            raise ConfigError(f"limit must be >= 1 or null (all), got {self.limit}")
        if self.split is not None and is_embedded(self.name):
            raise ConfigError(f"split '{self.split}': the embedded set {self.name} has no splits (the world's "
                              "train/held-out parts are the sets world-adapt-train and world-adapt-heldout)")

    @classmethod
    def of(cls, cfg: Any, prefix: str = "") -> QuestionSet:
        """The question set spelt by a flat config's fields (``dataset``, ``split``, ``start``, ``limit``,
        ``shuffle_seed``, each with ``prefix``)."""
        return cls(name=getattr(cfg, f"{prefix}dataset"), split=getattr(cfg, f"{prefix}split"),
                   start=getattr(cfg, f"{prefix}start"), limit=getattr(cfg, f"{prefix}limit"),
                   shuffle_seed=getattr(cfg, f"{prefix}shuffle_seed"))

    @property
    def end(self) -> int | None:
        return None if self.limit is None else self.start + self.limit

    def shuffled(self, items: list[T]) -> list[T]:
        """``items`` in this set's order: shuffled with ``shuffle_seed``, or as given."""
        items = list(items)
        if self.shuffle_seed is not None:
            random.Random(self.shuffle_seed).shuffle(items)
        return items

    def sliced(self, items: list[T]) -> list[T]:
        """``items[start:start + limit]``; a start past the end is a :class:`ConfigError` (never an empty set)."""
        if self.start >= len(items):
            raise ConfigError(f"start {self.start} is past the end of {self.name} ({len(items)} questions: "
                              f"0 to {len(items) - 1})")
        return list(items[self.start:self.end])

    def select(self, items: list[T]) -> list[T]:
        """The shuffle, then the slice."""
        return self.sliced(self.shuffled(items))
