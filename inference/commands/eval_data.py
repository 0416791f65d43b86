"""An evaluation's questions by index, and an index folder (or the embedded world) as a retriever.

The questions themselves load through :func:`data_builders.question_loader.load_questions` (one loader for every
job). Every user mistake here is a :class:`ConfigError` or :class:`DataError` raised before any model loads: a
``--question_index`` past the end, a QA file without the ``--index`` it needs.
"""

from __future__ import annotations

from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.question_set import QuestionSet, is_embedded
from adaptive_rag.plumbing.records import QAExample
from adaptive_rag.plumbing.retriever import Retriever
from data_builders.knowing_sets import is_knowing, require_set
from data_builders.question_loader import WorldOptions, read_set
from data_builders.readers import read_corpus
from data_builders.world import WorldConfig, build_world
from retrieval_adapt.bm25 import BM25Retriever
from retrieval_adapt.loading import load_retriever


def question_at(dataset: str, index: int, *, fmt: str | None = None, world_seed: int = 0) -> QAExample:
    """Question number ``index`` (0-based) of a dataset, for commands that take one (``--question_index``)."""
    examples = read_set(QuestionSet(dataset), fmt=fmt, world=WorldOptions(seed=world_seed))
    n = len(examples)
    if not 0 <= index < n:
        raise ConfigError(f"--question_index {index} is out of range: {dataset} has {n} questions (0 to {n - 1})")
    return examples[index]


def check_index_given(index: str | None, dataset: str, needs_retrieval: bool) -> None:
    """A method that retrieves over a QA file needs an index folder; only the embedded world has a built-in one."""
    if needs_retrieval and not index and not is_embedded(dataset):
        raise ConfigError(f"dataset {dataset} needs an index: pass --index DIR (build one with "
                          "`python -m retrieval_adapt.build_index --corpus FILE --out DIR`)")


def load_eval_retriever(index: str | None, dataset: str, *, query_encoder: str | None = None,
                        world_seed: int = 0) -> Retriever:
    """An index folder, or (for the embedded world only) a BM25 index built in memory over the world."""
    check_index_given(index, dataset, needs_retrieval=True)
    if index:
        return load_retriever(index, query_encoder=query_encoder)
    if is_knowing(dataset):  # the knowing world's corpus: the world's passages and near-duplicate distractors
        corpus = read_corpus(require_set(dataset, world_seed).parent / "corpus.jsonl")
        return BM25Retriever.build(corpus, show_progress=False)
    return BM25Retriever.build(build_world(WorldConfig(seed=world_seed)).passages, show_progress=False)
