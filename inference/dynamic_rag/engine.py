"""The shared dynamic-RAG engine: many questions generate in one batch; a question whose trigger fires leaves the
batch, retrieves (batched with the others that fired in the same step), and rejoins with a new prompt while the
rest keep decoding.

Per question it keeps a provenance record (FlashRAG-style): output, every retrieval (round, position, trigger
score, query, document ids), LLM forward passes, generated tokens (kept and discarded), rounds.

After a retrieval that a trigger fired, the round's first sentence is kept unchecked (the progress guarantee,
:mod:`inference.dynamic_rag.methods`); with ``docs_scope: next_sentence`` (DRAGIN's reference code) that sentence is
the whole
round, and the next round is prompted without the documents.
"""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from tqdm.auto import tqdm

from adaptive_rag.lm.decoder import BatchDecoder, Sequence, shared_head_ids, stop_token_ids
from adaptive_rag.lm.sampling import Sampler
from adaptive_rag.lm.tokenization import continuation_ids, prompt_ids
from adaptive_rag.plumbing import dragin_eval
from adaptive_rag.plumbing.records import Passage, PredictionRecord, QAExample, RetrievalRecord
from adaptive_rag.plumbing.retriever import Retriever
from inference.dynamic_rag import batch_plan
from inference.dynamic_rag.authors_pass import QfsPass, authors_token_attention, last_layer_attention, qfs_pass_ids
from inference.dynamic_rag.dragin_settings import DEFAULT_MAX_NEW_TOKENS
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import AUTHORS_LOOPS, PromptBuilder
from inference.dynamic_rag.queries import form_query
from inference.dynamic_rag.queries.qfs import qfs_text_end
from inference.dynamic_rag.round_view import Event, RoundView
from inference.dynamic_rag.text_units import PieceStream, TokenText, ends_sentence, text_rules
from inference.dynamic_rag.token_words import RawWords
from inference.dynamic_rag.triggers import TRIGGERS, check_trigger

EMPTY_PASSAGE = Passage("", "", "")  # the authors' BM25 class's filler where a search finds fewer than top-k

ANSWER_MARKER = re.compile(r"the answer is", re.IGNORECASE)


@dataclass
class EngineConfig:
    # questions decoding together: auto (as many as the memory holds, inference/dynamic_rag/batch_plan.py) or a
    # number; an out-of-memory error halves it and the unfinished questions run again
    batch_size: batch_plan.BatchSize = "auto"
    memory_budget_gb: float | None = None  # bytes the auto batch may use (None: free CUDA memory; half the free RAM)
    # answer length budget; None: the profile's (paper 100; reference the authors' config: HotpotQA 100, 2Wiki 64,
    # IIRC 128, StrategyQA 100; inference/dynamic_rag/dragin_settings.py)
    max_new_tokens: int | None = None
    # stop once "the answer is ..." sentence is complete (FS/FL-RAG need it); None: yes, unless dragin_profile
    # reference (the authors' rounds run to EOS or the budget; RIND judges what follows the answer too)
    stop_after_answer: bool | None = None
    head_reduce: str = "mean"  # attention heads: mean (paper) or max
    keep_signals: bool = False  # store per-word RIND signals of every round in the record (for the trace view)
    # prefill the prompts' common head (the paper style's few-shot demos, the chat template's system turn) once and
    # reuse its KV cache for every admitted round; outputs and signals are the same as without it
    shared_head: bool = True
    # bf16 on a CPU: linear layers on weights prepacked once for oneDNN (adaptive_rag.lm.packed_linear); the same bits
    packed_linears: bool = True

    def __post_init__(self):
        self.batch_size = batch_plan.parse_batch_size(self.batch_size)
        if (self.max_new_tokens is not None and self.max_new_tokens <= 0) or (
                self.memory_budget_gb is not None and self.memory_budget_gb <= 0):
            raise ValueError("max_new_tokens and memory_budget_gb must be positive")


@dataclass
class QuestionState:
    example: QAExample
    prior: str = ""  # answer text kept from earlier rounds (already in the prompt): prior_base + decode(kept_ids)
    # the tokens kept from earlier rounds, decoded together whenever one is added: decoding round by round would
    # fuse the rounds on SentencePiece tokenizers, whose decoder drops a chunk's leading space ("founded.The")
    kept_ids: list[int] = field(default_factory=list)
    prior_base: str = ""  # text before the kept tokens: the forced answer's "... So the answer is"
    # round_join authors: their loop's `text` (the answer at the start of an iteration), and the text kept before a
    # triggering sentence while the sentence written with the documents is pending (their `ptext`)
    loop_text: str = ""
    ptext: str = ""
    docs: list[Passage] = field(default_factory=list)
    retrievals: list[RetrievalRecord] = field(default_factory=list)
    forward_passes: int = 0
    generated_tokens: int = 0
    rounds: int = 0
    output: str | None = None
    # set while a round is in flight
    view: RoundView | None = None
    seq: Sequence | None = None
    stream: PieceStream | None = None  # the round's pieces, a character split over byte tokens carried across steps
    prompt_ids: list[int] = field(default_factory=list)
    signals: list[dict[str, Any]] = field(default_factory=list)
    after_retrieval: bool = False  # the next round follows a retrieval a trigger fired
    docs_round: bool = False  # this round only writes the sentence the documents are for (docs_scope next_sentence)
    regenerating: bool = False  # the round forces an answer after " So the answer is" (answer_extraction dragin)
    iteration_start: int = -1  # the answer's length when the authors' loop last began an iteration (per_round)

    def record(self, *, output_tokens: int, batch_mean_seconds: float) -> PredictionRecord:
        """The finished question's prediction record; ``output_tokens``: tokens of its output; ``batch_mean_seconds``:
        the batch's wall time per question (questions decode together: one question's own time is not measured)."""
        ex = self.example
        return PredictionRecord(id=ex.id, question=ex.question, answers=ex.answers, output=self.output or "",
                                retrievals=self.retrievals, llm_forward_passes=self.forward_passes,
                                generated_tokens=self.generated_tokens, batch_mean_seconds=batch_mean_seconds,
                                output_tokens=output_tokens, rounds=self.rounds, signals=self.signals)


class DynamicRAGEngine:
    """``run(examples) -> records`` for any :class:`MethodConfig` over one model, tokenizer and retriever."""

    def __init__(self, model, tokenizer, retriever: Retriever | None, prompts: PromptBuilder,
                 method: MethodConfig, cfg: EngineConfig | None = None):
        self.model, self.tokenizer, self.retriever = model, tokenizer, retriever
        self.prompts, self.method, self.cfg = prompts, method, cfg or EngineConfig()
        self.max_new_tokens = self.cfg.max_new_tokens or DEFAULT_MAX_NEW_TOKENS  # the evaluate command resolves it
        if method.retrieves and retriever is None:
            raise ValueError(f"method '{method.method}' retrieves but no retriever was given")
        self.method = method = method.resolved(getattr(prompts.cfg, "demos", None))
        self.retrieval_cap = method.retrieval_cap(self.max_new_tokens)
        self.text = TokenText(tokenizer, keep_special=method.special_text == "keep")
        self._loop = AUTHORS_LOOPS.get(method.trigger, "attn")  # whose text joins round_join authors follows
        self._authors_join = method.round_join == "authors"
        # their AttnWeightRAG and TokenRAG loops go on after a round without a retrieval; their end tests stop them
        self._loop_goes_on = self._authors_join and method.round_budget == "per_round" and self._loop in (
            "attn", "token")
        self.rules = text_rules(method.text_rules)  # the authors' spaCy parser under reference, when installed
        # word_text tokens: RIND's and QFS's words are the authors' raw token strings (token_words.py)
        self.raw_words = RawWords(tokenizer, self.text.marker) if method.word_text == "tokens" and (
            method.trigger in ("rind", "token_rag") or method.query == "qfs") else None
        self._whole_round_docs = method.docs_scope == "next_round"  # TokenRAG: the documents' round is kept whole
        # their AttnWeightRAG writes the round with the documents to its end and keeps its first sentence
        # (get_top_sentence): where that sentence ends is only known from the whole round under their sentencizer
        self._docs_round_to_end = self._authors_join and self._loop == "attn"
        self._retrieves_after_check = method.round_budget == "per_round" and method.trigger in (
            "fixed_length", "fixed_sentence")
        needs = method.needs(self.cfg.head_reduce)  # what the method's trigger and query former read
        reduce = "none" if "attention_per_head" in needs else self.cfg.head_reduce
        head = shared_head_ids(tokenizer, prompts.head_probes()) if self.cfg.shared_head else []
        self.batch = batch_plan.plan_engine_batch(
            self.cfg.batch_size, model, tokenizer, prompts, head_ids=head, max_new_tokens=self.max_new_tokens,
            top_k=method.top_k if method.retrieves else 0, budget_gb=self.cfg.memory_budget_gb,
            capture="attention" in needs, per_head=reduce == "none")
        self.decoder = BatchDecoder(model, tokenizer, reduce=reduce,
                                    capture="attention" in needs, stop_token_ids=stop_token_ids(tokenizer),
                                    max_batch=self.batch.size, packed_linears=self.cfg.packed_linears)
        self.decoder.keep_stop_token = method.special_text == "keep"
        if method.sampling == "checkpoint":
            self.decoder.sampler = Sampler.from_checkpoint(model, method.sampling_seed)
        if self.cfg.shared_head:
            self.decoder.set_shared_prefix(head)

    @property
    def batch_size(self) -> int:
        """Questions decoding together now (planned, or the user's; halved after an out-of-memory error)."""
        return self.batch.size

    # -- prompts ------------------------------------------------------------------------------------------
    def _start_round(self, state: QuestionState) -> Sequence:
        prompt = self.prompts.build(state.example.question, state.docs, state.prior,
                                    as_written=self._authors_join)
        ids, offsets = prompt_ids(self.tokenizer, prompt.text, offsets=True)
        eligible = qfs_eligible(offsets, prompt.question_span, prompt.prior_start)
        if state.regenerating:
            budget = dragin_eval.REGENERATE_TOKENS
        elif self.method.round_budget == "per_round":  # the authors' loop: every round may write the full length
            budget = self.method.round_tokens or self.max_new_tokens
        else:
            budget = max(1, self.max_new_tokens - self._tokens(state.prior))
        seq = Sequence(key=state, prompt_ids=ids, max_new_tokens=budget)
        state.seq, state.prompt_ids, state.rounds = seq, ids, state.rounds + 1
        state.stream = self.text.stream()
        state.docs_round = state.after_retrieval and bool(state.docs) and self.method.docs_for_next_sentence_only
        if not state.docs_round:  # a round the authors' loop starts afresh (not the one written with documents)
            state.iteration_start = len(state.prior)
        state.view = RoundView(state.example.question, [], [], [], [], self.text.pieces(ids), eligible,
                               after_retrieval=state.after_retrieval, head_reduce=self.cfg.head_reduce,
                               rules=self.rules, raw_words=self.raw_words)
        state.after_retrieval = False
        return seq

    def _tokens(self, text: str) -> int:
        """Tokens of the answer text written so far, as it follows the prompt (no SentencePiece dummy prefix)."""
        return len(continuation_ids(self.tokenizer, text))

    def _answer_done(self, st: QuestionState) -> bool:
        """``round_budget: per_round``: the authors' loop starts no new round once the answer is longer than the
        budget or holds "the answer is" (case-sensitive); the sentence a retrieval's documents are for is still
        written (the check follows it there)."""
        if self.method.round_budget != "per_round" or st.regenerating or not st.prior:
            return False
        if st.after_retrieval and st.docs and self.method.docs_for_next_sentence_only:
            return False
        # their tests: the answer's tokens as tokenizer.encode counts them (BOS included; their text as it is, the
        # leading spaces of TokenRAG's and FixLengthRAG's joins too), no progress, the marker
        counted = len(prompt_ids(self.tokenizer, st.prior if self._authors_join else st.prior.strip()))
        return dragin_eval.MARKER in st.prior or counted > self.max_new_tokens or len(st.prior) <= st.iteration_start

    # -- main loop ----------------------------------------------------------------------------------------
    def run(self, examples: list[QAExample], *, show_progress: bool = True) -> list[PredictionRecord]:
        states = [QuestionState(ex) for ex in examples]
        bar = tqdm(total=len(states), desc=self.method.method, disable=not show_progress, unit="q")
        start = time.perf_counter()
        while True:
            try:
                self._answer(states, bar)
                break
            except RuntimeError as err:  # torch.OutOfMemoryError is one
                if not batch_plan.is_out_of_memory(err) or self.batch.size <= 1:
                    raise
            # out of the handler: the error's traceback, and the tensors its frames hold, are gone
            self._halve_batch(states, bar)
        bar.close()
        per_question = (time.perf_counter() - start) / max(1, len(states))  # batch wall time shared evenly
        return [st.record(output_tokens=len(self.tokenizer.encode(st.output or "", add_special_tokens=False)),
                          batch_mean_seconds=per_question) for st in states]

    def _answer(self, states: list[QuestionState], bar) -> None:
        """Decode every question without an output; then, under answer_extraction dragin, force an answer where
        eval.py's regenerate_answer would (an output is cleared until its forced answer is written)."""
        self._drive([st for st in states if st.output is None], bar)
        if self.method.answer_extraction == "dragin":  # eval.py's regenerate_answer, batched like any round
            again = [st for st in states if not st.regenerating and dragin_eval.needs_regeneration(st.output or "")]
            for st in again:
                # from the answer as generated (its leading space too), not the stripped output; their loop's text
                # is stripped before eval.py reads it, and its prompt is case + " " + that text as written
                as_theirs = self._authors_join and getattr(self.prompts, "authors", None) is not None
                base = st.output if as_theirs else st.prior
                st.prior_base = st.prior = dragin_eval.regeneration_prefix(base)
                st.kept_ids, st.docs, st.regenerating = [], [], True
                st.after_retrieval, st.output = False, None
            self._drive(again, None)

    def _halve_batch(self, states: list[QuestionState], bar) -> None:
        """After an out-of-memory error: answered questions stay, the others start again from scratch at half the
        batch (a round cut short leaves nothing to resume from)."""
        self.decoder.clear()
        batch_plan.release_memory(self.decoder.device)
        answered = sum(st.output is not None for st in states)
        self.batch.halve(answered, len(states))
        self.decoder.max_batch = self.batch.size
        states[:] = [st if st.output is not None else QuestionState(st.example) for st in states]
        bar.n = answered
        bar.refresh()

    def _drive(self, states: list[QuestionState], bar) -> None:
        """Decode ``states`` to the end (retrievals included); ``bar`` counts the finished questions."""
        waiting: deque[QuestionState] = deque()
        to_retrieve: list[tuple[QuestionState, str, Event | None, int]] = []
        for st in states:
            if self.method.retrieves_first and self.retrieval_cap > 0 and not st.regenerating:
                to_retrieve.append((st, st.example.question, None, 0))
            else:
                waiting.append(st)
        while waiting or to_retrieve or self.decoder.active:
            if to_retrieve:
                waiting.extend(self._retrieve(to_retrieve))
                to_retrieve = []
            done = [st for st in waiting if self._answer_done(st)]
            for st in done:
                waiting.remove(st)
                st.output = st.prior.strip()
            room = self.batch.size - len(self.decoder.active)
            if waiting and room > 0:
                self.decoder.admit([self._start_round(waiting.popleft()) for _ in range(min(room, len(waiting)))])
            elif self.decoder.active:
                self.decoder.step()
            finished, leaving = self._inspect(to_retrieve, waiting)
            self.decoder.remove(finished + leaving)
            if bar is not None:
                bar.update(len(finished) + len(done))

    def _inspect(self, to_retrieve, waiting) -> tuple[list[Sequence], list[Sequence]]:
        """After a step: sync each sequence's view, finish the done ones, pull out those whose trigger fired, and
        send back to the queue the rounds that only had to write the sentence their documents were for."""
        finished, leaving = [], []
        synced = [self._sync(seq) for seq in list(self.decoder.seqs)]
        # the authors' extra passes serve RIND and QFS; a method that reads no attention has none to redo
        authors = self.method.attention_pass == "authors" and self.decoder.buffer is not None
        if authors:
            self._authors_pass(synced)
        events: dict[int, Event] = {}
        for seq, _, sentence_end, final in synced:
            st: QuestionState = seq.key
            if not (st.docs_round and (sentence_end or final or self._whole_round_docs)) and not st.regenerating \
                    and len(st.retrievals) < self.retrieval_cap:
                event = check_trigger(st.view, self.method, sentence_end=sentence_end, final=final)
                if event is not None:
                    events[id(seq)] = event
        if authors and events and self.method.query == "qfs":
            self._authors_qfs_pass([(seq, events[id(seq)]) for seq, *_ in synced if id(seq) in events])
        for seq, stop, sentence_end, final in synced:
            st = seq.key
            view = st.view
            if st.docs_round and (final or (sentence_end and not self._whole_round_docs
                                            and not self._docs_round_to_end)):
                # their loops test their end after the documents' sentence too, EOS or not
                ends = final and not self._whole_round_docs and not self._loop_goes_on
                self._end_docs_round(st, seq, ends, finished, leaving, waiting)
                continue
            if st.regenerating:
                final = seq.done or stop is not None  # eval.py generates its 20 tokens to the end, then cuts
            event = events.get(id(seq))
            if event is not None:
                self._close_round(st, seq, keep=event.keep, part="before_trigger", sentence=event.sentence,
                                  kept_text=event.kept_text)
                if self._retrieves_after_check and self._answer_done(st):
                    # FixLengthRAG tests its loop's end before it retrieves with the text just written
                    self._keep_signals(st, view, event.keep, None, None)
                    st.output = st.prior.strip()
                    finished.append(seq)
                    continue
                query = form_query(view, event, self.method, self.tokenizer)
                self._keep_signals(st, view, event.keep, event, query)
                st.after_retrieval = True
                # the position: tokens of the answer before the retrieval (their join's spaces are not tokens of it)
                position = self._tokens(st.prior.strip() if self._authors_join else st.prior)
                to_retrieve.append((st, query, event, position))
                leaving.append(seq)
            elif final and self._loop_goes_on and not st.regenerating:
                # their loop's end tests (_answer_done) decide whether another round follows
                self._requeue(st, seq, "round", leaving, waiting)
            elif final:
                self._finish(st, seq, view)
                finished.append(seq)
            elif sentence_end:
                view.checked = len(view.pieces)
        return finished, leaving

    def _authors_pass(self, synced) -> None:
        """One batched pass over the generated text of every round that RIND judges now (its sentence ended, or the
        round did): the attention DRAGIN's reference code reads (inference/dynamic_rag/authors_pass.py)."""
        sentences = self.method.rind_scope != "round"  # the round scope judges a round once, at its end
        judged = [seq for seq, _, sentence_end, final in synced
                  if (final or (sentence_end and sentences)) and seq.key.view.pieces and not seq.key.docs_round
                  and not seq.key.regenerating and len(seq.key.retrievals) < self.retrieval_cap]
        if not judged:
            return
        weights = last_layer_attention(self.decoder, [seq.gen_ids[:len(seq.key.view.pieces)] for seq in judged])
        for seq, w in zip(judged, weights):
            seq.key.view.authors_attention = authors_token_attention(w, self.method.rind_attention,
                                                                     self.cfg.head_reduce)

    def _authors_qfs_pass(self, fired: list[tuple[Sequence, Event]]) -> None:
        """One batched pass over question + answer so far + the round up to the end of each triggering sentence:
        the attention the reference code's QFS reads (inference/dynamic_rag/authors_pass.py)."""
        inputs, texts = [], []
        for seq, event in fired:
            view = seq.key.view
            if event.current_words is not None:  # word_text tokens: their text, encoded again
                texts.append(self._keep_real_words_text(seq.key, event))
                inputs.append((prompt_ids(self.tokenizer, texts[-1]), 0, 0))
                continue
            texts.append(None)
            end = qfs_text_end(view, event)
            inputs.append(qfs_pass_ids(self.tokenizer, view.question, seq.key.prior, seq.gen_ids[:end],
                                       view.pieces[0] if view.pieces else ""))
        weights = last_layer_attention(self.decoder, [ids for ids, _, _ in inputs])
        for (seq, _), (ids, offset, bos), w, text in zip(fired, inputs, weights, texts):
            if text is not None:
                seq.key.view.authors_qfs = QfsPass(self.raw_words.tokens(ids), w.mean(dim=0), offset, bos, ids, text)
            else:
                seq.key.view.authors_qfs = QfsPass(self.text.pieces(ids), w.mean(dim=0), offset, bos)

    def _keep_real_words_text(self, st: QuestionState, event: Event) -> str:
        """``keep_real_words``' text: ``question + " " + text + " " + ptext`` (their loop's answer before this round,
        the round's sentences before the firing one), then the firing sentence's raw words joined by spaces."""
        text = st.loop_text if self._authors_join else st.prior.strip()
        ptext = " ".join(st.view.sentences()[:event.sentence])
        return st.view.question + " " + text + " " + ptext + " " + " ".join(event.current_words)

    def _sync(self, seq: Sequence) -> tuple[Sequence, int | None, bool, bool]:
        """Bring the sequence's view up to the tokens fed so far; returns (seq, stop, sentence_end, final)."""
        st: QuestionState = seq.key
        view = st.view
        n_fed = len(seq.rows) if self.decoder.buffer is not None else max(0, len(seq.gen_ids) - 1)
        if seq.done:
            n_fed = len(seq.gen_ids)
        nxt = "" if seq.done else self.text.piece(seq.gen_ids[-1]) if len(seq.gen_ids) > n_fed else ""
        if n_fed > len(view.pieces):  # the round's text grows by the tokens fed since the last step
            view.extend(st.stream.push(seq.gen_ids[len(view.pieces):n_fed]))
        stop = self.prompts.stop_index(view.text)
        if stop is not None:  # the model began a new few-shot "Question:": the answer ended before it
            n_fed, nxt = _tokens_before(view.pieces, stop), ""
            view.truncate(n_fed)
        if self.raw_words is not None:  # word_text tokens reads the round's ids
            view.ids = seq.gen_ids[:len(view.pieces)]
        view.prompt_row = seq.prompt_row
        view.probs, view.entropies, view.rows = seq.probs[:n_fed], seq.entropies[:n_fed], seq.rows[:n_fed]
        view.authors_attention = view.authors_qfs = None  # a pass over fewer tokens is stale
        sentence_end = ends_sentence(view.text, nxt) if view.pieces else False
        final = seq.done or stop is not None or self._answer_complete(st, view.text, sentence_end)
        return seq, stop, sentence_end, final

    def _end_docs_round(self, st: QuestionState, seq: Sequence, final: bool, finished, leaving, waiting) -> None:
        """The sentence the documents were retrieved for is written: keep it unchecked; go on without them."""
        if final:
            self._finish(st, seq, st.view, part="with_docs")
            finished.append(seq)
            return
        self._requeue(st, seq, "with_docs", leaving, waiting)  # its signals still name the documents
        st.docs, st.docs_round = [], False

    def _requeue(self, st: QuestionState, seq: Sequence, part: str, leaving, waiting) -> None:
        """Keep the whole round (``part`` as in :meth:`_close_round`) and send the question back to the queue."""
        self._keep_signals(st, st.view, len(st.view.pieces), None, None)
        self._close_round(st, seq, keep=len(st.view.pieces), part=part)
        leaving.append(seq)
        waiting.append(st)

    def _finish(self, st: QuestionState, seq: Sequence, view: RoundView, part: str = "round") -> None:
        prefix = st.prior
        self._keep_signals(st, view, len(view.pieces), None, None)
        self._close_round(st, seq, keep=len(view.pieces), part=part)
        st.output = st.prior.strip()
        if st.regenerating:
            st.output = dragin_eval.finish_regenerated(prefix, st.prior[len(prefix):]).strip()

    def _answer_complete(self, st: QuestionState, text: str, sentence_end: bool) -> bool:
        return self.cfg.stop_after_answer is not False and sentence_end and bool(ANSWER_MARKER.search(st.prior + text))

    def _keep_signals(self, st: QuestionState, view: RoundView, keep: int, event, query: str | None) -> None:
        if not self.cfg.keep_signals:
            return
        st.signals.append({
            "round": st.rounds, "kept_tokens": keep, **TRIGGERS.get(self.method.trigger).trace(view, self.method),
            "trigger": None if event is None else {"token": event.token, "score": event.score, "query": query},
            "docs": [{"id": d.id, "title": d.title} for d in st.docs],
        })

    def _close_round(self, st: QuestionState, seq: Sequence, keep: int, part: str = "round",
                     sentence: int | None = None, kept_text: str | None = None) -> None:
        """Keep the round's first ``keep`` tokens. ``part``: round (a round kept as written), before_trigger (the
        text before the sentence that fired: the round's sentences before index ``sentence`` when the trigger
        names it, or the trigger's ``kept_text``), with_docs (the sentence written with the documents)."""
        st.kept_ids.extend(seq.gen_ids[:keep])
        if self._authors_join and not st.regenerating:
            st.prior = self._authors_text(st, seq, keep, part, sentence, kept_text)
        else:
            st.prior = st.prior_base + self.text.decode(st.kept_ids)
        st.forward_passes += seq.forward_passes
        st.generated_tokens += len(seq.gen_ids)
        seq.done = True

    def _authors_text(self, st: QuestionState, seq: Sequence, keep: int, part: str, sentence: int | None,
                      kept_text: str | None = None) -> str:
        """The answer so far as the authors' loop writes it (src/generate.py): a round joins as ``text.strip() + " " +
        new_text.strip()``; before a retrieval their ``ptext`` (the round's sentences before the one that fired,
        joined by one space) follows ``text`` in the prompt; the sentence written with the documents then joins the
        three (AttnWeightRAG: the non-empty parts with one space; TokenRAG: always with one space)."""
        if part == "before_trigger" and self._loop in ("attn", "token"):
            st.ptext = self._sentences_before(st.view, keep) if sentence is None else \
                " ".join(st.view.sentences()[:sentence])
            if self._loop == "token":  # their prompt: case + " " + text + " " + ptext.strip()
                return st.loop_text + " " + st.ptext
            return " ".join(p for p in (st.loop_text, st.ptext) if p)
        new = self.text.decode(seq.gen_ids[:keep]).strip() if kept_text is None else kept_text
        if part == "with_docs":
            if self._loop == "token":
                st.loop_text = st.loop_text.strip() + " " + st.ptext + " " + new
            else:  # their get_top_sentence: the first sentence (a round that ran to EOS may hold more)
                spans = self.rules.split(new)
                new = new[spans[0][0]:spans[0][1]].strip() if spans else ""
                st.loop_text = " ".join(p for p in (st.loop_text.strip(), st.ptext, new) if p)
            st.ptext = ""
        else:  # FixLengthRAG keeps its round (FL) or its first sentence (FS) before retrieving with it
            st.loop_text = st.loop_text.strip() + " " + new
        return st.loop_text

    def _sentences_before(self, view: RoundView, keep: int) -> str:
        """Their ``" ".join(sentences[:sid])``: the round's sentences (stripped) that end before token ``keep``."""
        text = view.text
        cut = len("".join(view.pieces[:keep]))
        return " ".join(text[a:b].strip() for a, b in self.rules.split(text) if a < cut and text[a:b].strip())

    def _retrieve(self, jobs: list[tuple[QuestionState, str, Event | None, int]]) -> list[QuestionState]:
        """One batched search for every question that fired in this step; new documents replace the old."""
        hits = self.retriever.search([q for _, q, _, _ in jobs], self.method.top_k)
        for (st, query, event, position), found in zip(jobs, hits):
            st.docs = [h.passage for h in found]
            st.retrievals.append(RetrievalRecord(round=st.rounds, position=position,
                                                 trigger_score=0.0 if event is None else event.score, query=query,
                                                 doc_ids=[p.id for p in st.docs],
                                                 stopword_hits=event is not None and event.stopword_hits))
            if self._authors_join:  # their BM25 class fills a short list with empty documents ("[2] \n")
                st.docs += [EMPTY_PASSAGE] * (self.method.top_k - len(st.docs))
        return [st for st, _, _, _ in jobs]


def qfs_eligible(offsets: list[tuple[int, int]], question_span: tuple[int, int], prior_start: int) -> list[bool]:
    """Per prompt token: may QFS draw a word from it? Yes when its characters overlap the question, or lie in the
    answer written so far; never demos, documents, template or an added BOS (an empty span). Overlap, not
    containment: a word's token carries the space before it, which lies outside the question's span."""
    q0, q1 = question_span
    return [b > a and ((a < q1 and b > q0) or b > prior_start) for a, b in offsets]


def _tokens_before(pieces: list[str], char: int) -> int:
    """How many pieces end at or before character ``char`` of their joined text."""
    pos = 0
    for i, piece in enumerate(pieces):
        pos += len(piece)
        if pos > char:
            return i
    return len(pieces)
