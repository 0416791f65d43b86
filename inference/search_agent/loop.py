"""The multi-turn search loop (Search-R1's protocol) over a batch of questions, as token ids.

Each turn continues every open trajectory until ``</search>``, ``</answer>``, EOS or the turn's token budget
(:func:`~inference.search_agent.decoding.decode_until`). A turn that closes a search sends exactly the query the
policy wrote to the retriever and appends the ``<information>`` block as ids the policy did not write
(``env_mask`` 0); any other turn ends the trajectory. After ``max_searches`` searches a further search is not run and
ends the trajectory (its format check fails). Greedy at evaluation, sampled in training (same loop).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from adaptive_rag.lm.generation import chat_prompt
from adaptive_rag.lm.sampling import Sampler
from adaptive_rag.lm.tokenization import continuation_ids, prompt_ids
from adaptive_rag.plumbing.retriever import Retriever
from inference.adapt_gate.gate import passage_with_title
from inference.search_agent.decoding import decode_until
from inference.search_agent.protocol import (
    SEARCH_OPEN,
    STOP_TEXTS,
    FormatCheck,
    check_format,
    final_answer,
    information_block,
    search_prompt,
    turn_query,
)


@dataclass
class SearchSettings:
    max_searches: int = 3  # Search-R1 allows up to 4 turns; a 135M model rarely needs more than one search
    top_k: int = 3  # passages per search (Search-R1: 3)
    turn_max_new_tokens: int = 48  # per turn; the whole completion is at most (max_searches + 1) times this
    chat: bool = True  # the prompt as the user turn of the model's chat template (plain text without a template)
    batch_size: int = 16
    max_passage_words: int | None = 60  # each passage cut to this many words inside <information>

    def __post_init__(self) -> None:
        if self.max_searches < 0 or self.top_k < 1 or self.turn_max_new_tokens < 1 or self.batch_size < 1:
            raise ValueError("max_searches must be >= 0; top_k, turn_max_new_tokens and batch_size >= 1")


@dataclass
class Trajectory:
    """One question's rollout: ``completion_ids`` are the policy's and the environment's ids in order, ``env_mask``
    1 where the policy wrote the id, ``logprobs`` the policy's (0.0 on the environment's)."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[str] = field(default_factory=list)  # the policy's own text per turn
    searches: list[tuple[str, list[str]]] = field(default_factory=list)  # (query, doc ids) in order
    answer: str | None = None
    ended: str = "length"
    format: FormatCheck = field(default_factory=lambda: FormatCheck(False, "no turn"))

    @property
    def generated_tokens(self) -> int:
        return sum(self.env_mask)


def first_ids(tokenizer, question: str, settings: SearchSettings) -> list[int]:
    """The prompt's ids: Search-R1's instruction, in the chat template when asked and the tokenizer has one."""
    text = search_prompt(question)
    if settings.chat:
        text = chat_prompt(tokenizer, text)
    return prompt_ids(tokenizer, text)


def run_search(model, tokenizer, retriever: Retriever, questions: Sequence[str], settings: SearchSettings,
               sampler: Sampler | None = None, decode=None, opened: Collection[int] = ()) -> list[Trajectory]:
    """One trajectory per question, in order. ``decode``: another backend with :func:`decode_until`'s signature
    (training with vLLM). ``opened``: rows whose first turn starts with ``<search>`` written for the policy (training's
    exploration; the query is still the policy's own, its log-probabilities of the forced ids unknown: NaN)."""
    decode = decode or decode_until
    trajs = [Trajectory(first_ids(tokenizer, q, settings)) for q in questions]
    opening = continuation_ids(tokenizer, SEARCH_OPEN)
    for i in opened:
        trajs[i].completion_ids, trajs[i].env_mask = list(opening), [1] * len(opening)
        trajs[i].logprobs = [math.nan] * len(opening)
    open_rows = list(range(len(trajs)))
    for turn in range(settings.max_searches + 1):
        if not open_rows:
            break
        contexts = [trajs[i].prompt_ids + trajs[i].completion_ids for i in open_rows]
        outs = decode(model, tokenizer, contexts, max_new_tokens=settings.turn_max_new_tokens,
                            stop_texts=STOP_TEXTS, sampler=sampler, batch_size=settings.batch_size)
        searching: list[tuple[int, str]] = []
        for i, out in zip(open_rows, outs):
            t = trajs[i]
            forced = opening if turn == 0 and i in opened else []
            t.completion_ids += out.ids
            t.env_mask += [1] * len(out.ids)
            t.logprobs += out.logprobs
            t.turns.append(tokenizer.decode(forced + out.ids, skip_special_tokens=True))
            t.ended = out.reason
            query = turn_query(t.turns[-1]) if out.reason == "stop" else None
            if query is not None and turn < settings.max_searches:
                searching.append((i, query))
        if searching:
            hits = retriever.search([q for _, q in searching], settings.top_k)
            for (i, query), row in zip(searching, hits):
                t = trajs[i]
                t.searches.append((query, [h.passage.id for h in row]))
                texts = [cut_words(passage_with_title(h.passage), settings.max_passage_words) for h in row]
                info = continuation_ids(tokenizer, information_block(texts))
                t.completion_ids += info
                t.env_mask += [0] * len(info)
                t.logprobs += [0.0] * len(info)
        open_rows = [i for i, _ in searching]
    for t in trajs:
        t.answer = final_answer("".join(t.turns))
        t.format = check_format(t.turns, t.ended)
    return trajs


def cut_words(text: str, max_words: int | None) -> str:
    """A passage as the environment shows it: its first ``max_words`` words (all of them for None)."""
    words = text.split()
    return " ".join(words if max_words is None else words[:max_words])
