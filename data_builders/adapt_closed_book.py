"""Algorithm 1's expensive step, ``ans = LLM(q)``, made resumable: closed-book answers go to a JSONL file
as each batch finishes, and a rerun asks only the questions whose ids are not in it yet.

Each line is ``{"id", "answer", "labeller"}``; ``labeller`` names the model and prompt that answered, so a
file written by another model is refused instead of silently mixed in.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from data_builders.adapt_prompts import PromptVariant, never_retrieve_prompt, response_text
from data_builders.schema import DataError, QAExample

logger = logging.getLogger(__name__)

# Answers a batch of questions closed-book: one string per example, in order.
ClosedBookFn = Callable[[Sequence[QAExample]], list[str]]


def read_answers(path: str | Path, labeller: dict[str, Any]) -> dict[str, str]:
    """Answers already in ``path`` (id -> answer). A torn last line (a crash mid-write) is cut off the file;
    a bad line elsewhere, or one written by another labeller, is an error."""
    p = Path(path)
    if not p.is_file():
        return {}
    lines = p.read_text(encoding="utf-8").split("\n")
    answers: dict[str, str] = {}
    good_chars = 0
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            good_chars += len(line) + 1
            continue
        try:
            rec = json.loads(line)
            qid, answer, who = str(rec["id"]), rec["answer"], rec["labeller"]
        except (json.JSONDecodeError, KeyError, TypeError) as err:
            if all(not rest.strip() for rest in lines[n:]):  # only the last record can be torn
                logger.warning("%s: dropping a torn last line (%s)", p, err)
                _truncate(p, good_chars)
                break
            raise DataError(f"malformed closed-book record ({err})", source=f"{p}, line {n}") from err
        if who != labeller:
            raise DataError(f"written by {who}, but this run labels with {labeller}; use another data_dir "
                            "or delete the file to relabel", source=f"{p}, line {n}")
        answers[qid] = answer
        good_chars += len(line) + 1
    return answers


def _truncate(path: Path, n_chars: int) -> None:
    text = path.read_text(encoding="utf-8")[:n_chars]
    path.write_text(text if not text or text.endswith("\n") else text + "\n", encoding="utf-8")


def answer_closed_book(examples: Sequence[QAExample], answer_fn: ClosedBookFn, path: str | Path,
                       labeller: dict[str, Any], batch_size: int, show_progress: bool = True) -> dict[str, str]:
    """Closed-book answers for every example, reusing those already in ``path`` and appending new ones
    batch by batch (flushed and fsynced, so an interrupted run loses at most the batch in flight)."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    answers = read_answers(p, labeller)
    todo = [ex for ex in examples if ex.id not in answers]
    todo = list({ex.id: ex for ex in todo}.values())  # a repeated id is asked once
    if answers:
        logger.info("%s: %d answers found, %d questions left", p, len(examples) - len(todo), len(todo))
    with p.open("a", encoding="utf-8") as f, tqdm(total=len(todo), desc="closed-book answers", unit="q",
                                                  disable=not show_progress) as bar:
        for start in range(0, len(todo), batch_size):
            batch = todo[start:start + batch_size]
            outputs = answer_fn(batch)
            if len(outputs) != len(batch):
                raise RuntimeError(f"the closed-book generator returned {len(outputs)} answers for {len(batch)} "
                                   "questions")
            for ex, out in zip(batch, outputs):
                f.write(json.dumps({"id": ex.id, "answer": out, "labeller": labeller}, ensure_ascii=False) + "\n")
                answers[ex.id] = out
            f.flush()
            os.fsync(f.fileno())
            bar.update(len(batch))
    return answers


def model_closed_book_fn(model_name: str, variant: PromptVariant, max_new_tokens: int, batch_size: int,
                         dtype: str = "auto") -> ClosedBookFn:
    """Answer with the base model and the NR prompt (greedy; :func:`response_text` keeps the answer part); the
    model loads on first use."""
    state: dict[str, Any] = {}

    def answer(batch: Sequence[QAExample]) -> list[str]:
        from inference.generation import generate_texts
        from inference.models import ModelOptions, load_causal_lm

        if "model" not in state:
            state["model"], state["tokenizer"] = load_causal_lm(model_name, ModelOptions(dtype=dtype))
        prompts = [never_retrieve_prompt(ex.question, variant) for ex in batch]
        gens = generate_texts(state["model"], state["tokenizer"], prompts, max_new_tokens=max_new_tokens,
                              batch_size=batch_size)
        return [response_text(g.text) for g in gens]

    return answer
