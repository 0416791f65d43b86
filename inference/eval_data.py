"""Resolve an evaluation dataset name to QA examples, and an index folder (or the embedded world) to a retriever."""

from __future__ import annotations

from pathlib import Path

from data_builders.schema import QAExample
from retrieval_adapt.base import Retriever

WORLD_SPLITS = ("world-single-hop", "world-two-hop", "world-common")


def load_examples(dataset: str, *, fmt: str | None = None, start: int = 0, limit: int | None = None,
                  world_seed: int = 0) -> list[QAExample]:
    """``world-single-hop`` / ``world-two-hop`` / ``world-common`` (embedded), or any file ``read_qa`` knows."""
    if dataset in WORLD_SPLITS:
        from data_builders.world import WorldConfig, build_world

        world = build_world(WorldConfig(seed=world_seed))
        examples = {"world-single-hop": world.single_hop, "world-two-hop": world.two_hop,
                    "world-common": world.common_knowledge}[dataset]
    elif Path(dataset).exists() or fmt == "hf":
        from data_builders.readers import read_qa

        examples = read_qa(dataset, format=fmt)
    else:
        raise FileNotFoundError(f"dataset '{dataset}' is neither an embedded split ({', '.join(WORLD_SPLITS)}) "
                                "nor an existing file (use --dataset_format hf for a hub dataset)")
    if start < 0 or start > len(examples):
        raise ValueError(f"start={start} is outside the dataset's {len(examples)} questions")
    end = len(examples) if limit is None else min(len(examples), start + limit)
    return examples[start:end]


def load_eval_retriever(index: str | None, dataset: str, *, query_encoder: str | None = None,
                        world_seed: int = 0) -> Retriever:
    """An index folder, or (for the embedded world only) a BM25 index built in memory over the world."""
    if index:
        from retrieval_adapt.loading import load_retriever

        return load_retriever(index, query_encoder=query_encoder)
    if dataset in WORLD_SPLITS:
        from data_builders.world import WorldConfig, build_world
        from retrieval_adapt.bm25 import BM25Retriever

        return BM25Retriever.build(build_world(WorldConfig(seed=world_seed)).passages, show_progress=False)
    raise ValueError("this dataset needs an index: pass --index DIR (build one with "
                     "`python -m retrieval_adapt.build_index --corpus FILE --out DIR`)")
