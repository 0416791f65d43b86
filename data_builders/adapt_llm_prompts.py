"""ADAPT-LLM's three prompts, built from the template files in ``data_builders/templates/``.

    parametric_prompt("Who wrote Hamlet?")            # answer, or "<RET>" to ask for context
    context_prompt("Who wrote Hamlet?", [passage])     # answer given the context C
    never_retrieve_prompt("Who wrote Hamlet?")         # plain closed-book answer (NR; Algorithm 1's LLM(q))

All three are the Alpaca template (``alpaca.json``) around an instruction and an input
(``adapt_llm.json``). ``variant="paper"`` is the paper's wording, ``"reference"`` the authors'
evaluation script's. The Algorithm 1 builder and the inference gate both build prompts here, so
training and inference text can never drift apart. Nothing here loads a model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from adaptive_rag.plumbing.records import Passage

RET_TOKEN = "<RET>"
PromptVariant = Literal["paper", "reference"]
TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"  # package path: never the working directory
SECTION_MARKER = "###"  # the Alpaca template's section headers: a model that writes one has left its answer


@cache
def load_templates() -> dict[str, Any]:
    """The Alpaca wrapper and the ADAPT-LLM instructions, read once."""
    alpaca = json.loads((TEMPLATE_DIR / "alpaca.json").read_text(encoding="utf-8"))
    adapt = json.loads((TEMPLATE_DIR / "adapt_llm.json").read_text(encoding="utf-8"))
    return {"alpaca": alpaca, "adapt": adapt}


def _instruction(kind: str, variant: str) -> str:
    variants = load_templates()["adapt"]["variants"]
    if variant not in variants:
        raise ValueError(f"unknown prompt variant '{variant}'; choose one of {sorted(variants)}")
    return variants[variant][kind]


def alpaca_prompt(instruction: str, input_text: str | None = None) -> str:
    """The Alpaca text that ends right where the response starts ("### Response:\\n")."""
    alpaca = load_templates()["alpaca"]
    if input_text:
        return alpaca["prompt_input"].format(instruction=instruction, input=input_text)
    return alpaca["prompt_no_input"].format(instruction=instruction)


def passage_text(passage: Passage | str, max_words: int | None = None) -> str:
    """A passage as the context shows it: its text (the world's and SQuAD's texts name their subject), cut to
    ``max_words`` words so that a long paragraph cannot push the answer past the training length limit."""
    text = passage.text if isinstance(passage, Passage) else passage
    text = " ".join(text.split())
    if max_words is not None:
        words = text.split(" ")
        if len(words) > max_words:
            text = " ".join(words[:max_words])
    return text


@dataclass(frozen=True)
class PassageCut:
    """A training passage after :func:`answer_window`."""

    text: str
    cut: bool  # it was longer than max_words, so words were left out
    recentred: bool  # its first max_words words would have lost the answer: the window moved to the answer


def _first_answer(lowered: str, answers: Sequence[str]) -> tuple[int, int] | None:
    """(start, length) of the earliest occurrence in ``lowered`` of the target (``answers[0]``), or, when the
    passage lacks it, of any alias; None when it holds none."""
    normalised = [" ".join(a.split()).lower() for a in answers]
    for group in (normalised[:1], normalised[1:]):
        spots = [(lowered.find(a), -len(a)) for a in group if a and a in lowered]
        if spots:
            start, neg_length = min(spots)
            return start, -neg_length
    return None


def answer_window(passage: Passage | str, max_words: int | None, answers: Sequence[str]) -> PassageCut:
    """Cut a training passage to ``max_words`` words without cutting its answer away: the first words, as
    :func:`passage_text` cuts, unless the answer lies beyond them; then a window of ``max_words`` words centred on
    the answer's first occurrence (case-insensitive). Inference cuts retrieved passages plainly: it knows no answer.
    """
    text = passage_text(passage)
    words = text.split(" ")
    if max_words is None or len(words) <= max_words:
        return PassageCut(text, cut=False, recentred=False)
    head = " ".join(words[:max_words])
    lowered = text.lower()
    found = _first_answer(lowered, answers)
    if found is None or found[0] + found[1] <= len(head):
        return PassageCut(head, cut=True, recentred=False)
    start, length = found
    first_word = lowered[:start].count(" ")
    last_word = lowered[:start + length - 1].count(" ")
    slack = max(0, max_words - (last_word - first_word + 1))
    begin = min(max(0, first_word - slack // 2), len(words) - max_words)
    return PassageCut(" ".join(words[begin:begin + max_words]), cut=True, recentred=True)


def parametric_prompt(question: str, variant: PromptVariant = "paper") -> str:
    """Answer Q, or answer ``<RET>`` to get the context (the gate's first prompt)."""
    fmt = load_templates()["adapt"]["question_input"]
    return alpaca_prompt(_instruction("parametric", variant), fmt.format(question=question.strip()))


def context_prompt(question: str, passages: Sequence[Passage | str], variant: PromptVariant = "paper",
                   max_passage_words: int | None = None) -> str:
    """Answer Q given the context C; several passages are joined one per line."""
    if not passages:
        raise ValueError("context_prompt needs at least one passage")
    adapt = load_templates()["adapt"]
    context = adapt["passage_separator"].join(passage_text(p, max_passage_words) for p in passages)
    text = adapt["context_input"].format(question=question.strip(), context=context)
    return alpaca_prompt(_instruction("context", variant), text)


def never_retrieve_prompt(question: str, variant: PromptVariant = "paper") -> str:
    """Answer Q (no ``<RET>`` option): the closed-book prompt of NR and of Algorithm 1's ``LLM(q)``."""
    fmt = load_templates()["adapt"]["question_input"]
    return alpaca_prompt(_instruction("never_retrieve", variant), fmt.format(question=question.strip()))


def response_text(generated: str) -> str:
    """The answer part of a generation: up to the first blank line or Alpaca section marker ("###"), lines
    joined. A base model often writes "The answer is:\nHerman Melville.\n\n### Explanation: ...", whose first
    line alone would lose the answer."""
    text = generated.split(SECTION_MARKER)[0]
    text = text.strip().split("\n\n")[0]
    return " ".join(text.split())

