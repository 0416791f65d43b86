"""PopQA's popularity policy with a threshold tuned on one slice of questions and every policy reported on another.

    python -m inference.commands.popularity_threshold runs/adapt_llm_squad/model/eval/predictions.jsonl \
        --tune 0:700 --test 700:1000

Reads the ``predictions.jsonl`` of an ADAPT-LLM evaluation that generated every answer (the training job's, or
``python -m inference.commands.evaluate --method adapt-llm --gate_all_answers true``): every question's parametric,
NR and
context answers, its ``p(<RET>)`` and popularity, in the evaluation file's order, so no answer is generated again
(the ``records.jsonl`` that training jobs wrote before reads too). The
popularity policy retrieves when ``popularity < threshold``; the threshold is the one with the best accuracy on the
tuning slice (ties: the lowest, i.e. the fewest retrievals). Prints NR / AR / ADAPT-LLM / popularity (tuned, and
the paper's 707,000) on the test slice, and writes them as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from adaptive_rag.plumbing.cli import OneLineArgumentParser
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import PredictionRecord
from inference.adapt_gate.gate import GateConfig, GateRecord, format_table, redecide, summarize
from inference.adapt_gate.gate_eval import gate_record

PAPER_THRESHOLD = 707_000.0


# What every record needs here: the three answers redecide() picks from, the popularity the threshold tunes on.
# The question's id is "id" in predictions.jsonl, "question_id" in an older records.jsonl.
REQUIRED_FIELDS: dict[str, tuple[type, ...]] = {
    "id": (str, int), "question": (str,), "answers": (list,), "popularity": (int, float),
    "parametric_output": (str,), "closed_book_output": (str,), "context_output": (str,)}


def read_records(path: str | Path) -> list[GateRecord]:
    """The records of an evaluation with every answer; a record lacking a field this tool needs is a
    :class:`DataError` naming the file, the line and the field."""
    path = Path(path)
    names = {f.name for f in fields(GateRecord)} - {"inner", "inner_method"}
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataError(f"not UTF-8 ({err.reason})", source=f"{path}, line {line}") from None
    records = []
    for line_no, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"{path}, line {line_no}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"not JSON ({err.msg}, column {err.colno})", source=where) from None
        check_record(row, where)
        if "question_id" in row:  # records.jsonl, as training jobs wrote it before
            records.append(GateRecord(**{k: v for k, v in row.items() if k in names}))
        else:
            records.append(gate_record(PredictionRecord.from_dict(row, source=where)))
    if not records:
        raise DataError("no records", source=str(path))
    return records


def check_record(row: Any, where: str) -> None:
    if not isinstance(row, dict):
        raise DataError(f"expected a JSON object, got {type(row).__name__}", source=where)
    for key, types in REQUIRED_FIELDS.items():
        key = "question_id" if key == "id" and "question_id" in row else key
        value = row.get(key)
        if value is None:
            raise DataError("missing (this tool reads the predictions.jsonl of an ADAPT-LLM evaluation with every "
                            "answer: the training job's, or evaluate's with --gate_all_answers true)",
                            source=where, field=key)
        if not isinstance(value, types) or isinstance(value, bool):
            raise DataError(f"expected {' or '.join(t.__name__ for t in types)}, got {type(value).__name__}",
                            source=where, field=key)
    if not all(isinstance(a, str) for a in row["answers"]):
        raise DataError("expected a list of strings", source=where, field="answers")


def tune_threshold(records: Sequence[GateRecord], cfg: GateConfig | None = None) -> tuple[float, float]:
    """(threshold, accuracy) of the best popularity threshold on ``records``: candidates are every observed
    popularity plus infinity (always retrieve); 0 means never retrieve."""
    cfg = cfg or GateConfig()
    if any(r.popularity is None for r in records):
        raise ValueError("the popularity policy needs every record's popularity (PopQA's s_pop)")
    # One pass over the records sorted by popularity: threshold t retrieves exactly those with popularity < t.
    by_pop = sorted(zip(redecide(records, "always_retrieve", cfg), redecide(records, "never_retrieve", cfg),
                        strict=True), key=lambda pair: float(pair[0].popularity))
    candidates = sorted({0.0, math.inf, *(float(r.popularity) for r in records)})
    correct = sum(closed.correct for _, closed in by_pop)  # nobody below the smallest candidate
    below, best = 0, (0.0, -1.0)
    for threshold in candidates:
        while below < len(by_pop) and float(by_pop[below][0].popularity) < threshold:
            ctx, closed = by_pop[below]
            correct += ctx.correct - closed.correct
            below += 1
        acc = correct / max(1, len(by_pop))
        if acc > best[1]:
            best = (threshold, acc)
    return best


def report(records: Sequence[GateRecord], tune: slice, test: slice, cfg: GateConfig | None = None) -> dict[str, Any]:
    cfg = cfg or GateConfig()
    threshold, tune_acc = tune_threshold(records[tune], cfg)
    held = records[test]
    rows = {
        "NR (never retrieve)": summarize(redecide(held, "never_retrieve", cfg)),
        "AR (always retrieve)": summarize(redecide(held, "always_retrieve", cfg)),
        f"ADAPT-LLM ({cfg.gate_rule})": summarize(redecide(held, "adapt_llm", cfg)),
        f"popularity < {threshold:,.0f} (tuned)": summarize(
            redecide(held, "popularity", replace(cfg, popularity_threshold=threshold))),
        f"popularity < {PAPER_THRESHOLD:,.0f} (paper)": summarize(
            redecide(held, "popularity", replace(cfg, popularity_threshold=PAPER_THRESHOLD))),
    }
    return {"threshold": threshold, "tune_accuracy": tune_acc, "tune": [tune.start, tune.stop],
            "test": [test.start, test.stop], "rows": rows, "table": format_table(rows)}


def _slice(text: str) -> slice:
    try:
        start, stop = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected START:STOP, got '{text}'") from None
    if not 0 <= start < stop:
        raise argparse.ArgumentTypeError(f"expected 0 <= START < STOP, got '{text}'")
    return slice(start, stop)


def main(argv: list[str] | None = None) -> None:
    parser = OneLineArgumentParser(prog="python -m inference.commands.popularity_threshold",
                                   description=__doc__.splitlines()[0])
    parser.add_argument("records", help="predictions.jsonl of an ADAPT-LLM evaluation with every answer (or the "
                                        "records.jsonl of an older training job)")
    parser.add_argument("--tune", type=_slice, default=slice(0, 700), help="START:STOP of the tuning slice")
    parser.add_argument("--test", type=_slice, default=slice(700, 1000), help="START:STOP of the reported slice")
    parser.add_argument("--gate_rule", choices=["token", "threshold"], default="token")
    parser.add_argument("--ret_threshold", type=float, default=0.5)
    parser.add_argument("--json", default=None, help="also write the result here")
    args = parser.parse_args(argv)
    if not Path(args.records).is_file():
        parser.error(f"no such file: {args.records}")
    try:
        records = read_records(args.records)
        if args.test.stop > len(records) or args.tune.stop > len(records):
            raise DataError(f"has {len(records)} records; the slices need {max(args.test.stop, args.tune.stop)}",
                            source=args.records)
        result = report(records, args.tune, args.test, GateConfig(gate_rule=args.gate_rule,
                                                                  ret_threshold=args.ret_threshold))
    except DataError as err:
        parser.exit(2, f"error: {err}\n")
    print(f"popularity threshold tuned on {args.tune.start}-{args.tune.stop - 1}: {result['threshold']:,.0f} "
          f"(accuracy there {result['tune_accuracy']:.3f})")
    print(f"questions {args.test.start}-{args.test.stop - 1}:")
    print(result["table"])
    if args.json:
        try:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps({k: v for k, v in result.items() if k != "table"}, indent=2) + "\n")
        except OSError as err:
            parser.exit(2, f"error: cannot write --json {args.json}: {err.strerror or err}\n")


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    main()
    return 0


if __name__ == "__main__":
    sys.exit(cli())
