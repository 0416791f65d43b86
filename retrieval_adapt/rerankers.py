"""Re-rankers for Iter-RetGen's retrieval adaptation: score candidate paragraphs given the question AND y1.

One interface, two back-ends:

* :class:`CrossEncoderReranker`: an ``AutoModelForSequenceClassification`` (hub id or local path) reading the
  pair ("y1 [SEP] q", passage), as the paper feeds TART (instruction/context, separator, query). With one
  output logit the score is that logit (MS MARCO cross-encoders); with two or more it is the log-probability
  of the ``relevant_label`` class (TART and binary classifiers), so that softmax(scores) over the candidates
  is the re-ranker's P_rr.
* :class:`LLMReranker`: an offline scorer built from a causal LM (the embedded ``smollm2-135m``), see there.

Both return one score per passage, higher = more relevant; scores are log-domain (softmax-able). ``score_kind``
says which: ``log_probability`` (TART's relevant class, the LLM scorers) or ``logit`` (a one-logit cross-encoder),
so that Eq. 3's relevance probability can be read back from them (:mod:`retrieval_adapt.distill_data`).

TART itself (facebook/tart-full-flan-t5-xl) ships a custom ``EncT5ForSequenceClassification`` head that
``AutoModelForSequenceClassification`` does not know: such a checkpoint is refused in one line from its config,
before any weights load (:func:`check_cross_encoder`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch
from tqdm.auto import tqdm

from adaptive_rag.lm.generation import Prompt, render_prompt
from adaptive_rag.lm.models import ModelOptions, load_causal_lm, resolve_device, resolve_model
from adaptive_rag.lm.tokenization import batch_prompt_ids, continuation_ids
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.progress import bar_options
from adaptive_rag.plumbing.records import Passage

LLMScore = Literal["answer_logprob", "yes_logprob"]


@dataclass(frozen=True)
class RerankItem:
    """One question's candidates. ``answers`` (gold) is needed only by the ``answer_logprob`` LLM scorer."""

    question: str
    y1: str
    passages: list[Passage]
    answers: list[str] = field(default_factory=list)


class Reranker:
    """``score(question, y1, passages) -> list[float]``; ``score_batch(items)`` batches across questions."""

    batch_size: int = 16
    show_progress: bool = False
    score_kind: str = "log_probability"

    def score(self, question: str, y1: str, passages: Sequence[Passage], *,
              answers: Sequence[str] | None = None) -> list[float]:
        return self.score_batch([RerankItem(question, y1, list(passages), list(answers or []))])[0]

    def score_batch(self, items: Sequence[RerankItem]) -> list[list[float]]:
        """Scores for every (item, passage) pair, computed ``batch_size`` pairs at a time."""
        pairs = [(item, p) for item in items for p in item.passages]
        flat: list[float] = []
        starts = range(0, len(pairs), self.batch_size)
        for s in tqdm(starts, desc="re-ranking", unit="batch",
                      **bar_options(inner=True, disable=not self.show_progress)):
            flat.extend(self._score_pairs(pairs[s:s + self.batch_size]))
        out, pos = [], 0
        for item in items:
            out.append(flat[pos:pos + len(item.passages)])
            pos += len(item.passages)
        return out

    def _score_pairs(self, pairs: list[tuple[RerankItem, Passage]]) -> list[float]:
        raise NotImplementedError


def _device(model) -> torch.device:
    return next(model.parameters()).device


class CrossEncoderReranker(Reranker):
    """A sequence-classification cross-encoder; ``use_y1=False`` gives the paper's "without y1" ablation."""

    def __init__(self, model, tokenizer, *, use_y1: bool = True, relevant_label: int = 1, batch_size: int = 16,
                 max_length: int = 512, show_progress: bool = False):
        self.model, self.tokenizer = model.eval(), tokenizer
        self.use_y1, self.relevant_label = use_y1, relevant_label
        self.batch_size, self.max_length, self.show_progress = batch_size, max_length, show_progress
        self.score_kind = "logit" if getattr(model.config, "num_labels", 2) == 1 else "log_probability"

    @classmethod
    def from_name(cls, name: str, **kwargs) -> CrossEncoderReranker:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        path = resolve_model(name)
        check_cross_encoder(path)
        model = AutoModelForSequenceClassification.from_pretrained(path).to(resolve_device("auto"))
        return cls(model, AutoTokenizer.from_pretrained(path), **kwargs)

    def query_text(self, question: str, y1: str) -> str:
        """"y1 [SEP] q" with the tokenizer's own separator (TART: instruction [SEP] query)."""
        if not self.use_y1 or not y1.strip():
            return question
        sep = getattr(self.tokenizer, "sep_token", None) or "[SEP]"
        return f"{y1.strip()} {sep} {question}"

    @torch.no_grad()
    def _score_pairs(self, pairs: list[tuple[RerankItem, Passage]]) -> list[float]:
        first = [self.query_text(item.question, item.y1) for item, _ in pairs]
        second = [p.contents for _, p in pairs]
        batch = self.tokenizer(first, second, padding=True, truncation=True, max_length=self.max_length,
                               return_tensors="pt").to(_device(self.model))
        logits = self.model(**batch).logits.float()  # (N, num_labels)
        if logits.shape[-1] == 1:
            return logits[:, 0].tolist()
        return torch.log_softmax(logits, dim=-1)[:, self.relevant_label].tolist()


def check_cross_encoder(path: str) -> None:
    """Refuse, in one line and before any weights load, a checkpoint whose head ``AutoModelForSequenceClassification``
    would not build as trained: TART's ``EncT5ForSequenceClassification`` (a T5 encoder with its own classifier,
    defined in TART's repository, not in transformers) would load as a fresh, untrained head."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path)
    custom = [a for a in (getattr(config, "architectures", None) or []) if a.startswith("EncT5")]
    if custom:
        raise ConfigError(f"re-ranker {path}: its head {custom[0]} (TART's) is not a transformers class, and "
                          "AutoModelForSequenceClassification would put an untrained head in its place; use a "
                          "cross-encoder transformers can load (e.g. an MS MARCO cross-encoder) or the llm re-ranker")


SYSTEM = "You answer questions about the given paragraph with a short phrase."


class LLMReranker(Reranker):
    """An offline re-ranker from a causal LM: a log-probability per candidate paragraph.

    ``mode="answer_logprob"`` (default) scores a paragraph by log P_LM(gold answer | paragraph, question, y1):
    how much the paragraph helps the reader produce the right answer (Atlas' perplexity distillation,
    REPLUG's LM-supervised retrieval). Chosen over ``"yes_logprob"`` because (1) the adaptation runs on
    *training* questions, whose gold answers are known; (2) a 135M model's Yes/No relevance judgement is close to
    chance, while its likelihood of a given answer string still rises sharply when the paragraph states it;
    (3) softmax over candidates of log P(a | p) at temperature 1 is the exact posterior P(p | a) under a
    uniform prior, so the teacher needs no calibration. Only the first gold answer (the canonical one) is
    scored. ``mode="yes_logprob"`` needs no gold answer: log P("Yes") renormalised over {Yes, No} after asking
    whether the paragraph helps answer the question; it is the choice for unlabelled questions.

    y1 enters the prompt as a "draft answer" (``use_y1=False`` drops it). Batched: prompts are left-padded,
    so every target ends at the last position and only the last ``max target length + 1`` logits are
    computed (a full (B, L, V) logit tensor would be ~0.5 GB for SmolLM2's 49k vocabulary).
    """

    def __init__(self, model, tokenizer, *, mode: LLMScore = "answer_logprob", use_y1: bool = True,
                 use_chat_template: bool = True, batch_size: int = 16, max_passage_chars: int = 2000,
                 show_progress: bool = False):
        if mode not in ("answer_logprob", "yes_logprob"):
            raise ValueError(f"mode must be 'answer_logprob' or 'yes_logprob', got '{mode}'")
        self.model, self.tokenizer = model.eval(), tokenizer
        self.mode, self.use_y1, self.use_chat_template = mode, use_y1, use_chat_template
        self.batch_size, self.max_passage_chars, self.show_progress = batch_size, max_passage_chars, show_progress

    def prompt(self, item: RerankItem, passage: Passage) -> str:
        text = passage.text[: self.max_passage_chars]
        lines = [f"Paragraph: {passage.title}: {text}" if passage.title else f"Paragraph: {text}",
                 f"Question: {item.question}"]
        if self.use_y1 and item.y1.strip():
            lines.append(f"Draft answer: {item.y1.strip()}")
        if self.mode == "yes_logprob":
            lines.append("Does the paragraph contain information needed to answer the question? Answer Yes or No.")
        user = "\n".join(lines)
        if self.use_chat_template:
            return render_prompt(self.tokenizer, Prompt(user, SYSTEM, chat=True))
        return user + ("\nAnswer:" if self.mode == "answer_logprob" else "\nReply:")

    def target(self, item: RerankItem) -> str:
        if self.mode == "yes_logprob":
            return ""
        if not item.answers:
            raise ValueError(f"answer_logprob needs the gold answers of question '{item.question}'; "
                             "pass answers=..., or use mode='yes_logprob'")
        # After a chat template the reply starts a fresh line; after "Answer:" it needs a space.
        return item.answers[0].strip() if self.use_chat_template else " " + item.answers[0].strip()

    def _yes_no_ids(self) -> tuple[int, int]:
        # A chat reply starts a fresh line ("Yes"); a plain "Reply:" is followed by a space (" Yes").
        space = "" if self.use_chat_template else " "
        # as the reply's first token, after the prompt: a SentencePiece tokenizer given " Yes" alone starts it with a
        # dummy "▁" token
        ids = [continuation_ids(self.tokenizer, space + w)[0] for w in ("Yes", "No")]
        return ids[0], ids[1]

    @torch.no_grad()
    def _score_pairs(self, pairs: list[tuple[RerankItem, Passage]]) -> list[float]:
        tok = self.tokenizer
        # BOS exactly once where the tokenizer adds one (Llama-2), as every other prompt of the project
        prompts = batch_prompt_ids(tok, [self.prompt(item, p) for item, p in pairs])
        targets = [continuation_ids(tok, self.target(item)) for item, _ in pairs]  # the answer as it follows the prompt
        seqs = [p + t for p, t in zip(prompts, targets)]
        width, n_keep = max(map(len, seqs)), max(map(len, targets)) + 1
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs])  # left padding
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs])
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)  # padding must not shift the real tokens' positions
        device = _device(self.model)
        logits = self.model(input_ids=ids.to(device), attention_mask=mask.to(device),
                            position_ids=position_ids.to(device), logits_to_keep=n_keep).logits.float()
        log_p = torch.log_softmax(logits, dim=-1)  # (N, n_keep, V); row j predicts token at width - n_keep + j + 1
        if self.mode == "yes_logprob":
            yes, no = self._yes_no_ids()
            last = log_p[:, -1, :]
            return (last[:, yes] - torch.logaddexp(last[:, yes], last[:, no])).tolist()
        out = []
        for row, target in enumerate(targets):
            # The target's tokens are the last len(target) positions; their predictions sit one step earlier.
            preds = log_p[row, n_keep - 1 - len(target): n_keep - 1, :]
            out.append(float(preds.gather(1, torch.tensor(target, device=device)[:, None]).sum()))
        return out


def build_reranker(kind: Literal["llm", "cross_encoder"], model_name: str, *, mode: LLMScore = "answer_logprob",
                   use_y1: bool = True, batch_size: int = 16, dtype: str = "auto",
                   show_progress: bool = False) -> Reranker:
    """A re-ranker by kind and model name (embedded short name, local folder, or hub id)."""
    if kind == "cross_encoder":
        return CrossEncoderReranker.from_name(model_name, use_y1=use_y1, batch_size=batch_size,
                                              show_progress=show_progress)
    if kind == "llm":
        model, tokenizer = load_causal_lm(model_name, ModelOptions(dtype=dtype))  # type: ignore[arg-type]
        return LLMReranker(model, tokenizer, mode=mode, use_y1=use_y1, batch_size=batch_size,
                           show_progress=show_progress)
    raise ValueError(f"unknown re-ranker kind '{kind}' (llm, cross_encoder)")
