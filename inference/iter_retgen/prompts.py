"""Iter-RetGen prompts: paragraphs prepended to the question, in two styles.

* ``paper``: the paper's 3-shot chain of thought, "Question: …\\nLet's think step by step.\\n… So the answer is …",
  with the retrieved paragraphs shown as "Title: …\\nContext: …" before the question, and, as its Appendix B
  shows, every demonstration preceded by knowledge of its own (the paragraphs its reasoning uses, and a
  distractor, as retrieval would give them). A plain-text completion prompt (the paper used text-davinci-003).
  The three demonstrations and their paragraphs were written for this project (the paper's are per dataset);
  each reasoning chain fits on one line, so generation can stop at a newline.
* ``chat``: a zero-shot chat-template prompt asking for a short answer, which SmolLM2 can follow (SPEC: few-shot
  CoT scores 0 on SmolLM2, this style scores F1 ~0.15 with gold paragraphs).

Building a prompt never loads a model: a :class:`Prompt` says whether the generator should wrap it in the
tokenizer's chat template (:class:`adaptive_rag.lm.generation.Prompt`).
"""

from __future__ import annotations

from typing import Literal

from adaptive_rag.lm.generation import Prompt
from adaptive_rag.plumbing.records import Passage

PromptStyle = Literal["paper", "chat"]

# (question, one-line reasoning that ends "So the answer is X.")
PAPER_DEMOS: tuple[tuple[str, str], ...] = (
    ("Who was born first, Albert Einstein or Niels Bohr?",
     "Albert Einstein was born in 1879. Niels Bohr was born in 1885. 1879 is earlier than 1885. "
     "So the answer is Albert Einstein."),
    ("In which country is the university where Alan Turing earned his PhD?",
     "Alan Turing earned his PhD at Princeton University. Princeton University is in the United States. "
     "So the answer is the United States."),
    ("What is the capital of the country where the Eiffel Tower stands?",
     "The Eiffel Tower stands in Paris, France. The capital of France is Paris. So the answer is Paris."),
)

# The knowledge before each demonstration (Appendix B: every demo is shown with retrieved paragraphs): (title, text)
# pairs, the ones its reasoning uses and one that does not help, in PAPER_DEMOS' order.
DEMO_KNOWLEDGE: tuple[tuple[tuple[str, str], ...], ...] = (
    (("Albert Einstein", "Albert Einstein (14 March 1879 – 18 April 1955) was a German-born theoretical physicist."),
     ("Niels Bohr", "Niels Henrik David Bohr (7 October 1885 – 18 November 1962) was a Danish physicist."),
     ("Bohr model", "The Bohr model of the atom was proposed in 1913.")),
    (("Alan Turing", "Alan Turing obtained his PhD from Princeton University in 1938, supervised by Alonzo Church."),
     ("Princeton University", "Princeton University is a private research university in Princeton, New Jersey, "
                              "United States."),
     ("Turing test", "The Turing test was introduced by Alan Turing in his 1950 paper.")),
    (("Eiffel Tower", "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, France."),
     ("France", "France is a country in Western Europe. Its capital and largest city is Paris."),
     ("Gustave Eiffel", "Gustave Eiffel was a French civil engineer whose company built the tower.")),
)

CHAT_INSTRUCTION = "Answer the question using the paragraphs above. Reply with a short phrase only."


def format_paragraphs(passages: list[Passage]) -> str:
    """The paper's knowledge block: one "Title: …\\nContext: …" per paragraph, blank-line separated."""
    return "\n\n".join(f"Title: {p.title}\nContext: {p.text}" for p in passages)


def paper_prompt(question: str, passages: list[Passage]) -> Prompt:
    knowledge_of = [format_paragraphs([Passage(f"demo{i}-{j}", t, x) for j, (t, x) in enumerate(paragraphs)])
                    for i, paragraphs in enumerate(DEMO_KNOWLEDGE)]
    demos = "\n\n".join(f"{k}\n\nQuestion: {q}\nLet's think step by step.\n{cot}"
                        for k, (q, cot) in zip(knowledge_of, PAPER_DEMOS))
    knowledge = format_paragraphs(passages)
    body = f"{knowledge}\n\n" if knowledge else ""
    return Prompt(user=f"{demos}\n\n{body}Question: {question}\nLet's think step by step.\n", chat=False)


def chat_style_prompt(question: str, passages: list[Passage]) -> Prompt:
    knowledge = format_paragraphs(passages)
    body = f"{knowledge}\n\n" if knowledge else ""
    return Prompt(user=f"{body}{CHAT_INSTRUCTION}\nQuestion: {question}", chat=True)


def build_prompt(style: PromptStyle, question: str, passages: list[Passage]) -> Prompt:
    if style == "paper":
        return paper_prompt(question, passages)
    if style == "chat":
        return chat_style_prompt(question, passages)
    raise ValueError(f"unknown prompt style '{style}' (paper, chat)")
