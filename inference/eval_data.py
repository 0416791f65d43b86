"""Resolve an evaluation dataset name to QA examples, and an index folder (or the embedded world) to a retriever.

Every user mistake here is a :class:`ConfigError` or :class:`DataError` raised before any model loads: an empty
dataset, a ``--start`` or ``--question_index`` past its end, duplicate question ids (resume keys on them), a QA
file without the ``--index`` it needs.
"""

from __future__ import annotations

from pathlib import Path

from inference.core.config import ConfigError
from inference.core.records import DataError, QAExample
from inference.core.retriever import Retriever

WORLD_SPLITS = ("world-single-hop", "world-two-hop", "world-common")


def load_dataset(dataset: str, *, fmt: str | None = None, world_seed: int = 0) -> list[QAExample]:
    """Every question of ``world-single-hop`` / ``world-two-hop`` / ``world-common`` (embedded), or of any file
    ``read_qa`` knows; never empty."""
    if dataset in WORLD_SPLITS:
        from data_builders.world import WorldConfig, build_world

        world = build_world(WorldConfig(seed=world_seed))
        examples = {"world-single-hop": world.single_hop, "world-two-hop": world.two_hop,
                    "world-common": world.common_knowledge}[dataset]
    elif Path(dataset).exists() or fmt == "hf":
        from data_builders.readers import read_qa

        examples = read_qa(dataset, format=fmt)
    else:
        raise ConfigError(f"dataset '{dataset}' is neither an embedded split ({', '.join(WORLD_SPLITS)}) "
                          "nor an existing file (use --dataset_format hf for a hub dataset)")
    if not examples:  # the readers refuse empty files; this guards any other source
        raise DataError("no questions", source=dataset)
    return list(examples)


def check_unique_ids(examples: list[QAExample], dataset: str) -> None:
    """Resume and scoring key records on the question id: one id for two questions would merge them."""
    first: dict[str, int] = {}
    for i, ex in enumerate(examples):
        if ex.id in first:
            raise DataError(f"question id '{ex.id}' is used twice (questions {first[ex.id]} and {i}); ids must be "
                            "unique", source=dataset)
        first[ex.id] = i


def load_examples(dataset: str, *, fmt: str | None = None, start: int = 0, limit: int | None = None,
                  world_seed: int = 0) -> list[QAExample]:
    """Questions ``[start, start + limit)`` of a dataset (see :func:`load_dataset`); at least one, ids unique."""
    examples = load_dataset(dataset, fmt=fmt, world_seed=world_seed)
    check_unique_ids(examples, dataset)
    n = len(examples)
    if not 0 <= start < n:
        raise ConfigError(f"--start {start} is outside {dataset}'s {n} questions (0 to {n - 1})")
    end = n if limit is None else min(n, start + limit)
    return examples[start:end]


def question_at(dataset: str, index: int, *, fmt: str | None = None, world_seed: int = 0) -> QAExample:
    """Question number ``index`` (0-based) of a dataset, for commands that take one (``--question_index``)."""
    examples = load_dataset(dataset, fmt=fmt, world_seed=world_seed)
    n = len(examples)
    if not 0 <= index < n:
        raise ConfigError(f"--question_index {index} is out of range: {dataset} has {n} questions (0 to {n - 1})")
    return examples[index]


def check_index_given(index: str | None, dataset: str, needs_retrieval: bool) -> None:
    """A method that retrieves over a QA file needs an index folder; only the embedded world has a built-in one."""
    if needs_retrieval and not index and dataset not in WORLD_SPLITS:
        raise ConfigError(f"dataset {dataset} needs an index: pass --index DIR (build one with "
                          "`python -m retrieval_adapt.build_index --corpus FILE --out DIR`)")


def load_eval_retriever(index: str | None, dataset: str, *, query_encoder: str | None = None,
                        world_seed: int = 0) -> Retriever:
    """An index folder, or (for the embedded world only) a BM25 index built in memory over the world."""
    check_index_given(index, dataset, needs_retrieval=True)
    if index:
        from retrieval_adapt.loading import load_retriever

        return load_retriever(index, query_encoder=query_encoder)
    from data_builders.world import WorldConfig, build_world
    from retrieval_adapt.bm25 import BM25Retriever

    return BM25Retriever.build(build_world(WorldConfig(seed=world_seed)).passages, show_progress=False)
