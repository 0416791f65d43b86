"""Prompts for the dynamic-RAG methods. Building a prompt never loads a model (only the tokenizer's template).

Two styles:

* ``paper``: the DRAGIN reference layout for users with large models: few-shot chain-of-thought demos
  (``prompt_templates/<dataset>.yaml``), then ``Context:`` with numbered documents, an instruction to answer
  in the demos' format, the question, and the answer generated so far.
* ``chat``: a chat-template, short-answer prompt that a small instruction model can follow (SmolLM2 scores
  0 with 8-shot CoT, SPEC.md); documents are numbered in the user turn.

``prompt_source: authors`` (paper style) builds DRAGIN's prompt exactly as the authors' code does
(oneal2000/DRAGIN ``src/generate.py``), from their own exemplars and templates (``src/data.py``, fetched by
``python -m data_builders.download dragin-code``; :mod:`data_builders.dragin_code`): each demo's ``case`` and a
newline; with documents ``Context:``, one ``[i] text`` line each (no titles), and "Answer in the same format as
before."; then the question's ``case`` and the answer so far, joined as the method's loop joins them
(``authors_loop``): DRAGIN's ``AttnWeightRAG`` joins the non-empty parts with one space; ``FixLengthRAG``
(FL-RAG, FS-RAG) and ``TokenRAG`` write ``case + " " + text`` (a trailing space before the first round), and
``FixLengthRAG``'s context line reads "Answer in t he same format as before." (their typo, kept); ``BasicRAG`` and
``SingleRAG`` (wo-RAG, SR-RAG) write the ``case`` alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import yaml

from adaptive_rag.plumbing.dragin_eval import dataset_kind
from adaptive_rag.plumbing.records import Passage
from data_builders.dragin_code import DEFAULT_FOLDER, AuthorsPrompts, load_authors_prompts

TEMPLATE_DIR = Path(__file__).parent / "prompt_templates"
PromptStyle = Literal["chat", "paper"]
AuthorsLoop = Literal["attn", "fixed", "token", "single"]
CONTEXT_LINE = "Answer in the same format as before.\n"
FIXED_LOOP_LINE = "Answer in t he same format as before.\n"  # FixLengthRAG's own line, typo and all
# the loop of the authors' src/generate.py that runs each trigger (their prompt joins differ per loop)
AUTHORS_LOOPS: dict[str, AuthorsLoop] = {"rind": "attn", "fixed_length": "fixed", "fixed_sentence": "fixed",
                                         "token_rag": "token", "flare": "token", "never": "single", "single": "single"}

CHAT_SYSTEM = "You are a helpful assistant. Answer questions with a short phrase, no explanation."
CHAT_USER = "{context}Question: {question}\nAnswer with a short phrase."
# A few-shot model that has answered goes on to invent the next demo: a new "Question:" line ends its answer.
PAPER_STOP = re.compile(r"\n\s*Question:")


@dataclass
class PromptConfig:
    prompt_style: PromptStyle = "chat"
    demos: str = "hotpotqa"  # which prompt_templates/<demos>.yaml supplies the paper style's few-shot demos
    num_demos: int | None = None  # None: all demos in the file (DRAGIN: HotpotQA 8, 2Wiki 6, StrategyQA 6)
    # project: the paper style's own demos and layout; authors: DRAGIN's prompt as their code builds it, from their
    # src/data.py (python -m data_builders.download dragin-code), for --demos hotpotqa, 2wikimultihopqa, iirc or
    # strategyqa
    prompt_source: Literal["project", "authors"] = "project"
    authors_code: str = DEFAULT_FOLDER  # the folder holding their data.py (prompt_source authors)
    # which of their loops' joins (module docstring); None: DRAGIN's (the evaluate command sets the method's)
    authors_loop: AuthorsLoop | None = None
    # the paper style ends an answer where the model starts a new "Question:" line; the authors' rounds run to EOS
    # or the budget (None: yes, unless dragin_profile reference)
    stop_at_question: bool | None = None

    def __post_init__(self):
        if self.prompt_style not in ("chat", "paper"):
            raise ValueError(f"prompt_style must be 'chat' or 'paper', got '{self.prompt_style}'")
        if self.prompt_source not in ("project", "authors"):
            raise ValueError(f"prompt_source must be 'project' or 'authors', got '{self.prompt_source}'")
        if self.prompt_source == "authors" and self.prompt_style != "paper":
            raise ValueError("prompt_source 'authors' is DRAGIN's few-shot prompt: use it with prompt_style paper")


@cache
def load_demos(dataset: str) -> dict:
    path = TEMPLATE_DIR / f"{dataset}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in TEMPLATE_DIR.glob("*.yaml")))
        raise ValueError(f"no few-shot template for dataset '{dataset}' (known: {known})")
    return yaml.safe_load(path.read_text())


def format_docs(docs: list[Passage]) -> str:
    return "".join(f"[{i}] {d.title + ': ' if d.title else ''}{d.text}\n" for i, d in enumerate(docs, 1))


@dataclass
class Prompt:
    text: str
    question_span: tuple[int, int]  # character span of the question inside ``text`` (QFS draws from it)
    prior_start: int  # where the already-generated answer begins in ``text``


class PromptBuilder:
    def __init__(self, tokenizer, cfg: PromptConfig | None = None):
        self.tokenizer, self.cfg = tokenizer, cfg or PromptConfig()
        self.authors: AuthorsPrompts | None = None
        if self.cfg.prompt_source == "authors":  # fail at construction, not mid-run
            self.authors = load_authors_prompts(self.cfg.authors_code, dataset_kind(self.cfg.demos) or self.cfg.demos)
            self.authors_demos = "".join(case + "\n" for case in self.authors.demo_cases(self.cfg.num_demos))
        elif self.cfg.prompt_style == "paper":
            load_demos(self.cfg.demos)

    def build(self, question: str, docs: list[Passage], prior: str = "", *, as_written: bool = False) -> Prompt:
        """``as_written``: the authors' prompt takes ``prior`` as their loop's text, spaces and all (the engine's
        ``round_join: authors``); else stripped."""
        if self.authors is not None:
            return self._authors(question, docs, prior, as_written)
        head = self._paper(question, docs) if self.cfg.prompt_style == "paper" else self._chat(question, docs)
        start = head.rfind(question)
        return Prompt(text=head + prior, question_span=(start, start + len(question)), prior_start=len(head))

    def head_probes(self) -> list[str]:
        """Two prompts that differ in everything a question changes (question, documents, answer so far): their
        common start is the head every prompt of this builder shares (adaptive_rag.lm.decoder.shared_head_ids)."""
        probe = Passage("probe", "Probe", "A probe passage.")
        build = PromptBuilder.build  # this class's prompts, not what a subclass records or changes per question
        return [build(self, "Who wrote the probe?", []).text, build(self, "Where is it?", [probe], " It is").text]

    def stop_index(self, generated: str) -> int | None:
        """Where the answer in ``generated`` ends because the model started something the prompt style forbids
        (the paper style: a new "Question:" line), or None."""
        if self.cfg.prompt_style != "paper" or self.cfg.stop_at_question is False:
            return None
        found = PAPER_STOP.search(generated)
        return None if found is None else found.start()

    def _chat(self, question: str, docs: list[Passage]) -> str:
        context = f"Context:\n{format_docs(docs)}\n" if docs else ""
        user = CHAT_USER.format(context=context, question=question)
        if not getattr(self.tokenizer, "chat_template", None):
            return f"{CHAT_SYSTEM}\n\n{user}\nAnswer: "
        messages = [{"role": "system", "content": CHAT_SYSTEM}, {"role": "user", "content": user}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def _paper(self, question: str, docs: list[Passage]) -> str:
        spec = load_demos(self.cfg.demos)
        demos = spec["demos"][: self.cfg.num_demos] if self.cfg.num_demos else spec["demos"]
        fmt = spec.get("answer_format", "So the answer is {answer}.")
        parts = [f"Question: {d['question']}\nAnswer: {d['reasoning']} {fmt.format(answer=d['answer'])}\n\n"
                 for d in demos]
        if docs:
            parts.append(f"Context:\n{format_docs(docs)}\n")
        parts.append(f"{spec['instruction']}\n\nQuestion: {question}\nAnswer:")
        return "".join(parts)

    def _authors(self, question: str, docs: list[Passage], prior: str, as_written: bool = False) -> Prompt:
        """DRAGIN's prompt as their loop for this method writes it (module docstring)."""
        loop = self.cfg.authors_loop or "attn"
        case, text = self.authors.case(question), prior if as_written else prior.strip()
        head = self.authors_demos
        if docs:
            line = FIXED_LOOP_LINE if loop == "fixed" else CONTEXT_LINE
            head += "Context:\n" + "".join(f"[{i}] {d.text}\n" for i, d in enumerate(docs, 1)) + line
        if loop in ("fixed", "token"):
            tail = case + " " + text
        else:  # AttnWeightRAG (and the single-round loops, whose text is empty): the non-empty parts, one space
            tail = " ".join(part for part in (case, text) if part)
        start = len(head) + case.rfind(question)
        text_start = len(head) + len(tail) - len(text)
        return Prompt(text=head + tail, question_span=(start, start + len(question)), prior_start=text_start)
