"""DRAGIN's per-(model, dataset) settings as one table, taken from the authors' configs
(oneal2000/DRAGIN ``config/<model>/<dataset>/DRAGIN.json``), resolved by ``dragin_profile: reference``.

Every setting that depends on the run is filled from one row, so a 2Wiki run can no longer mix 2Wiki's top-n with
HotpotQA's θ and length: θ (``hallucination_threshold``), QFS's top-n (``retrieve_keep_top_k``), the generation
length (``generate_max_length``) and the few-shot count (``fewshot``). The row's model is ``reference_config``, by
default read from the model's name ("vicuna" -> Vicuna-13b-v1.5, "13b" -> Llama2-13b-chat, anything else
Llama2-7b-chat: a new model needs its own θ sweep anyway, SPEC.md); its dataset is the first run hint (the dataset's
path or name, then the demos' name) that names one of the authors' four, else HotpotQA's values with the demo file's
own count. The ``paper`` profile keeps the project's values (θ 0.8, top-n 25, 100 tokens, all demos of the file).
A setting given explicitly always wins; the resolved values are written to ``config.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from adaptive_rag.plumbing.dragin_eval import dataset_kind
from inference.dynamic_rag.prompts import AUTHORS_LOOPS

ReferenceConfig = Literal["Llama2-7b-chat", "Llama2-13b-chat", "Vicuna-13b-v1.5"]


@dataclass(frozen=True)
class Row:
    theta: float  # hallucination_threshold
    qfs_top_n: int  # retrieve_keep_top_k
    max_new_tokens: int  # generate_max_length
    num_demos: int | None  # fewshot (None: every demo of the prompt file)
    token_threshold: float = 0.08  # their TokenRAG's hallucination_threshold (config/<model>/<dataset>/FLARE.json)


# config/<model>/<dataset>/DRAGIN.json (and FLARE.json for the TokenRAG threshold), read line by line
TABLE: dict[str, dict[str, Row]] = {
    "Llama2-7b-chat": {"2wiki": Row(1.0, 25, 64, 6, 0.1), "hotpotqa": Row(0.8, 35, 100, 8, 0.08),
                       "iirc": Row(0.6, 35, 128, 8, 0.08), "strategyqa": Row(0.75, 35, 100, 6, 0.1)},
    "Llama2-13b-chat": {"2wiki": Row(0.8, 25, 64, 6, 0.08), "hotpotqa": Row(1.2, 35, 100, 8, 0.1),
                        "iirc": Row(1.0, 25, 128, 8, 0.1), "strategyqa": Row(1.3, 25, 100, 6, 0.06)},
    "Vicuna-13b-v1.5": {"2wiki": Row(1.2, 25, 64, 6, 0.1), "hotpotqa": Row(1.2, 35, 100, 8, 0.1),
                        "iirc": Row(1.3, 35, 128, 8, 0.4), "strategyqa": Row(1.5, 25, 100, 6, 0.1)},
}
# DRAGIN's published results (Table 2: EM, F1; Table 3: retrieval calls per question) for the rows run under
# reference: (reference_config, dataset) -> method -> (EM, F1, retrievals per question). Only the cells this project
# has checked against the paper are here; a missing cell is not known to the project, never zero. Their FLARE row is
# their TokenRAG (the method token-rag); wo-RAG never retrieves and SR-RAG once.
PUBLISHED: dict[tuple[str, str], dict[str, tuple[float | None, float | None, float | None]]] = {
    ("Llama2-7b-chat", "hotpotqa"): {"wo-rag": (0.184, 0.275, 0.0), "sr-rag": (0.164, 0.250, 1.0),
                                     "fl-rag": (0.146, 0.211, 3.8), "fs-rag": (0.214, 0.304, 4.2),
                                     "token-rag": (0.149, 0.221, 1.1), "dragin": (0.232, 0.334, 3.0)},
    ("Llama2-7b-chat", "2wiki"): {"wo-rag": (None, None, 0.0), "sr-rag": (None, None, 1.0),
                                  "dragin": (0.220, 0.293, None)},
}


def published(config: str | None, *hints: str | None, method: str) -> tuple[float | None, float | None,
                                                                            float | None] | None:
    """DRAGIN's published (EM, F1, retrievals/question) for a reference run, or None where the project has none."""
    return PUBLISHED.get((config or "", dataset_kind(*hints) or ""), {}).get(method)


PAPER = Row(theta=0.8, qfs_top_n=25, max_new_tokens=100, num_demos=None)  # the paper gives no n: 25-35's low end
DEFAULT_MAX_NEW_TOKENS = PAPER.max_new_tokens


def reference_config_for(model: str | None) -> ReferenceConfig:
    """Which of the authors' model configs a model's name points to."""
    name = (model or "").lower()
    if "vicuna" in name:
        return "Vicuna-13b-v1.5"
    return "Llama2-13b-chat" if "13b" in name else "Llama2-7b-chat"


def row_for(profile: str, config: str | None, *hints: str | None) -> Row:
    """The settings row: the paper profile's, or the reference config's row for the dataset the hints name."""
    if profile != "reference":
        return PAPER
    if config not in TABLE:
        raise ValueError(f"reference_config must be one of {', '.join(TABLE)}, got {config!r}")
    kind = dataset_kind(*hints)
    return TABLE[config][kind] if kind else replace(TABLE[config]["hotpotqa"], num_demos=None)


def resolve_run(method, prompt, engine, *hints: str | None):
    """``(prompt, engine)`` with what the method's profile gives for this run (an explicit value wins): the
    generation length and demo count of its row; under ``reference`` rounds that run to EOS or the budget, as the
    authors' loops do (no stop at the answer sentence, nor at a new "Question:" line); the authors' prompt joined as
    the method's own loop of theirs joins it. The method's own values (θ, top-n) come from ``method.resolved``."""
    row = row_for(method.dragin_profile, method.reference_config, *hints)
    reference = method.dragin_profile == "reference"
    if engine.max_new_tokens is None:
        engine = replace(engine, max_new_tokens=row.max_new_tokens)
    if engine.stop_after_answer is None:
        engine = replace(engine, stop_after_answer=not reference)
    if prompt.num_demos is None and row.num_demos is not None:
        prompt = replace(prompt, num_demos=row.num_demos)
    if prompt.stop_at_question is None:
        prompt = replace(prompt, stop_at_question=not reference)
    if prompt.authors_loop is None:
        prompt = replace(prompt, authors_loop=AUTHORS_LOOPS.get(method.trigger, "attn"))
    return prompt, engine
