"""Prompts for the dynamic-RAG methods. Building a prompt never loads a model (only the tokenizer's template).

Two styles:

* ``paper``: the DRAGIN reference layout for users with large models: few-shot chain-of-thought demos
  (``prompt_templates/<dataset>.yaml``), then ``Context:`` with numbered documents, an instruction to answer
  in the demos' format, the question, and the answer generated so far.
* ``chat``: a chat-template, short-answer prompt that a small instruction model can follow (SmolLM2 scores
  0 with 8-shot CoT, SPEC.md); documents are numbered in the user turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import yaml

from adaptive_rag.plumbing.records import Passage

TEMPLATE_DIR = Path(__file__).parent / "prompt_templates"
PromptStyle = Literal["chat", "paper"]

CHAT_SYSTEM = "You are a helpful assistant. Answer questions with a short phrase, no explanation."
CHAT_USER = "{context}Question: {question}\nAnswer with a short phrase."
# A few-shot model that has answered goes on to invent the next demo: a new "Question:" line ends its answer.
PAPER_STOP = re.compile(r"\n\s*Question:")


@dataclass
class PromptConfig:
    prompt_style: PromptStyle = "chat"
    demos: str = "hotpotqa"  # which prompt_templates/<demos>.yaml supplies the paper style's few-shot demos
    num_demos: int | None = None  # None: all demos in the file (DRAGIN: HotpotQA 8, 2Wiki 6, StrategyQA 6)

    def __post_init__(self):
        if self.prompt_style not in ("chat", "paper"):
            raise ValueError(f"prompt_style must be 'chat' or 'paper', got '{self.prompt_style}'")


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
        if self.cfg.prompt_style == "paper":
            load_demos(self.cfg.demos)  # fail at construction, not mid-run

    def build(self, question: str, docs: list[Passage], prior: str = "") -> Prompt:
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
        if self.cfg.prompt_style != "paper":
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
