"""Load a :class:`~adaptive_rag.plumbing.question_set.QuestionSet`: the one loader of every job that selects questions.

Embedded names (:data:`adaptive_rag.plumbing.question_set.WORLD_SETS`) come from the generated world; anything else is a
file (or, with format ``hf``, a hub dataset) that :func:`data_builders.readers.read_qa` reads. Then the seeded
shuffle and the slice ``[start, start + limit)``. SPEC's clean split for HotpotQA is file order: no shuffle,
0-399 to train, 400-499 to report.

``world-adapt-train`` with a ``shuffle_seed`` is ADAPT-LLM's seeded training sample
(:func:`data_builders.adapt_world.world_sample`, which can also fix the share of common-knowledge questions).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.question_set import WORLD_SETS, QuestionSet, is_embedded
from adaptive_rag.plumbing.records import QAExample
from data_builders.adapt_world import world_sample, world_split
from data_builders.knowing_sets import is_knowing, require_set
from data_builders.readers import read_qa
from data_builders.world import WorldConfig, build_world

WORLD_ATTRIBUTES = {"world-two-hop": "two_hop", "world-single-hop": "single_hop",
                    "world-common-knowledge": "common_knowledge"}


@dataclass(frozen=True)
class WorldOptions:
    """How the embedded world's sets are made (a file ignores them)."""

    seed: int = 0  # the world's seed: its questions and passages
    heldout_fraction: float = 0.2  # world-adapt-*: share of facts held out of training
    heldout_seed: int = 0  # world-adapt-*: which facts are held out
    common_fraction: float | None = None  # world-adapt-train's seeded sample: share of common knowledge (else ignored)


@dataclass
class QuestionsConfig:
    """The question set of a job with one set (the retrieval-adaptation data builder and evaluation)."""

    dataset: str = field(default="world-two-hop", metadata={
        "help": f"an embedded set ({', '.join(WORLD_SETS)}) or a QA file (read_qa)"})
    dataset_format: str | None = field(default=None, metadata={"help": "force a read_qa format (hf: a hub dataset)"})
    split: str | None = field(default=None, metadata={"help": "a hub dataset's split (default validation)"})
    start: int = 0  # first question, after the shuffle
    limit: int | None = None  # how many questions from start (None: to the end)
    shuffle_seed: int | None = field(default=None, metadata={"help": "shuffle before slicing (None: file order)"})
    world_seed: int = 0  # seed of the embedded world

    RENAMED: ClassVar[dict[str, str]] = {
        "questions": "dataset (world:two_hop is now world-two-hop)", "questions_format": "dataset_format",
        "end": "limit, the number of questions from start (end 100 from start 0 = limit 100)"}

    def __post_init__(self) -> None:
        self.question_set()  # an old name, a bad slice: one line now, before anything runs

    def question_set(self) -> QuestionSet:
        return QuestionSet.of(self)

    def world(self) -> WorldOptions:
        return WorldOptions(seed=self.world_seed)


def load_questions(qs: QuestionSet, *, fmt: str | None = None, world: WorldOptions = WorldOptions()) -> list[QAExample]:
    """The questions ``qs`` names, in order: at least one, ids unique (resume and scoring key on them)."""
    examples = read_set(qs, fmt=fmt, world=world)
    check_unique_ids(examples, qs.name)
    if qs.name == "world-adapt-train" and qs.shuffle_seed is None and world.common_fraction is not None:
        raise ConfigError("world_common_fraction mixes a seeded sample of world-adapt-train: set a shuffle_seed")
    if qs.name == "world-adapt-train" and qs.shuffle_seed is not None:
        return qs.sliced(world_sample(examples, qs.shuffle_seed, qs.end, world.common_fraction))
    return qs.select(examples)


def read_set(qs: QuestionSet, *, fmt: str | None = None, world: WorldOptions = WorldOptions()) -> list[QAExample]:
    """Every question of the set ``qs`` names, in the set's own order (no shuffle, no slice); never empty."""
    check_dataset(qs, fmt)
    if qs.name in WORLD_ATTRIBUTES:
        examples = list(getattr(build_world(WorldConfig(seed=world.seed)), WORLD_ATTRIBUTES[qs.name]))
    elif qs.name in ("world-adapt-train", "world-adapt-heldout"):
        train, heldout = world_split(world.seed, world.heldout_fraction, world.heldout_seed)
        examples = train if qs.name == "world-adapt-train" else heldout
    elif is_knowing(qs.name):
        examples = read_qa(require_set(qs.name, world.seed))
    elif fmt == "hf":
        examples = read_qa(qs.name if qs.split is None else f"{qs.name}@{qs.split}", format="hf")
    else:
        examples = read_qa(qs.name, format=fmt)  # type: ignore[arg-type]
    if not examples:  # the readers refuse empty files; this guards any other source
        raise DataError("no questions", source=qs.name)
    return examples


def check_dataset(qs: QuestionSet, fmt: str | None = None) -> None:
    """What ``qs`` names exists (an embedded set, a file, a hub dataset), without reading it."""
    if qs.split is not None and fmt != "hf":
        raise ConfigError(f"split '{qs.split}' is for a hub dataset (dataset_format hf); {qs.name} has no splits")
    if fmt == "hf" and qs.split is not None and "@" in qs.name:
        raise ConfigError(f"dataset {qs.name} names its split after '@' and split says '{qs.split}': use one")
    if not is_embedded(qs.name) and fmt != "hf" and not Path(qs.name).exists():
        raise ConfigError(f"dataset '{qs.name}' is neither an embedded set ({', '.join(WORLD_SETS)}) nor an existing "
                          "file (a hub dataset needs dataset_format hf)")


def check_unique_ids(examples: list[QAExample], dataset: str) -> None:
    """Resume and scoring key records on the question id: one id for two questions would merge them."""
    first: dict[str, int] = {}
    for i, ex in enumerate(examples):
        if ex.id in first:
            raise DataError(f"question id '{ex.id}' is used twice (questions {first[ex.id]} and {i}); ids must be "
                            "unique", source=dataset)
        first[ex.id] = i


def source_hash(qs: QuestionSet, world: WorldOptions = WorldOptions()) -> str:
    """sha256 of the question file (or of an embedded set's name and world seed), recorded in builders' stats."""
    if is_knowing(qs.name):  # a file the knowing-model build wrote: its content, not its name
        return file_hash(require_set(qs.name, world.seed)) or ""
    if is_embedded(qs.name):
        return hashlib.sha256(f"{qs.name}:seed={world.seed}".encode()).hexdigest()
    return file_hash(qs.name) or ""


def file_hash(path: str | Path) -> str | None:
    """sha256 of a file, or None when it does not exist (e.g. a test double's index)."""
    if not Path(path).is_file():
        return None
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            digest.update(chunk)
    return digest.hexdigest()
