"""Search-R1's interaction protocol as text: the instruction, the tags, and how a turn is read.

Search-R1 (Jin et al., 2025, arXiv:2503.09516) prompts the policy with an instruction that names three tags; the
policy writes ``<search> query </search>`` to search, the environment appends ``<information> ... </information>``
holding the top passages for exactly that query, and the policy ends with ``<answer> ... </answer>``. The
instruction below is the paper's (its Table 1) without the ``<think>`` requirement, which a 135M model does not
follow; the tags and the environment's reply are the paper's. Training (``training/grpo_search_rollout.py``) and
the evaluation method (:mod:`inference.search_agent.method`) build the prompt and read turns here only, so they
cannot drift apart. Nothing here loads a model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

SEARCH_OPEN, SEARCH_CLOSE = "<search>", "</search>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
INFO_OPEN, INFO_CLOSE = "<information>", "</information>"
STOP_TEXTS = (SEARCH_CLOSE, ANSWER_CLOSE)

INSTRUCTION = (
    "Answer the given question. If you find you lack some knowledge, you can call a search engine by "
    f"{SEARCH_OPEN} query {SEARCH_CLOSE} and it will return the top searched results between {INFO_OPEN} and "
    f"{INFO_CLOSE}. You can search as many times as you want. If you find no further external knowledge needed, "
    f"you can directly provide the answer inside {ANSWER_OPEN} and {ANSWER_CLOSE}, without detailed "
    f"illustrations. For example, {ANSWER_OPEN} Beijing {ANSWER_CLOSE}. Question: {{question}}\n")

_SEARCH = re.compile(re.escape(SEARCH_OPEN) + r"(.*?)" + re.escape(SEARCH_CLOSE), re.S)
_ANSWER = re.compile(re.escape(ANSWER_OPEN) + r"(.*?)" + re.escape(ANSWER_CLOSE), re.S)


def search_prompt(question: str) -> str:
    """The policy's prompt for ``question`` (plain text; a chat model gets it as its user turn)."""
    return INSTRUCTION.format(question=question.strip())


def information_block(passages: Sequence[str]) -> str:
    """The environment's reply to a search: the passages numbered, as Search-R1 writes them ("Doc i ...")."""
    body = "\n".join(f"Doc {i + 1}: {' '.join(p.split())}" for i, p in enumerate(passages))
    return f"\n\n{INFO_OPEN}{body}{INFO_CLOSE}\n\n"


def turn_query(turn_text: str) -> str | None:
    """The query of a turn that ends by closing a search: the text of its last ``<search>`` block, stripped
    (None when the turn does not end with ``</search>`` or the block is empty)."""
    if not turn_text.rstrip().endswith(SEARCH_CLOSE):
        return None
    found = _SEARCH.findall(turn_text)
    query = " ".join(found[-1].split()) if found else ""
    return query or None


def final_answer(text: str) -> str | None:
    """The text of the last ``<answer>`` block of the whole trajectory, None without one."""
    found = _ANSWER.findall(text)
    return " ".join(found[-1].split()) if found else None


@dataclass(frozen=True)
class FormatCheck:
    """Whether a trajectory kept the protocol, and the first rule it broke."""

    ok: bool
    problem: str = ""


def check_format(turns: Sequence[str], ended: str) -> FormatCheck:
    """The protocol kept: every turn but the last closes exactly one non-empty search and holds no answer; the last
    closes one answer (nothing after it but EOS) and holds no search; ``ended`` (the last turn's stop reason) is not
    ``length``."""
    if not turns:
        return FormatCheck(False, "no turn")
    for t in turns[:-1]:
        if t.count(SEARCH_OPEN) != 1 or turn_query(t) is None or ANSWER_OPEN in t:
            return FormatCheck(False, "a search turn without exactly one non-empty search")
    last = turns[-1]
    if ended == "length":
        return FormatCheck(False, "ran out of tokens")
    if SEARCH_OPEN in last or last.count(ANSWER_OPEN) != 1 or final_answer(last) in (None, ""):
        return FormatCheck(False, "the last turn holds no single non-empty answer")
    if last.rstrip().split(ANSWER_CLOSE)[-1].strip():
        return FormatCheck(False, "text after the answer")
    return FormatCheck(True)
