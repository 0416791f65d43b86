"""Agreement with the DRAGIN authors' own code, measured by one command: their ``main.py`` loop (oneal2000/DRAGIN at
the pinned commit, fetched into the data folder, never stored here) and the engine, on the same model, questions
and BM25 index; question by question: trigger round and position, every query, every document list, the final
text, EM/F1, retrievals, generated tokens and seconds; the rate of exact agreement for each.

    python -m data_builders.download dragin-code --output_dir data/        # their src/*.py at the pinned commit
    python -m data_builders.corpus --output_file runs/hotpotqa/corpus.jsonl ircot:PATH/dev_subsampled.jsonl
    python -m retrieval_adapt.build_index --corpus runs/hotpotqa/corpus.jsonl --kind bm25 \
        --bm25_scoring elasticsearch --output_dir runs/hotpotqa/bm25-es
    python bench/agreement_dragin.py --dataset PATH/dev_subsampled.jsonl --index runs/hotpotqa/bm25-es \
        --limit 64 --methods dragin --batch1 --json runs/bench/agreement_dragin.json

(``make agreement-dragin DATASET=... INDEX=...`` runs the last line.) Each side runs in its own process:
``bench/agreement_authors.py`` runs their loop unedited with the adaptations it names (printed with the table), and
the engine through ``python -m inference.commands.evaluate`` with ``--dragin_profile reference --prompt_source
authors --attention_pass authors --dtype float32 --sampling greedy`` on the same questions. Both sides use the
same index (the project's Elasticsearch-scored BM25), so retrieval differences come from the queries alone.

``--methods`` also takes their other rows: ``wo-rag`` (their BasicRAG), ``sr-rag`` (SingleRAG), ``fl-rag`` and
``fs-rag`` (FixLengthRAG), ``token-rag`` (TokenRAG, the FLARE row of their table). Headline ``ratio``: the share of
questions whose first DRAGIN query agrees (the first method's when DRAGIN is not run).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import agreement_compare as cmp
from harness import add_json_arg, load_1min, print_table, write_json

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
THEIR_FILES = ("data.py", "generate.py", "retriever.py", "main.py", "eval.py")
FETCH = "python -m data_builders.download dragin-code --output_dir data/"
FIX_LENGTH = 32  # their FL-RAG configs lack fix_length (FixLengthRAG reads it); the engine's --fixed_length default

# method -> (their config's method and extra keys, the engine's extra switches); the settings of their
# config/Llama2-7b-chat/HotpotQA/*.json, the row the engine's reference profile picks for a model not named 13b/vicuna
METHODS: dict[str, tuple[dict, list[str]]] = {
    "dragin": ({"method": "dragin", "query_formulation": "real_words", "retrieve_keep_top_k": 35,
                "hallucination_threshold": 0.8, "check_real_words": True, "retriever": "BM25"},
               ["--attention_pass", "authors"]),
    "wo-rag": ({"method": "non-retrieval", "query_formulation": "direct"}, []),
    "sr-rag": ({"method": "single-retrieval", "query_formulation": "direct", "retriever": "BM25"}, []),
    "fl-rag": ({"method": "fix-length-retrieval", "query_formulation": "direct", "retriever": "BM25",
                "fix_length": FIX_LENGTH}, ["--fixed_length", str(FIX_LENGTH)]),
    "fs-rag": ({"method": "fix-sentence-retrieval", "query_formulation": "direct", "retriever": "BM25"}, []),
    "token-rag": ({"method": "token", "query_formulation": "direct", "retriever": "BM25",
                   "hallucination_threshold": 0.08, "sentence_solver": "avg"}, []),
}


def their_code_missing(folder: Path) -> list[str]:
    return [f for f in THEIR_FILES if not (folder / f).is_file()]


def write_their_data(dataset: str, start: int, limit: int, out: Path) -> list:
    """The questions as their HotpotQA class reads them (``hotpotqa-dev.json``: _id, question, answer, context)."""
    from data_builders.readers import read_qa

    examples = read_qa(dataset)[start:start + limit]
    out.mkdir(parents=True, exist_ok=True)
    (out / "hotpotqa-dev.json").write_text(json.dumps(
        [{"_id": ex.id, "question": ex.question, "answer": ex.answers[0] if ex.answers else "", "context": []}
         for ex in examples]))
    return examples


def their_config(method: str, model_path: str, data_path: Path, limit: int, out: Path) -> dict:
    extra, _ = METHODS[method]
    return {"model_name_or_path": model_path, "dataset": "hotpotqa", "data_path": str(data_path), "fewshot": 8,
            "sample": limit, "shuffle": False, "generate_max_length": 100, "output_dir": str(out),
            "es_index_name": "wiki", "retrieve_topk": 3, "use_counter": True, **extra}


def run(cmd: list[str], log: Path) -> float:
    start = time.perf_counter()
    with open(log, "w") as f:
        done = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log.read_text().splitlines()[-15:]
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed (exit {done.returncode}); log {log}:\n" + "\n".join(tail))
    return time.perf_counter() - start


def run_authors(method: str, args, work: Path, model_path: str) -> Path:
    trace = work / "authors.jsonl"
    if args.reuse and trace.is_file():
        return trace
    out = work / "authors_out"
    shutil.rmtree(out, ignore_errors=True)
    config = work / "config.json"
    config.write_text(json.dumps(their_config(method, model_path, args.workdir / "data", args.limit, out), indent=1))
    load = load_1min()
    seconds = run([sys.executable, str(HERE / "agreement_authors.py"), "authors", "--code", str(args.authors_code),
                   "--config", str(config), "--index", str(args.index), "--trace", str(trace)], work / "authors.log")
    print(f"  {method}: their code {seconds:.0f} s (load {load} -> {load_1min()})", flush=True)
    return trace


def run_engine(method: str, args, work: Path, batch: int, standin: bool) -> Path:
    out = work / f"engine_b{batch}"
    if args.reuse and (out / "predictions.jsonl").is_file():
        return out / "predictions.jsonl"
    shutil.rmtree(out, ignore_errors=True)
    _, switches = METHODS[method]
    cmd = [sys.executable, str(HERE / "agreement_authors.py"), "engine", *(["--standin"] if standin else []), "--",
           "--model", args.model, "--method", method, "--dragin_profile", "reference", "--prompt_style", "paper",
           "--prompt_source", "authors", "--authors_code", str(args.authors_code), "--demos", "hotpotqa",
           "--dtype", "float32", "--sampling", "greedy", "--dataset", args.dataset, "--start", str(args.start),
           "--limit", str(args.limit), "--index", str(args.index), "--batch_size", str(batch),
           "--output_dir", str(out), "--no_show_progress", *switches]
    load = load_1min()
    seconds = run(cmd, work / f"engine_b{batch}.log")
    print(f"  {method}: engine batch {batch} {seconds:.0f} s (load {load} -> {load_1min()})", flush=True)
    return out / "predictions.jsonl"


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def retriever_effect(args, queries: list[str]) -> dict:
    """Their queries searched in both indexes: how often the top-3 ids agree (the scoring's effect alone)."""
    from retrieval_adapt.loading import load_retriever

    queries = [q for q in queries if q.strip()]
    main_hits = load_retriever(args.index).search(queries, 3)
    other_hits = load_retriever(args.other_index).search(queries, 3)
    same_list = sum([h.passage.id for h in a] == [h.passage.id for h in b] for a, b in zip(main_hits, other_hits))
    same_set = sum({h.passage.id for h in a} == {h.passage.id for h in b} for a, b in zip(main_hits, other_hits))
    n = max(1, len(queries))
    print(f"\nRetriever's effect alone: their {len(queries)} queries, {args.index} vs {args.other_index}: the same "
          f"top-3 list for {same_list} ({same_list / n:.1%}), the same top-3 set for {same_set} ({same_set / n:.1%})")
    return {"other_index_queries": len(queries), "other_index_same_top3_list": same_list,
            "other_index_same_top3_set": same_set}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="HotpotQA dev questions (IRCoT's dev_subsampled.jsonl)")
    parser.add_argument("--index", required=True,
                        help="BM25 index over the file's paragraphs, built with --bm25_scoring elasticsearch")
    parser.add_argument("--authors_code", type=Path, default=ROOT / "data" / "dragin-code",
                        help="their fetched src/ files (python -m data_builders.download dragin-code)")
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--limit", type=int, default=64)
    parser.add_argument("--methods", default="dragin", help=f"comma-separated: {', '.join(METHODS)}")
    parser.add_argument("--batch_size", type=int, default=16, help="the engine's batch")
    parser.add_argument("--batch1", action="store_true", help="also run the engine at batch 1 (near-ties apart)")
    parser.add_argument("--engine_rules", choices=("standin", "project"), default="standin",
                        help="without en_core_web_sm: the engine gets the same spaCy stand-in as their code "
                             "(standin), or falls back to the project's rules (project)")
    parser.add_argument("--workdir", "--work", type=Path, default=ROOT / "runs" / "agreement")
    parser.add_argument("--reuse", action="store_true", help="reuse the runs already in --workdir")
    parser.add_argument("--per_question", action="store_true", help="print every method's question table")
    parser.add_argument("--other_index", default=None,
                        help="a second index over the same corpus (e.g. the default bm25s scoring): the share of "
                             "their queries whose top-3 ids it returns as the main index does (the retriever's "
                             "effect alone)")
    add_json_arg(parser)
    args = parser.parse_args()
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        parser.error(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(METHODS)}")
    missing = their_code_missing(args.authors_code)
    if missing:
        print(f"their code is not in {args.authors_code} ({', '.join(missing)} missing): run `{FETCH}` "
              "(or pass --authors_code)")
        sys.exit(1)
    try:
        import spacy  # noqa: F401
    except ImportError:
        print("their code needs spaCy: pip install -e '.[dragin]' (spaCy and its en_core_web_sm)")
        sys.exit(1)
    sys.path.insert(0, str(HERE))
    from agreement_authors import SPACY_ADAPTATION, spacy_model_installed

    from adaptive_rag.lm.models import resolve_model

    args.index, args.dataset = Path(args.index).resolve(), str(Path(args.dataset).resolve())
    args.authors_code, args.workdir = args.authors_code.resolve(), args.workdir.resolve()
    examples = write_their_data(args.dataset, args.start, args.limit, args.workdir / "data")
    golds = {ex.id: ex.answers for ex in examples}
    model_path = resolve_model(args.model)
    standin = args.engine_rules == "standin" and not spacy_model_installed()
    print(f"{len(examples)} questions ({args.start}-{args.start + len(examples) - 1}), model {args.model}, index "
          f"{args.index}, engine batch {args.batch_size}{' and 1' if args.batch1 else ''}; load {load_1min()}")
    if not spacy_model_installed():
        print("en_core_web_sm is not installed (pip install -e '.[dragin]'): " + (
            SPACY_ADAPTATION if standin else "their code gets the stand-in pipeline, the engine the project's rules"))

    summaries, figures, header, queries_seen = {}, {}, None, []
    for method in methods:
        work = args.workdir / method
        work.mkdir(parents=True, exist_ok=True)
        trace = run_authors(method, args, work, model_path)
        header, records = cmp.read_trace(trace)
        theirs = cmp.authors_sides(records, golds)
        queries_seen.extend(q for side in theirs for q in side.queries)
        batches = [args.batch_size] + ([1] if args.batch1 and args.batch_size != 1 else [])
        engine = {b: cmp.engine_sides(read_jsonl(run_engine(method, args, work, b, standin))) for b in batches}
        for b in batches:
            rows = cmp.compare(theirs, engine[b])
            label = method if b == args.batch_size else f"{method} (batch 1)"
            summaries[label] = s = cmp.summary(rows)
            if b == args.batch_size and (method == "dragin" or args.per_question):
                print(f"\n{label}: question by question (A: their code, E: the engine; trigger = (round, position "
                      "in tokens) of the first retrieval)")
                print_table(*cmp.question_table(rows))
            prefix = method.replace("-", "_") + ("" if b == args.batch_size else "_b1")
            figures.update({f"{prefix}_{k}": v for k, v in s.items()})
        if len(batches) > 1:
            flipped = cmp.flips(engine[batches[0]], engine[1])
            figures[f"{method.replace('-', '_')}_batch_flips"] = len(flipped)
            summaries[method]["batch_flips"] = len(flipped)
            print(f"{method}: engine batch {batches[0]} vs batch 1 differ on {len(flipped)} question(s)"
                  + (f": {', '.join(flipped)}" if flipped else ""))

    if args.other_index:
        figures.update(retriever_effect(args, queries_seen))
    print("\nAdaptations of their code (bench/agreement_authors.py):")
    for name, what in (header or {}).get("adaptations", {}).items():
        print(f"  {name}: {what}")
    print(f"\nAgreement, exact, per method (A/E: their code / the engine; load now {load_1min()}):")
    print_table(*cmp.method_table(summaries))
    headline = "dragin" if "dragin" in summaries else methods[0]
    figures.update(ratio=summaries[headline]["first_query_rate"],
                   ratio_of=f"{headline}: share of questions whose first retrieval query is identical",
                   questions=len(examples), start=args.start, batch_size=args.batch_size, model=args.model,
                   engine_rules="standin" if standin else ("en_core_web_sm" if spacy_model_installed() else "project"),
                   load_1min=load_1min())
    write_json(args.json, figures)


if __name__ == "__main__":
    main()
