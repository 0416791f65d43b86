"""DRAGIN with the authors' compute pattern (oneal2000/DRAGIN ``src/generate.py``): the benchmark's headline baseline
(kept out of the package).

What their code runs per question, one question at a time: ``generate`` over the full prompt at every round (demos,
documents, question, answer so far: no KV cache kept across calls), on a model loaded with eager attention (their
attention passes ask for ``output_attentions``); then one extra forward pass over **the round's generated text only**
for RIND's attention, and, when retrieval fires, one over **question + answer so far + the current sentence** (no
demos, no documents) for QFS. A round that only writes the sentence its documents were for is kept unchecked, so it
gets no RIND pass.

The decisions use the project's formulas (``check_trigger``, ``form_query``, the progress guarantee, the paper prompt's
stop) on the rows those shorter passes give, so retrievals and outputs can differ from the engine's, whose rows span
the whole prompt (``bench/dragin_replay.py`` makes the engine's decisions and is the tests' oracle).
"""

from __future__ import annotations

import torch
from dragin_replay import DraginReplay

from adaptive_rag.lm.tokenization import adds_bos, prompt_ids
from adaptive_rag.plumbing.records import QAExample
from inference.dynamic_rag.round_view import RoundView


class AuthorsPatternDragin(DraginReplay):
    """``attn``: the attention of ``generate`` ("eager" as their code gets it with current transformers; "sdpa")."""

    def __init__(self, *args, attn: str = "eager", **kwargs):
        super().__init__(*args, **kwargs)
        if attn not in ("eager", "sdpa"):
            raise ValueError(f"attn must be 'eager' or 'sdpa', got '{attn}'")
        self.generator = self.eager if attn == "eager" else self.model
        self.bos = [self.tokenizer.bos_token_id] if adds_bos(self.tokenizer) else []

    def _rind_view(self, example: QAExample, ids: list[int], eligible: list[bool], gen: list[int],
                   after_retrieval: bool, docs_round: bool) -> tuple[RoundView, list[torch.Tensor]]:
        # the pass covers the generated text alone (after BOS where the tokenizer adds one): RIND's rows span it
        rows, prompt_row = ([], None)
        if gen and not docs_round:
            rows, prompt_row = self._attention_rows(self.bos + gen, len(self.bos))
        view = RoundView(example.question, [], [], [], [], self.text.pieces(self.bos), [False] * len(self.bos),
                         after_retrieval=after_retrieval, prompt_row=prompt_row if self.bos else None,
                         head_reduce=self.head_reduce)
        return view, rows

    def _qfs_view(self, view: RoundView, example: QAExample, prior: str, ids: list[int], gen: list[int],
                  event) -> RoundView:
        # question + answer so far, then this round up to the end of the triggering sentence; every word of it may
        # enter the query (an added BOS may not)
        end = view.sentence_end(event.token)
        head, spans = prompt_ids(self.tokenizer, f"{example.question} {prior.strip()}".rstrip(), offsets=True)
        rows, prompt_row = self._attention_rows(head + gen[:end], len(head))
        return RoundView(example.question, view.pieces[:end], view.probs[:end], view.entropies[:end], rows,
                         self.text.pieces(head), [b > a for a, b in spans], after_retrieval=view.after_retrieval,
                         prompt_row=prompt_row, head_reduce=self.head_reduce)
