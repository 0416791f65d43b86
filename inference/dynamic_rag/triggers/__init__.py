"""When to retrieve: one trigger per file in this folder, registered by name with :func:`register_trigger`.

A trigger is a class with ``check(view, cfg, final=...) -> Event | None``. It declares:

* ``per_token``: called after every token (FL-RAG) rather than only where a sentence ends and at the end;
* ``judges_content``: it reads the generated text's signals, so its retrievals get the progress guarantee and
  ``docs_scope`` (RIND, FLARE);
* ``needs(cfg, head_reduce)``: what the decoder must capture for it (``"attention"``: last-layer attention rows;
  ``"attention_per_head"``: those rows kept per head);
* ``retrieves_first(cfg)``: whether the method retrieves with the question before generating;
* ``round_tokens(cfg)``: the tokens one round writes in the authors' per-round loop when the trigger fixes it
  (FL-RAG's window); None: the budget;
* ``Knobs``: a dataclass of the settings it owns; they become fields of ``MethodConfig`` (and command-line options)
  when the file is discovered;
* ``trace(view, cfg)``: what the trace view shows of a round (``--keep_signals``): per-word signals and the
  threshold they are judged against. By default DRAGIN's word signals, judged by RIND's own settings (a reference
  view for any method); a trigger with signals of its own overrides it.

Adding a trigger is a new file here (and its test); ``inference/dynamic_rag/methods.py`` lists presets (method names)
that pair a trigger with a query former.
"""

from __future__ import annotations

from typing import Any, ClassVar

from inference.dynamic_rag.registry import Registry
from inference.dynamic_rag.round_view import Event, RoundView


class Trigger:
    name: ClassVar[str]
    retrieves: ClassVar[bool] = True  # False only for a trigger that never fires (no retriever needed)
    per_token: ClassVar[bool] = False
    judges_content: ClassVar[bool] = False
    Knobs: ClassVar[type | None] = None
    reads: ClassVar[tuple[str, ...]] = ()  # settings it reads that it does not own (a sweep crosses them)

    def retrieves_first(self, cfg: Any) -> bool:
        return False

    def round_tokens(self, cfg: Any) -> int | None:
        return None

    def needs(self, cfg: Any, head_reduce: str) -> frozenset[str]:
        return frozenset()

    def validate(self, cfg: Any) -> None:
        """Raise ValueError for knob values this trigger cannot work with."""

    def check(self, view: RoundView, cfg: Any, *, final: bool) -> Event | None:
        raise NotImplementedError

    def trace(self, view: RoundView, cfg: Any) -> dict[str, Any]:
        """``{"theta": ..., "words": [...]}`` for the trace view: RIND's, unless a trigger describes itself."""
        return TRIGGERS.get("rind").trace(view, cfg)


TRIGGERS: Registry[Trigger] = Registry("trigger", __name__)
register_trigger = TRIGGERS.register


def check_trigger(view: RoundView, cfg: Any, *, sentence_end: bool, final: bool) -> Event | None:
    """Ask the method's trigger whether to retrieve now: after every token for a per-token trigger, else where a
    sentence ends and at the end of the round."""
    trigger = TRIGGERS.get(cfg.trigger)
    if not view.pieces or not (trigger.per_token or sentence_end or final):
        return None
    return trigger.check(view, cfg, final=final)
