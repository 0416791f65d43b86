"""A supervised warm start for the multi-turn search policy: ADAPT-LLM's Algorithm 1 written in Search-R1's protocol.

Search-R1 starts RL from instruction models that already follow its tags; a small model answers the protocol's prompt
with a bare answer, never ``<search>`` or ``<answer>``, so every reward is 0 and GRPO has nothing to compare
(docs/knowing_world.md). This builds what such a model lacks from Algorithm 1's labels (the closed-book pass of
:mod:`data_builders.adapt_llm`, same judge):

* answered correctly closed-book: the prompt, then ``<answer> gold </answer>`` (no search);
* answered wrongly: ``<search> question </search>``, the environment's ``<information>`` block holding the gold
  passage (cut around the answer, as Algorithm 1's context instance), then ``<answer> gold </answer>``. With
  ``information: retrieved`` the block holds what the environment returns for that search instead (the index's top
  passages for the question, each cut as the environment cuts it), the gold passage at its rank, or in place of the
  last hit when the index missed it: the policy then learns to read the answer among the passages it will be shown.

The prompt is exactly the one the rollout and the ``search-r1`` method build (:func:`inference.search_agent.loop.
first_ids`), and the ``<information>`` ids exactly the environment's (:func:`~adaptive_rag.lm.tokenization.
continuation_ids` of :func:`~inference.search_agent.protocol.information_block`). Those ids are masked out of the
loss (``completion_mask`` 0), as the rollout masks them (``env_mask`` 0): the model learns to write the tags, the query
and the answer, never the passages. Nothing here loads a model; the job is ``training/search_sft.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from datasets import Dataset, DatasetDict

from adaptive_rag.lm.tokenization import continuation_ids
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage, QAExample
from data_builders.adapt_llm_prompts import answer_window
from inference.adapt_gate.gate import passage_with_title
from inference.search_agent.loop import SearchSettings, cut_words, first_ids
from inference.search_agent.protocol import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    SEARCH_CLOSE,
    SEARCH_OPEN,
    information_block,
    search_prompt,
)

KINDS = ("search_answer", "search_retrieve")  # answered from memory / searched first
COLUMNS = ("prompt", "completion", "kind", "question_id", "input_ids", "completion_mask")


def answer_turn(answer: str) -> str:
    return f"{ANSWER_OPEN} {' '.join(answer.split())} {ANSWER_CLOSE}"


def search_turn(query: str) -> str:
    return f"{SEARCH_OPEN} {' '.join(query.split())} {SEARCH_CLOSE}"


def answer_cut(passage: Passage, answers: Sequence[str], max_passage_words: int | None) -> str:
    """A passage as the environment shows it (title, then text), its text cut around the answer."""
    return passage_with_title(replace(passage, text=answer_window(passage, max_passage_words, answers).text))


def gold_information(ex: QAExample, max_passage_words: int | None) -> list[str]:
    """The gold passages as the environment shows passages, each cut around the answer."""
    return [answer_cut(p, ex.answers, max_passage_words) for p in ex.gold_passages]


def retrieved_information(ex: QAExample, hits: Sequence[Any], max_passage_words: int | None) -> list[str]:
    """The environment's passages for the question's search (``hits``: the index's top passages, best first), each cut
    as the environment cuts it; a gold passage among them is cut around the answer instead, and when none is, the
    first gold passage takes the last hit's place, so the answer is always in the block."""
    gold = {p.id for p in ex.gold_passages}
    texts = [answer_cut(h.passage, ex.answers, max_passage_words) if h.passage.id in gold
             else cut_words(passage_with_title(h.passage), max_passage_words) for h in hits]
    if gold.isdisjoint(h.passage.id for h in hits):
        texts[-1:] = [answer_cut(ex.gold_passages[0], ex.answers, max_passage_words)]
    return texts


def segments(ex: QAExample, known: bool, max_passage_words: int | None,
             information: Sequence[str] | None = None) -> list[tuple[str, int]]:
    """The completion as (text, written by the policy: 1 / by the environment: 0) pieces, in order; ``information``:
    the passages of the search (default: the gold passages)."""
    answer = answer_turn(ex.answers[0])
    if known:
        return [(answer, 1)]
    passages = list(information) if information is not None else gold_information(ex, max_passage_words)
    return [(search_turn(ex.question), 1), (information_block(passages), 0), (answer, 1)]


def instance(tokenizer: Any, ex: QAExample, known: bool, settings: SearchSettings,
             information: Sequence[str] | None = None) -> dict[str, Any]:
    """One training row: the readable prompt and completion, and the ids trl trains on (``completion_mask`` 1 on the
    policy's ids and the closing EOS, 0 on the prompt and on the ``<information>`` block)."""
    if not ex.answers or not ex.answers[0].strip():
        raise DataError("a question without a gold answer cannot be written as a trajectory", record=ex.id)
    if not known and not ex.gold_passages:
        raise DataError("a question answered wrongly closed-book needs a gold passage for its <information> block",
                        record=ex.id)
    pieces = segments(ex, known, settings.max_passage_words, information)
    head = first_ids(tokenizer, ex.question, settings)
    ids, mask = list(head), [0] * len(head)
    for text, policy in pieces:
        piece = continuation_ids(tokenizer, text)
        ids += piece
        mask += [policy] * len(piece)
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
        mask.append(1)
    return {"prompt": search_prompt(ex.question), "completion": "".join(t for t, _ in pieces),
            "kind": KINDS[0] if known else KINDS[1], "question_id": ex.id, "input_ids": ids, "completion_mask": mask}


def search_dataset(tokenizer: Any, examples: Sequence[QAExample], known_ids: set[str], splits: dict[str, set[str]],
                   settings: SearchSettings, information: dict[str, list[str]] | None = None) -> DatasetDict:
    """The warm-start rows of ``examples`` (``known_ids``: answered correctly closed-book), split as Algorithm 1's
    dataset splits its questions (``splits``: split name -> question ids), so one question stays on one side;
    ``information``: question id -> the passages of its search (default: its gold passages)."""
    information = information or {}
    rows = {name: [instance(tokenizer, ex, ex.id in known_ids, settings, information.get(ex.id))
                   for ex in examples if ex.id in ids]
            for name, ids in splits.items()}
    if not rows.get("train"):
        raise DataError("no training question for the search warm start")
    return DatasetDict({name: Dataset.from_dict({c: [r[c] for r in part] for c in COLUMNS})
                        for name, part in rows.items()})


def labels_of(dsd: DatasetDict) -> tuple[set[str], dict[str, set[str]]]:
    """From Algorithm 1's DatasetDict: the questions answered correctly closed-book, and each split's questions."""
    known = {q for ds in dsd.values() for q, k in zip(ds["question_id"], ds["kind"]) if k == "parametric_answer"}
    return known, {name: set(ds["question_id"]) for name, ds in dsd.items()}
