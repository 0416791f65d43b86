"""How a model says ``<RET>``: one added special token (``special``, the paper's wording) or plain text learnt as the
tokenizer's ordinary pieces (``text``, the authors' code: ``finetune.py`` never adds a token).

Both are detected the same way by the token rule: ``"<RET>"`` as a substring of the output. They differ for the
threshold rule, which reads a first-step probability: of the added token, or, for plain text, of the first piece
that ``"<RET>"`` tokenizes to where the model writes it (right after the prompt's ``"### Response:\\n"``); on
Llama-2 that is ``"<"``, id 29966, the id the authors' ``evaluate_script.py`` reads.

A model trained by ``training/adapt_llm.py`` with ``ret_token: text`` carries :data:`MARKER_FILE` beside its
tokenizer, so the gate tells the two apart from the model folder alone (:func:`ret_signal`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from adaptive_rag.lm.tokenization import continuation_ids
from data_builders.adapt_llm_prompts import RET_TOKEN, parametric_prompt

RetToken = Literal["special", "text"]
RET_TOKEN_MODES: tuple[str, ...] = ("special", "text")
MARKER_FILE = "ret_token.json"  # written by training into a model folder trained with ret_token: text


@dataclass(frozen=True)
class RetSignal:
    """What the gate watches: ``watch`` is the token string whose first-step probability is ``p_ret``."""

    mode: RetToken
    watch: str  # "<RET>" (special), or the first piece of plain-text "<RET>" as a token string ("<")
    piece_ids: tuple[int, ...]  # the ids "<RET>" is written with after the prompt


def text_piece_ids(tokenizer: Any) -> list[int]:
    """The ids of plain-text ``"<RET>"`` as they follow the parametric prompt (the answer's first pieces): the joint
    tokenization's tail where the prompt's own ids are its prefix, else ``"<RET>"`` as mid-text pieces
    (:func:`~adaptive_rag.lm.tokenization.continuation_ids`, SentencePiece safe)."""
    prompt = parametric_prompt("Who?")
    alone = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    joint = tokenizer(prompt + RET_TOKEN, add_special_tokens=False)["input_ids"]
    if list(joint[:len(alone)]) == list(alone) and len(joint) > len(alone):
        return list(joint[len(alone):])
    return continuation_ids(tokenizer, RET_TOKEN)


def marked_mode(tokenizer: Any) -> RetToken | None:
    """The mode recorded in the tokenizer's folder (:data:`MARKER_FILE`), None without one."""
    folder = Path(str(getattr(tokenizer, "name_or_path", "") or ""))
    path = folder / MARKER_FILE
    if not folder.name or not path.is_file():
        return None
    mode = json.loads(path.read_text(encoding="utf-8")).get("ret_token")
    return mode if mode in RET_TOKEN_MODES else None


def write_marker(folder: str | Path, tokenizer: Any, mode: RetToken) -> None:
    """Record ``mode`` (and the pieces it is written with) beside a trained model's tokenizer."""
    ids = [tokenizer.convert_tokens_to_ids(RET_TOKEN)] if mode == "special" else text_piece_ids(tokenizer)
    (Path(folder) / MARKER_FILE).write_text(json.dumps({
        "ret_token": mode, "piece_ids": ids, "pieces": tokenizer.convert_ids_to_tokens(ids)}, indent=2) + "\n")


def ret_signal(tokenizer: Any, mode: RetToken | Literal["auto"] = "auto") -> RetSignal | None:
    """How ``tokenizer``'s model says ``<RET>``. ``auto``: ``special`` when the vocabulary holds the token, else the
    mode recorded in the model folder; None when neither says (a model never trained to emit ``<RET>``)."""
    if mode == "auto":
        mode = "special" if RET_TOKEN in tokenizer.get_vocab() else marked_mode(tokenizer)
        if mode is None:
            return None
    if mode == "special":
        if RET_TOKEN not in tokenizer.get_vocab():
            raise ValueError(f"ret_token special: the tokenizer has no {RET_TOKEN} token")
        convert = getattr(tokenizer, "convert_tokens_to_ids", None)  # a test double may know its vocabulary only
        return RetSignal("special", RET_TOKEN, (convert(RET_TOKEN),) if convert else ())
    if mode != "text":
        raise ValueError(f"ret_token must be one of {', '.join(RET_TOKEN_MODES)}, got '{mode}'")
    ids = text_piece_ids(tokenizer)
    return RetSignal("text", tokenizer.convert_ids_to_tokens(ids[0]), tuple(ids))
