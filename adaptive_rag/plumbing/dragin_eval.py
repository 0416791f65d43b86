"""DRAGIN's evaluation as the authors ran it (oneal2000/DRAGIN ``src/eval.py`` and the datasets' ``get_real_prediction``
in ``src/data.py``), the ``answer_extraction: dragin`` mode that ``dragin_profile: reference`` selects.

Three steps, each unlike the project's own extraction (:func:`adaptive_rag.plumbing.metrics.extract_answer`):

1. **Cut**: the output ends at the first "Question:", "#10000000" or "Note:" (not at the very start).
2. **Regenerate** (``regenerate_answer``): an output that, once cut, lacks "the answer is" (case-sensitive) gets
   " So the answer is " (trailing space included, so the prompt ends with it) appended and 20 more greedy tokens
   generated after it (demos + question + that text, no documents); the result is cut again. The engine does this
   (it needs the model); the authors' counter does not count that call, the engine's record does
   (``llm_forward_passes``, ``generated_tokens``).
3. **Extract**: the text after the *first* "the answer is" (case-sensitive) to the end of the output, with a trailing
   "</s>", "<|endoftext|>" and "." stripped once each (IIRC also a newline); no marker gives "" (2Wiki: the whole
   output). StrategyQA: "yes" when that text starts with "yes" (any case), anything else "no".

EM and F1 then compare the extracted answer with the golds as the official scorers do (the authors' own functions
are the same SQuAD normalisation with HotpotQA's yes/no rule).
"""

from __future__ import annotations

from typing import Literal

from adaptive_rag.plumbing.metrics import contained_accuracy, exact_match, token_f1_precision_recall

AnswerExtraction = Literal["project", "dragin"]
DatasetKind = Literal["hotpotqa", "2wiki", "iirc", "strategyqa"]
SPLIT_WORDS = ("Question:", "#10000000", "Note:")
MARKER = "the answer is"  # case-sensitive, as in the authors' code
REGENERATE_SUFFIX = " So the answer is "  # with its trailing space: the model continues after it
REGENERATE_TOKENS = 20
_YES_NO_GOLD = {"true": "yes", "false": "no"}  # StrategyQA's golds are booleans in some files
_DATASET_NAMES: dict[str, DatasetKind] = {"hotpot": "hotpotqa", "2wiki": "2wiki", "wikimultihop": "2wiki",
                                          "iirc": "iirc", "strategy": "strategyqa"}


def dataset_kind(*hints: str | None) -> DatasetKind | None:
    """Which of the authors' four datasets the first hint naming one (a dataset path or name, the demos' name) is."""
    for hint in hints:
        low = str(hint or "").lower()
        for key, kind in _DATASET_NAMES.items():
            if key in low:
                return kind
    return None


def cut_output(text: str, *, keep_leading: bool = True) -> str:
    """The output up to the first split word; ``keep_leading`` (the first cut in ``regenerate_answer``) ignores a
    split word at position 0, as the authors' ``pos > 0`` test does."""
    for word in SPLIT_WORDS:
        pos = text.find(word)
        if pos > 0 or (pos == 0 and not keep_leading):
            text = text[:pos]
    return text


def needs_regeneration(output: str) -> bool:
    """Would ``regenerate_answer`` force an answer onto this output?"""
    return MARKER not in cut_output(output)


def regeneration_prefix(output: str) -> str:
    """The answer so far that the forced answer continues (cut, then " So the answer is")."""
    return cut_output(output) + REGENERATE_SUFFIX


def finish_regenerated(prefix: str, continuation: str) -> str:
    """``cot + text.strip()`` cut again, as ``regenerate_answer`` returns it (``prefix`` ends with the suffix's
    space)."""
    return cut_output(prefix + continuation.strip(), keep_leading=False)


def dragin_answer(output: str, kind: DatasetKind | None) -> str:
    """``get_real_prediction`` of the authors' dataset class ``kind`` (None: HotpotQA's rule) on an output already cut
    and regenerated."""
    pos = output.find(MARKER)
    if pos < 0:
        return output if kind == "2wiki" else ""
    pred = output[pos + len(MARKER) + 1:]  # the +1 skips the space after the marker
    if kind == "strategyqa":
        return "yes" if pred[0:3].lower() == "yes" else "no"
    endings = ("</s>", "<|endoftext|>", "\n", ".") if kind == "iirc" else ("</s>", "<|endoftext|>", ".")
    for ending in endings:
        if pred.endswith(ending):
            pred = pred[:-len(ending)]
    return pred


def score_dragin(output: str, golds: list[str], kind: DatasetKind | None) -> dict[str, float]:
    """EM, F1, precision, recall and contained accuracy on the answer the authors' evaluation extracts."""
    answer = dragin_answer(cut_output(output, keep_leading=False), kind)
    golds = [_YES_NO_GOLD.get(str(g).strip().lower(), str(g)) for g in golds] if kind == "strategyqa" else golds
    f1, precision, recall = token_f1_precision_recall(answer, golds)
    return {"em": exact_match(answer, golds), "f1": f1, "precision": precision, "recall": recall,
            "acc": contained_accuracy(answer, golds)}
