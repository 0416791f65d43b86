"""ADAPT-LLM's learned ``<RET>`` gate and the policies it is compared with, batched.

    gate = AdaptGate(model_generator(model, tokenizer), retriever, GateConfig(top_k=1))
    records = gate.run(questions, "adapt_llm")        # or never_retrieve, always_retrieve, popularity, sweep
    print(format_table({"ADAPT": summarize(records)}))

* ``adapt_llm``: ``parametric_prompt``; the output contains ``<RET>`` (``gate_rule="token"``, the paper) or the
  first-token probability of ``<RET>`` exceeds ``ret_threshold`` (``"threshold"``, the authors' option; for a model
  that writes ``<RET>`` as plain text, the probability of its first piece: :mod:`inference.adapt_gate.ret_token`) ->
  retrieve ``top_k`` passages with the question (``context_source="retrieve"``; ``"file"``: the passage the
  question's file ships, as the authors' PopQA file) -> ``context_prompt``. A retrieved passage is shown as title
  and text, as the authors' Contriever passages are. Not retrieving, the parametric output is
  the answer (under the threshold rule an output that still says ``<RET>`` is answered with the NR prompt, as the
  authors' script does).
* ``never_retrieve`` (NR): the NR prompt. ``always_retrieve`` (AR): ``context_prompt`` with ``top_k`` for every
  question. ``popularity``: ``metadata["popularity"] < popularity_threshold`` -> AR's path, else NR's.
* ``inner``: questions sent to retrieval may instead be answered by another method (:class:`InnerMethod`, e.g.
  DRAGIN or Iter-RetGen behind the evaluate command); questions the gate keeps are answered as above.
* ``sweep``: all three answers for every question (parametric with ``p_ret``, NR, context), decided as
  ``adapt_llm``; :func:`redecide` and :func:`sweep_threshold` then re-decide any policy or threshold
  offline, without generating again (greedy decoding gives the same text for the same prompt).

Every policy returns the same :class:`GateRecord` type; fields a policy did not need stay ``None``;
``answered_by`` names the output that answered (``parametric``, ``closed_book``, ``context`` or the inner method).
Generation goes through the one generator protocol (:class:`adaptive_rag.lm.generation.Generator`); the gate keeps
each output's answer part (:func:`response_text`, as Algorithm 1's closed-book step does).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from adaptive_rag.lm.generation import Generation, Generator, LMGenerator
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import PredictionRecord, QAExample
from adaptive_rag.plumbing.retriever import Retriever
from data_builders.adapt_llm import Judge, JudgeName, make_judge
from data_builders.adapt_llm_prompts import (
    RET_TOKEN,
    PromptVariant,
    context_prompt,
    never_retrieve_prompt,
    parametric_prompt,
    response_text,
)
from inference.dynamic_rag.methods import PRESETS

GatePolicy = Literal["adapt_llm", "never_retrieve", "always_retrieve", "popularity", "sweep"]
GateRule = Literal["token", "threshold"]
GATE_POLICIES = ("adapt_llm", "never_retrieve", "always_retrieve", "popularity", "sweep")
ContextSource = Literal["retrieve", "file"]
CONTEXT_SOURCES = ("retrieve", "file")
# The metadata key of a question's own passage (context_source "file"): a reader of a file that ships one per
# question (the authors' PopQA file: its precomputed Contriever passage, title included) stores it there.
FILE_PASSAGE_KEY = "context_passage"
SOURCES = {"parametric_output": "parametric", "closed_book_output": "closed_book", "context_output": "context"}


@dataclass
class InnerMethod:
    """Answers the questions the gate sends to retrieval in place of the single context prompt."""

    name: str  # e.g. "dragin": recorded as the path that answered
    # examples -> one prediction record per example, in order (the evaluate command's runners)
    run: Callable[[list[QAExample]], list[PredictionRecord]]


@dataclass
class GateConfig:
    policy: GatePolicy = "adapt_llm"
    gate_rule: GateRule = "token"
    ret_threshold: float = 0.5  # threshold rule: retrieve when p(<RET> first) > this
    popularity_threshold: float = 707_000.0  # the paper's PopQA s_pop threshold
    top_k: int = PRESETS["adapt-llm"].top_k  # passages per context prompt (the preset: training used one gold one)
    prompt_variant: PromptVariant = "paper"
    max_passage_words: int | None = 200
    judge: JudgeName = "contains"
    judge_normalize: bool = True
    ret_watch: str = RET_TOKEN  # the token whose first-step probability is p(<RET>) (ret_token.RetSignal.watch)
    context_source: ContextSource = "retrieve"  # retrieve with the question, or the question's own passage (file)
    passage_title: bool = True  # a retrieved passage as "title text" (the authors' Contriever passages hold it)
    # <RET> is never the answer to the context prompt (the authors' evaluation lets it through, and scores it wrong)
    context_ban_ret: bool = False

    def __post_init__(self) -> None:
        if self.policy not in GATE_POLICIES:
            raise ValueError(f"policy must be one of {GATE_POLICIES}, got '{self.policy}'")
        if self.gate_rule not in ("token", "threshold"):
            raise ValueError(f"gate_rule must be 'token' or 'threshold', got '{self.gate_rule}'")
        if not 0.0 <= self.ret_threshold <= 1.0:
            raise ValueError(f"ret_threshold must be in [0, 1], got {self.ret_threshold}")
        if self.top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {self.top_k}")
        if self.context_source not in CONTEXT_SOURCES:
            raise ValueError(f"context_source must be one of {', '.join(CONTEXT_SOURCES)}, got '{self.context_source}'")


@dataclass
class GateRecord:
    """One question's provenance: what each prompt produced, whether it retrieved, and the verdict."""

    question_id: str
    question: str
    answers: list[str]
    policy: str = ""
    output: str = ""
    retrieved: bool = False
    correct: bool = False
    p_ret: float | None = None  # probability of <RET> as the first generated token (parametric prompt)
    doc_ids: list[str] = field(default_factory=list)
    parametric_output: str | None = None
    closed_book_output: str | None = None  # NR prompt
    context_output: str | None = None  # context prompt with the retrieved passages
    popularity: float | None = None
    answered_by: str = ""  # parametric | closed_book | context | the inner method's name
    generated_tokens: int = 0  # by the gate's own prompts (an inner method's count stays in ``inner``)
    forward_passes: int = 0  # model calls the gate's own prompts took part in (likewise)
    inner_method: str | None = None  # the inner method that answered the context path, if one did
    inner: PredictionRecord | None = None  # its record


def model_generator(model: Any, tokenizer: Any, batch_size: int = 16, max_new_tokens: int = 20,
                    show_progress: bool = False, watch: str | None = None) -> Generator:
    """The gate's generator: greedy, reporting the first-step probability of ``watch`` (default: ``<RET>`` when the
    tokenizer has the token; for plain-text ``<RET>`` its first piece, :func:`~inference.adapt_gate.ret_token.
    ret_signal`); ``show_progress``: a bar per prompt set."""
    watch = (watch,) if watch else (RET_TOKEN,) if RET_TOKEN in tokenizer.get_vocab() else ()
    return LMGenerator(model, tokenizer, max_new_tokens=max_new_tokens, batch_size=batch_size, watch_tokens=watch,
                       show_progress=show_progress)


def wants_retrieval(rec: GateRecord, rule: GateRule, threshold: float) -> bool:
    if rec.parametric_output is None:
        raise ValueError(f"{rec.question_id}: no parametric output (run 'adapt_llm' or 'sweep')")
    if rule == "token":
        return RET_TOKEN in rec.parametric_output
    return rec.p_ret is not None and rec.p_ret > threshold


def _need(rec: GateRecord, name: str) -> str:
    value = getattr(rec, name)
    if value is None:
        raise ValueError(f"{rec.question_id}: no {name}; run the gate with policy 'sweep' to re-decide offline")
    return value


def _decide_one(rec: GateRecord, policy: str, cfg: GateConfig) -> tuple[bool, str]:
    """Whether ``policy`` retrieves for ``rec``, and the field whose output answers."""
    if policy == "never_retrieve":
        return False, "closed_book_output"
    if policy == "always_retrieve":
        return True, "context_output"
    if policy == "popularity":
        if rec.popularity is None:
            raise ValueError(f"{rec.question_id}: the popularity policy needs metadata['popularity']")
        low = rec.popularity < cfg.popularity_threshold
        return low, "context_output" if low else "closed_book_output"
    if wants_retrieval(rec, cfg.gate_rule, cfg.ret_threshold):  # adapt_llm (and sweep)
        return True, "context_output"
    return False, "parametric_output" if RET_TOKEN not in _need(rec, "parametric_output") else "closed_book_output"


def redecide(records: Sequence[GateRecord], policy: GatePolicy, cfg: GateConfig | None = None,
             judge: Judge | None = None) -> list[GateRecord]:
    """New records deciding ``policy`` from answers already generated (copies; the inputs are not changed)."""
    cfg = cfg or GateConfig()
    judge = judge or make_judge(cfg.judge, cfg.judge_normalize)
    out = []
    for rec in records:
        retrieved, source = _decide_one(rec, policy, cfg)
        output = _need(rec, source)
        by = SOURCES[source] if source != "context_output" or rec.inner_method is None else rec.inner_method
        out.append(replace(rec, policy=policy, retrieved=retrieved, output=output, answered_by=by,
                           correct=bool(judge(output, rec.answers)), doc_ids=list(rec.doc_ids)))
    return out


class AdaptGate:
    """Runs a policy over questions: generation and retrieval are passed in, so tests can stub both. With
    ``inner``, that method answers the questions sent to retrieval (it does its own retrieving)."""

    def __init__(self, generator: Generator, retriever: Retriever | None, cfg: GateConfig | None = None,
                 inner: InnerMethod | None = None):
        self.generator, self.retriever, self.cfg, self.inner = generator, retriever, cfg or GateConfig(), inner
        self.judge = make_judge(self.cfg.judge, self.cfg.judge_normalize)
        self._examples: dict[str, QAExample] = {}

    def run(self, examples: Sequence[QAExample], policy: GatePolicy | None = None) -> list[GateRecord]:
        policy = policy or self.cfg.policy
        if policy not in GATE_POLICIES:
            raise ValueError(f"policy must be one of {GATE_POLICIES}, got '{policy}'")
        recs = [GateRecord(ex.id, ex.question, list(ex.answers), popularity=ex.metadata.get("popularity"))
                for ex in examples]
        self._examples = {ex.id: ex for ex in examples}  # an inner method gets the whole example
        cfg = self.cfg
        if policy in ("adapt_llm", "sweep"):
            self._parametric(recs)
        if policy in ("never_retrieve", "sweep"):
            self._closed_book(recs)
        if policy in ("always_retrieve", "sweep"):
            self._context(recs)
        if policy == "adapt_llm":
            go = [wants_retrieval(r, cfg.gate_rule, cfg.ret_threshold) for r in recs]
            self._context([r for r, g in zip(recs, go) if g])
            self._closed_book([r for r, g in zip(recs, go) if not g and RET_TOKEN in (r.parametric_output or "")])
        if policy == "popularity":
            if any(r.popularity is None for r in recs):
                missing = [r.question_id for r in recs if r.popularity is None][:3]
                raise ValueError(f"the popularity policy needs metadata['popularity'] (missing for {missing})")
            self._context([r for r in recs if r.popularity < cfg.popularity_threshold])
            self._closed_book([r for r in recs if r.popularity >= cfg.popularity_threshold])
        return redecide(recs, "adapt_llm" if policy == "sweep" else policy, cfg, self.judge)

    def generate(self, prompts: list[str], banned_tokens: tuple[str, ...] = ()) -> list[Generation]:
        """The generator's continuations, each cut to its answer part; ``banned_tokens`` are never generated."""
        if not prompts:
            return []
        gens = (self.generator.generate(prompts, banned_tokens=banned_tokens) if banned_tokens
                else self.generator.generate(prompts))  # a generator without bans is still a Generator
        return [replace(g, text=response_text(g.text)) for g in gens]

    def _parametric(self, recs: list[GateRecord]) -> None:
        gens = self.generate([parametric_prompt(r.question, self.cfg.prompt_variant) for r in recs])
        for rec, gen in zip(recs, gens):
            rec.parametric_output, rec.p_ret = gen.text, gen.first_token_probs.get(self.cfg.ret_watch)
            rec.generated_tokens += gen.num_tokens
            rec.forward_passes += gen.forward_passes

    def _closed_book(self, recs: list[GateRecord]) -> None:
        gens = self.generate([never_retrieve_prompt(r.question, self.cfg.prompt_variant) for r in recs])
        for rec, gen in zip(recs, gens):
            rec.closed_book_output = gen.text
            rec.generated_tokens += gen.num_tokens
            rec.forward_passes += gen.forward_passes

    def _context(self, recs: list[GateRecord]) -> None:
        if not recs:
            return
        if self.inner is not None:
            self._inner_context(recs)
            return
        prompts = []
        for rec, passages in zip(recs, self._passages(recs)):
            prompts.append(context_prompt(rec.question, passages, self.cfg.prompt_variant, self.cfg.max_passage_words))
        banned = (RET_TOKEN,) if self.cfg.context_ban_ret else ()
        for rec, gen in zip(recs, self.generate(prompts, banned)):
            rec.context_output = gen.text
            rec.generated_tokens += gen.num_tokens
            rec.forward_passes += gen.forward_passes

    def _passages(self, recs: list[GateRecord]) -> list[list[str]]:
        """Each question's context passages as text (recording their ids): retrieved with the question, or the one
        its file ships (``context_source="file"``)."""
        if self.cfg.context_source == "file":
            out = []
            for rec in recs:
                meta = self._examples[rec.question_id].metadata
                text = meta.get(FILE_PASSAGE_KEY)
                if not isinstance(text, str):
                    raise DataError(f"context_source file needs each question's passage (metadata "
                                    f"'{FILE_PASSAGE_KEY}'), as the authors' PopQA file ships it",
                                    record=rec.question_id)
                rec.doc_ids = [str(meta.get(f"{FILE_PASSAGE_KEY}_id", f"{rec.question_id}:file"))]
                out.append([text])
            return out
        if self.retriever is None:
            raise ValueError("this policy retrieves, but the gate has no retriever")
        out = []
        for rec, row in zip(recs, self.retriever.search([r.question for r in recs], self.cfg.top_k)):
            rec.doc_ids = [h.passage.id for h in row]
            # A query with no indexed term gets no hits: the model then sees an empty context.
            out.append([passage_with_title(h.passage, self.cfg.passage_title) for h in row] or [""])
        return out

    def _inner_context(self, recs: list[GateRecord]) -> None:
        outs = self.inner.run([self._examples[r.question_id] for r in recs])
        if len(outs) != len(recs):
            raise ValueError(f"inner method '{self.inner.name}' returned {len(outs)} records for {len(recs)}")
        for rec, out in zip(recs, outs):
            rec.inner_method, rec.inner = self.inner.name, out
            rec.context_output = out.output
            rec.doc_ids = [d for r in out.retrievals for d in r.doc_ids]


def passage_with_title(passage: Any, title: bool = True) -> str:
    """A retrieved passage as its context line: ``title text`` (Contriever's passage text, which the authors'
    PopQA file holds) or the text alone."""
    text = getattr(passage, "text", passage)
    head = (getattr(passage, "title", "") or "").strip() if title else ""
    return f"{head} {text}" if head else text


def _acc(recs: Sequence[GateRecord]) -> float | None:
    return sum(r.correct for r in recs) / len(recs) if recs else None


def summarize(records: Sequence[GateRecord]) -> dict[str, Any]:
    """The paper's table row: accuracy overall, share retrieved, accuracy with and without retrieval."""
    ret = [r for r in records if r.retrieved]
    no_ret = [r for r in records if not r.retrieved]
    return {"n": len(records), "accuracy": _acc(records) or 0.0,
            "retrieval_share": len(ret) / len(records) if records else 0.0, "n_retrieved": len(ret),
            "accuracy_retrieved": _acc(ret), "accuracy_not_retrieved": _acc(no_ret)}


def sweep_threshold(records: Sequence[GateRecord], thresholds: Sequence[float],
                    cfg: GateConfig | None = None) -> list[dict[str, Any]]:
    """ADAPT-LLM under the threshold rule at each threshold, re-decided from ``sweep`` records."""
    cfg = cfg or GateConfig()
    rows = []
    for t in thresholds:
        sub = replace(cfg, gate_rule="threshold", ret_threshold=float(t))
        rows.append({"threshold": float(t), **summarize(redecide(records, "adapt_llm", sub))})
    return rows


def _pct(x: float | None) -> str:
    return "    -" if x is None else f"{100 * x:5.1f}"


def format_table(rows: dict[str, dict[str, Any]]) -> str:
    """Rows of :func:`summarize` as a fixed-width text table (percentages)."""
    width = max([26, *map(len, rows)])
    head = f"{'method':<{width}} {'n':>4} {'acc':>6} {'retr.%':>7} {'acc|retr':>9} {'acc|no retr':>12}"
    lines = [head, "-" * len(head)]
    for name, s in rows.items():
        lines.append(f"{name:<{width}} {s['n']:>4} {_pct(s['accuracy']):>6} {_pct(s['retrieval_share']):>7} "
                     f"{_pct(s['accuracy_retrieved']):>9} {_pct(s['accuracy_not_retrieved']):>12}")
    return "\n".join(lines)
