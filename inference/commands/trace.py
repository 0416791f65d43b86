"""Why did retrieval fire? An HTML view of one question: generated words coloured by RIND score, the trigger
points, the discarded text, the queries formed and the documents each round saw.

    python -m inference.commands.trace --dataset world-two-hop --question_index 3 --theta 0.5 \\
        --output_file runs/trace.html
    python -m inference.commands.trace --question "Who founded Ludisk Records?" --output_file runs/trace.html
    python -m inference.commands.trace --predictions runs/eval/dragin/predictions.jsonl --question_id ID \\
        --output_file t.html

The third form renders a record saved by ``inference.commands.evaluate`` run with ``--keep_signals true``.
"""

from __future__ import annotations

import html
import sys
from dataclasses import dataclass, field
from pathlib import Path

from adaptive_rag.lm.models import load_causal_lm
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.record_log import RecordLog
from adaptive_rag.plumbing.records import PredictionRecord, QAExample
from inference.commands.eval_checks import check_index_folder
from inference.commands.eval_data import load_eval_retriever, question_at
from inference.commands.eval_folder import torn_note
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig


@dataclass
class TraceConfig:
    model: str = "smollm2-135m"
    dataset: str = "world-two-hop"
    question_index: int = 0
    question: str | None = None  # ask this instead of a dataset question
    index: str | None = None
    predictions: str | None = None  # render a saved record instead of running the model
    question_id: str | None = None
    output_file: str = field(default="runs/trace.html", metadata={"aliases": ["--out"]})


def _colour(score: float, theta: float) -> str:
    """White at 0, full red at θ and above: the eye finds the words that came near firing."""
    level = max(0.0, min(1.0, score / theta if theta > 0 else float(score > 0)))
    return f"rgba(220, 40, 40, {0.08 + 0.8 * level:.2f})"


LEGEND = (
    '<p class=legend>Each word is shaded by its RIND score (entropy × attention later tokens paid it, × 0 for a '
    'stopword under the paper profile): '
    f'<span style="background:{_colour(0.0, 1.0)}">&nbsp;0&nbsp;</span> '
    f'<span style="background:{_colour(0.5, 1.0)}">&nbsp;θ/2&nbsp;</span> '
    f'<span style="background:{_colour(1.0, 1.0)}">&nbsp;≥ θ&nbsp;</span>; '
    '<span style="outline:2px solid black">&nbsp;outlined&nbsp;</span> = the word that fired a retrieval; '
    '<span style="text-decoration:line-through;opacity:0.6">&nbsp;struck through&nbsp;</span> = generated, then '
    'discarded by the retrieval; hover a word for its entropy, attention and probability.</p>')


def render(record: PredictionRecord) -> str:
    parts = [f"<h2>{html.escape(record.question)}</h2>",
             f"<p>gold: {html.escape(' | '.join(record.answers))}<br>output: <b>"
             f"{html.escape(record.output)}</b></p>", LEGEND]
    for rnd in record.signals:
        theta, trig = rnd["theta"], rnd.get("trigger")
        docs = ", ".join(html.escape(d["title"] or d["id"]) for d in rnd["docs"]) or "none"
        parts.append(f"<h3>round {rnd['round']}</h3><p class=docs>documents in the prompt: {docs}</p><p>")
        for w in rnd["words"]:
            discarded = w["first_token"] >= rnd["kept_tokens"]
            is_trigger = trig is not None and w["first_token"] == trig["token"]
            title = (f"RIND {w['score']:.3f} = H {w['entropy']:.3f} × a_max {w['attention']:.3f} × s "
                     f"{int(w['content'])}; min p {w['min_prob']:.3f}")
            style = f"background:{_colour(w['score'], theta)}"
            style += ";outline:2px solid black" if is_trigger else ""
            style += ";text-decoration:line-through;opacity:0.6" if discarded else ""
            text = html.escape(w["text"]).replace("\n", "<br>")
            parts.append(f'<span style="{style}" title="{html.escape(title)}">{text}</span>')
        parts.append("</p>")
        if trig is not None:
            parts.append(f"<p>&#9889; fired at token {trig['token']} (score {trig['score']:.3f} &gt; θ {theta}); "
                         f"query: <code>{html.escape(trig['query'] or '')}</code></p>")
    style = "body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.9}span{padding:1px 0}"
    return f"<!doctype html><meta charset=utf-8><title>RIND trace</title><style>{style}</style>" + "".join(parts)


def trace_record(cfg: TraceConfig, method: MethodConfig, prompt: PromptConfig,
                 engine: EngineConfig) -> PredictionRecord:
    if cfg.predictions:
        return saved_record(Path(cfg.predictions), cfg.question_id)
    if cfg.question:
        example = QAExample("trace", cfg.question, ["?"])
    else:
        example = question_at(cfg.dataset, cfg.question_index)  # out of range: one line, before the model
    if cfg.index:
        check_index_folder(cfg.index)  # a run folder, a missing index: one line before the model loads
    model, tokenizer = load_causal_lm(cfg.model)
    retriever = load_eval_retriever(cfg.index, cfg.dataset)
    engine.keep_signals = True
    eng = DynamicRAGEngine(model, tokenizer, retriever, PromptBuilder(tokenizer, prompt), method, engine)
    return eng.run([example], show_progress=False)[0]


def saved_record(predictions: Path, question_id: str | None) -> PredictionRecord:
    """Question ``question_id``'s record in a predictions file (or a run folder's predictions.jsonl), read as the
    other readers of a run read it: a torn last line is left out and said on stderr, the file untouched."""
    path = predictions / "predictions.jsonl" if predictions.is_dir() else predictions
    if not path.is_file():
        raise ConfigError(f"--predictions {predictions}: no such file" + (" (a folder without predictions.jsonl)"
                                                                          if predictions.is_dir() else ""))
    if question_id is None:
        raise ConfigError("--predictions needs --question_id (the id of the record to render)")
    log = RecordLog(path, key="id")
    records = log.read(repair=False)
    if log.torn_bytes:
        print(f"note: {torn_note(path.parent, {path.name: log.torn_bytes}, len(records))}", file=sys.stderr)
    for n, rec in enumerate(records, 1):
        if rec["id"] == question_id:
            record = PredictionRecord.from_dict(rec, source=f"{path}, record {n}")
            if not record.signals:
                raise ConfigError(f"record {question_id} of {path} has no signals: evaluate with --keep_signals true")
            return record
    raise ConfigError(f"question id {question_id} not in {path} ({len(records)} records)")


def main(argv: list[str] | None = None) -> None:
    cfg, method, prompt, engine = parse_config((TraceConfig, MethodConfig, PromptConfig, EngineConfig), argv,
                                               prog="python -m inference.commands.trace")
    record = trace_record(cfg, method, prompt, engine)
    Path(cfg.output_file).parent.mkdir(parents=True, exist_ok=True)
    Path(cfg.output_file).write_text(render(record), encoding="utf-8")
    print(f"{len(record.retrievals)} retrievals; trace written to {cfg.output_file}")


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    return run_cli(main)


if __name__ == "__main__":
    sys.exit(cli())
