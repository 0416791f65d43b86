"""DRAGIN's FLARE baseline as the authors ran it: their ``TokenRAG`` (oneal2000/DRAGIN ``src/generate.py``), not
jzbjyb's FLARE (``flare``).

A round is generated to its end, then its sentences are judged in order: a sentence is hallucinated when the mean
of ``1 - p`` over its tokens (``sentence_solver: avg``; ``max`` and ``min`` too) exceeds ``token_rag_threshold``;
the first such sentence fires, everything before it is kept, and its tokens above the threshold are the hits the
query leaves out (``token_rag`` query former). Their windows are kept as they are: a sentence's window runs one
token into the next sentence, and every sentence after the first starts one token late (``logprobs[tid:tr+1]``,
then ``tid = tr + 1``). After the retrieval the next round is written with the documents and kept whole, unchecked;
the round after it has none (``docs_scope: next_round``).

Under ``word_text: tokens`` (the reference profile) the round is judged by their ``modifier`` itself
(:func:`authors_modifier`): their tokens are each token decoded alone (``tokenizer.decode(t)``), found in the
round's sentences by ``str.find`` (their offsets and all), and the query is their ``curr`` with ``[xxx]`` taken out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from inference.dynamic_rag.round_view import Event, RoundView
from inference.dynamic_rag.triggers import Trigger, register_trigger

_SOLVERS = {"avg": lambda v: sum(v) / len(v), "max": max, "min": min}


@dataclass
class AuthorsTokenFiring:
    sentence: int  # index of the hallucinated sentence among the round's sentences
    token: int  # their tid there: the first token of its window
    score: float
    query: str  # curr.replace("[xxx]", "")


def authors_modifier(sentences: list[str], tokens: list[str], unsure: list[float], threshold: float,
                     solver) -> AuthorsTokenFiring | None:
    """Their ``TokenRAG.modifier`` as written (src/generate.py). A sentence's tokens run from ``tid`` while each
    is found in the sentence after ``pos``; their ``pos`` is the offset inside the slice searched, not in the
    sentence, and the window takes one token more (``logprobs[tid:tr+1]``); the next sentence starts one token past
    it. In the firing sentence each token above the threshold is replaced by ``[xxx]`` where ``find`` puts it (a
    token not found lands one character before ``pos``). An empty window never fires (their mean of nothing is
    NaN)."""
    tid = 0
    for sid, sent in enumerate(sentences):
        pos, tr = 0, tid
        while tr < len(tokens):
            apr = sent[pos:].find(tokens[tr])
            if apr == -1:
                break
            pos = apr + len(tokens[tr])
            tr += 1
        window = unsure[tid:tr + 1]
        score = solver(window) if window else float("nan")
        if score > threshold:
            curr, pos = sentences[sid], 0
            for prob, tok in zip(window, tokens[tid:tr + 1]):
                apr = curr[pos:].find(tok) + pos
                if prob > threshold:
                    curr = curr[:apr] + "[xxx]" + curr[apr + len(tok):]
                    pos = apr + len("[xxx]")
                else:
                    pos = apr + len(tok)
            return AuthorsTokenFiring(sid, tid, score, curr.replace("[xxx]", ""))
        tid = tr + 1
    return None


def sentence_windows(starts: list[int]) -> list[tuple[int, int, int, int]]:
    """Per sentence ``(first, end, lo, hi)``: its tokens ``[first, end)`` and the authors' window ``[lo, hi]``."""
    bounds = [i for i in range(len(starts)) if i == 0 or starts[i] != starts[i - 1]] + [len(starts)]
    n = len(starts)
    return [(a, b, a + (k > 0), min(b, n - 1)) for k, (a, b) in enumerate(zip(bounds, bounds[1:]))]


@register_trigger("token_rag")
class TokenRag(Trigger):
    judges_content = True

    @dataclass
    class Knobs:
        # their hallucination_threshold for TokenRAG; None: the profile's row (inference/dynamic_rag/dragin_settings.py:
        # Llama2-7b-chat HotpotQA 0.08, 2Wiki 0.1, ...)
        token_rag_threshold: float | None = None
        token_rag_solver: Literal["avg", "max", "min"] = "avg"  # their sentence_solver

    def validate(self, cfg) -> None:
        if cfg.token_rag_solver not in _SOLVERS:
            raise ValueError(f"token_rag_solver must be one of {', '.join(_SOLVERS)}, got {cfg.token_rag_solver!r}")

    def check(self, view: RoundView, cfg, *, final: bool) -> Event | None:
        if not final or not view.pieces:
            return None
        threshold = 0.08 if cfg.token_rag_threshold is None else cfg.token_rag_threshold
        solver = _SOLVERS[cfg.token_rag_solver]
        if view.raw_words is not None:  # word_text tokens: their modifier over their strings
            fired = authors_modifier(view.sentences(), view.raw_words.decoded(view.ids),
                                     [1.0 - p for p in view.probs], threshold, solver)
            if fired is None:
                return None
            keep = min(fired.token, len(view.pieces))
            return Event(keep, fired.score, keep, sentence=fired.sentence, query=fired.query)
        protected = view.protected_end() if cfg.keep_sentence_after_retrieval else 0  # a round is judged once, whole
        for first, end, lo, hi in sentence_windows(view.sentence_starts()):
            if first < protected or lo > hi:
                continue
            unsure = [1.0 - view.probs[i] for i in range(lo, hi + 1)]
            score = solver(unsure)
            if score > threshold:
                hits = [i for i in range(lo, min(hi + 1, end)) if 1.0 - view.probs[i] > threshold]
                return Event(first, score, first, hits=[hits])
        return None
