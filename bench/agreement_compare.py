"""Question-by-question comparison of the authors' loop (a trace of ``bench/agreement_authors.py``) with the engine
(its ``predictions.jsonl``): the pure part of ``bench/agreement_dragin.py``, no model, no files of theirs.

Per question: the first retrieval's round and position (the answer's kept length in tokens when it fired), every
query (as searched: after the 64-token cut), every document list (ids), the final text (after their
``regenerate_answer``, which the engine's ``answer_extraction: dragin`` repeats), EM/F1 (their ``eval.py`` extraction,
both sides scored by :func:`adaptive_rag.plumbing.dragin_eval.score_dragin`), retrievals, generated tokens, seconds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from adaptive_rag.plumbing.dragin_eval import cut_output, score_dragin

# the agreement rates, in table order: (key, column title)
RATES = (("first_trigger", "trigger"), ("first_query", "1st query"), ("queries", "queries"),
         ("first_docs", "1st docs"), ("docs", "docs"), ("retrievals", "#retr"), ("final", "final text"),
         ("answer", "answer"))


@dataclass
class Side:
    """One side's view of one question."""

    id: str
    retrievals: list[dict]  # round, position, query (as searched), doc_ids
    final: str
    em: float
    f1: float
    generated_tokens: int
    seconds: float

    @property
    def first(self) -> dict | None:
        return self.retrievals[0] if self.retrievals else None

    @property
    def queries(self) -> list[str]:
        return [r["query"] for r in self.retrievals]

    @property
    def docs(self) -> list[list[str]]:
        return [list(r["doc_ids"]) for r in self.retrievals]


@dataclass
class Row:
    id: str
    authors: Side
    engine: Side
    agree: dict[str, bool] = field(default_factory=dict)


def read_trace(path: str | Path) -> tuple[dict, list[dict]]:
    """The authors' trace: its header (adaptations) and one record per question."""
    lines = Path(path).read_text().splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:] if line.strip()]


def authors_sides(records: list[dict], golds: dict[str, list[str]]) -> list[Side]:
    out = []
    for r in records:
        scores = score_dragin(r["final"], golds.get(r["id"], []), "hotpotqa")
        out.append(Side(r["id"], [{k: x[k] for k in ("round", "position", "query", "doc_ids")}
                                  for x in r["retrievals"]],
                        r["final"].strip(), scores["em"], scores["f1"], int(r["generated_tokens"]),
                        float(r["seconds"])))
    return out


def engine_sides(predictions: list[dict]) -> list[Side]:
    """The engine's side; its final text is its output as eval.py's regenerate_answer returns it (cut at "Question:"
    / "Note:"; a forced answer is already cut), as their ``final`` is."""
    out = []
    for p in predictions:
        scores = score_dragin(p["output"], p.get("answers", []), "hotpotqa")
        out.append(Side(p["id"], [{k: x[k] for k in ("round", "position", "query", "doc_ids")}
                                  for x in p.get("retrievals", [])],
                        cut_output(p["output"] or "").strip(), scores["em"], scores["f1"],
                        int(p.get("generated_tokens", 0)),
                        float(p.get("batch_mean_seconds", 0.0))))
    return out


def _trigger(side: Side) -> tuple | None:
    first = side.first
    return None if first is None else (first["round"], first["position"])


def compare(authors: list[Side], engine: list[Side]) -> list[Row]:
    """Rows for the questions both sides ran, in the authors' order; a question missing on one side is an error."""
    by_id = {s.id: s for s in engine}
    missing = [a.id for a in authors if a.id not in by_id]
    if missing:
        raise ValueError(f"the engine has no prediction for {len(missing)} of the authors' questions "
                         f"(first: {missing[0]})")
    rows = []
    for a in authors:
        e = by_id[a.id]
        first_a, first_e = a.first, e.first
        rows.append(Row(a.id, a, e, {
            "first_trigger": _trigger(a) == _trigger(e),
            "first_query": (first_a or {}).get("query") == (first_e or {}).get("query"),
            "queries": a.queries == e.queries,
            "first_docs": (first_a or {}).get("doc_ids") == (first_e or {}).get("doc_ids"),
            "docs": a.docs == e.docs,
            "retrievals": len(a.retrievals) == len(e.retrievals),
            "final": a.final == e.final,
            "answer": (a.em, a.f1) == (e.em, e.f1),
        }))
    return rows


def summary(rows: list[Row]) -> dict[str, float]:
    """Agreement counts and rates, and each side's totals."""
    n = len(rows)
    out: dict[str, float] = {"n": n}
    for key, _ in RATES:
        agree = sum(r.agree[key] for r in rows)
        out[f"{key}_agree"] = agree
        out[f"{key}_rate"] = agree / n if n else 0.0
    for side in ("authors", "engine"):
        sides = [getattr(r, side) for r in rows]
        out[f"{side}_retrievals"] = sum(len(s.retrievals) for s in sides)
        out[f"{side}_tokens"] = sum(s.generated_tokens for s in sides)
        out[f"{side}_em"] = sum(s.em for s in sides) / n if n else 0.0
        out[f"{side}_f1"] = sum(s.f1 for s in sides) / n if n else 0.0
        out[f"{side}_seconds"] = sum(s.seconds for s in sides)
    out["retrievals_diff"] = out["engine_retrievals"] - out["authors_retrievals"]
    return out


def flips(a: list[Side], b: list[Side]) -> list[str]:
    """Questions whose engine output, retrievals or queries differ between two engine runs (batch B and batch 1):
    greedy near-ties flipped by float32 batching."""
    by_id = {s.id: s for s in b}
    return [s.id for s in a if s.id in by_id and (s.final != by_id[s.id].final or s.queries != by_id[s.id].queries
                                                  or s.docs != by_id[s.id].docs)]


def _short(text: str | None, n: int = 60) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[:n - 1] + "…"


def question_table(rows: list[Row]) -> tuple[list[str], list[list]]:
    header = ["#", "id", "trigger A", "trigger E", "1st query A | E (same?)", "#retr A/E", "docs", "final",
              "EM A/E", "F1 A/E", "tok A/E", "s A/E"]
    body = []
    for i, r in enumerate(rows):
        a, e = r.authors, r.engine
        qa, qe = (a.first or {}).get("query"), (e.first or {}).get("query")
        query = "=" + _short(qa) if r.agree["first_query"] else f"{_short(qa, 40)} | {_short(qe, 40)}"
        body.append([i, r.id[:10], _trigger(a), _trigger(e), query, f"{len(a.retrievals)}/{len(e.retrievals)}",
                     "same" if r.agree["docs"] else "differ", "same" if r.agree["final"] else "differ",
                     f"{a.em:.0f}/{e.em:.0f}", f"{a.f1:.2f}/{e.f1:.2f}", f"{a.generated_tokens}/{e.generated_tokens}",
                     f"{a.seconds:.1f}/{e.seconds:.1f}"])
    return header, body


def method_table(summaries: dict[str, dict[str, float]]) -> tuple[list[str], list[list]]:
    header = ["method", "n", *[t for _, t in RATES], "retr A/E", "tok A/E", "EM A/E", "F1 A/E", "s/q A/E"]
    body = []
    for method, s in summaries.items():
        n = int(s["n"])
        body.append([method, n, *[f"{int(s[k + '_agree'])}/{n}" for k, _ in RATES],
                     f"{int(s['authors_retrievals'])}/{int(s['engine_retrievals'])}",
                     f"{int(s['authors_tokens'])}/{int(s['engine_tokens'])}",
                     f"{s['authors_em']:.3f}/{s['engine_em']:.3f}", f"{s['authors_f1']:.3f}/{s['engine_f1']:.3f}",
                     f"{s['authors_seconds'] / max(n, 1):.2f}/{s['engine_seconds'] / max(n, 1):.2f}"])
    return header, body
