"""Algorithm 1's expensive step, ``ans = LLM(q)``, made resumable: closed-book answers go to a JSONL file
as each batch finishes, and a rerun asks only the questions whose ids are not in it yet.

Each line is ``{"id", "answer", "labeller"}``; ``labeller`` names the model and prompt that answered, so a
file written by another model is refused instead of silently mixed in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from adaptive_rag.lm.generation import Generator, LMGenerator
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.progress import bar_options
from adaptive_rag.plumbing.record_log import FolderLock, RecordLog
from adaptive_rag.plumbing.records import QAExample
from data_builders.adapt_llm_prompts import PromptVariant, never_retrieve_prompt, response_text

logger = logging.getLogger(__name__)

# Answers a batch of questions closed-book: one string per example, in order.
ClosedBookFn = Callable[[Sequence[QAExample]], list[str]]


def _closed_book_log(path: str | Path, labeller: dict[str, Any]) -> RecordLog:
    """The answer log; every record must carry an answer and come from this ``labeller``."""

    def check(rec: dict, where: str) -> None:
        if not isinstance(rec.get("answer"), str) or "labeller" not in rec:
            raise DataError("malformed closed-book record (needs 'id', 'answer' and 'labeller')", source=where)
        if rec["labeller"] != labeller:
            raise DataError(f"written by {rec['labeller']}, but this run labels with {labeller}; use another data_dir "
                            "or delete the file to relabel", source=where)

    return RecordLog(path, key="id", check=check)


def read_answers(path: str | Path, labeller: dict[str, Any]) -> dict[str, str]:
    """Answers already in ``path`` (id -> answer). A torn last line (a crash mid-write, even inside a multi-byte
    character) is cut off the file; a bad line elsewhere, or one written by another labeller, is an error."""
    return {str(rec["id"]): rec["answer"] for rec in _closed_book_log(path, labeller).read()}


def answer_closed_book(examples: Sequence[QAExample], answer_fn: ClosedBookFn, path: str | Path,
                       labeller: dict[str, Any], batch_size: int, show_progress: bool = True) -> dict[str, str]:
    """Closed-book answers for every example, reusing those already in ``path`` and appending new ones
    batch by batch (flushed and fsynced, so an interrupted run loses at most the batch in flight). The log's
    folder is locked while answering: a second run on it fails at once instead of interleaving its answers."""
    p = Path(path)
    with FolderLock(p.parent):
        log = _closed_book_log(p, labeller)
        answers = read_answers(p, labeller)
        todo = [ex for ex in examples if ex.id not in answers]
        todo = list({ex.id: ex for ex in todo}.values())  # a repeated id is asked once
        if answers:
            logger.info("%s: %d answers found, %d questions left", p, len(examples) - len(todo), len(todo))
        with tqdm(total=len(todo), desc="closed-book answers", unit="q",
                  **bar_options(disable=not show_progress)) as bar:
            for start in range(0, len(todo), batch_size):
                batch = todo[start:start + batch_size]
                outputs = answer_fn(batch)
                if len(outputs) != len(batch):
                    raise RuntimeError(f"the closed-book generator returned {len(outputs)} answers for {len(batch)} "
                                       "questions")
                log.append({"id": ex.id, "answer": out, "labeller": labeller} for ex, out in zip(batch, outputs))
                answers.update((ex.id, out) for ex, out in zip(batch, outputs))
                bar.update(len(batch))
    return answers


def model_closed_book_fn(model_name: str, variant: PromptVariant, max_new_tokens: int, batch_size: int,
                         dtype: str = "auto") -> ClosedBookFn:
    """Answer with the base model and the NR prompt (greedy; :func:`response_text` keeps the answer part); the
    model loads on first use."""
    state: dict[str, Generator] = {}

    def answer(batch: Sequence[QAExample]) -> list[str]:
        if "generator" not in state:
            state["generator"] = LMGenerator.from_name(model_name, dtype=dtype, max_new_tokens=max_new_tokens,
                                                       batch_size=batch_size)
        gens = state["generator"].generate([never_retrieve_prompt(ex.question, variant) for ex in batch])
        return [response_text(g.text) for g in gens]

    return answer
