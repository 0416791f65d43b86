"""A named, reproducible slice of questions: the train/held-out split shared by retrieval adaptation steps.

``questions`` is ``world:two_hop`` / ``world:single_hop`` / ``world:common_knowledge`` (the embedded world) or a
QA file that :func:`data_builders.readers.read_qa` reads. An optional seeded shuffle comes before the slice
``[start:end]``, so the data builder (e.g. 0:100) and the evaluation (100:150) cut one order into disjoint parts.
SPEC's clean split for HotpotQA is file order: no shuffle, 0:400 to train, 400:500 to report.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from pathlib import Path

from inference.core.records import DataError, QAExample

WORLD_SETS = ("two_hop", "single_hop", "common_knowledge")


@dataclass
class QuestionsConfig:
    questions: str = field(default="world:two_hop", metadata={"help": "world:<set> or a QA file (read_qa)"})
    questions_format: str | None = field(default=None, metadata={"help": "force a read_qa format"})
    start: int = 0
    end: int | None = None
    shuffle_seed: int | None = field(default=None, metadata={"help": "shuffle before slicing (None: file order)"})
    world_seed: int = 0

    def __post_init__(self) -> None:
        if self.start < 0 or (self.end is not None and self.end <= self.start):
            raise ValueError(f"need 0 <= start < end, got start={self.start}, end={self.end}")
        if self.questions.startswith("world:") and self.questions[6:] not in WORLD_SETS:
            raise ValueError(f"questions '{self.questions}': world sets are {', '.join(WORLD_SETS)}")


def load_questions(cfg: QuestionsConfig) -> list[QAExample]:
    if cfg.questions.startswith("world:"):
        from data_builders.world import WorldConfig, build_world

        examples = list(getattr(build_world(WorldConfig(seed=cfg.world_seed)), cfg.questions[6:]))
    else:
        from data_builders.readers import read_qa

        examples = read_qa(cfg.questions, format=cfg.questions_format)  # type: ignore[arg-type]
    if cfg.shuffle_seed is not None:
        random.Random(cfg.shuffle_seed).shuffle(examples)
    selected = examples[cfg.start:cfg.end]
    if not selected:
        raise DataError(f"the slice [{cfg.start}:{cfg.end}] is empty ({len(examples)} questions)",
                        source=cfg.questions)
    return selected


def source_hash(cfg: QuestionsConfig) -> str:
    """sha256 of the question file (or of the world's name and seed), recorded in builders' stats."""
    if cfg.questions.startswith("world:"):
        return hashlib.sha256(f"{cfg.questions}:seed={cfg.world_seed}".encode()).hexdigest()
    return file_hash(cfg.questions) or ""


def file_hash(path: str | Path) -> str | None:
    """sha256 of a file, or None when it does not exist (e.g. a test double's index)."""
    if not Path(path).is_file():
        return None
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
