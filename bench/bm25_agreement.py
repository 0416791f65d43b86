"""Which passages each BM25 brings back: the bm25s ``elasticsearch`` setting against real Lucene (the ``lucene``
kind), and both against the default bm25s setting, on HotpotQA's paragraphs and questions.

    python bench/bm25_agreement.py --json runs/bench/bm25_agreement.json
    python bench/bm25_agreement.py --questions ../shared/data/hotpotqa/dev_subsampled.jsonl --no_lucene

The corpus is every paragraph the question file ships (IRCoT's HotpotQA dev subsample: 500 questions, 4,858
paragraphs), each question is a query. Per pair of settings: the share of questions with the same top-1 passage,
the same top-3 set, and the mean Kendall tau of the two top-10 rankings (over the union of both lists, a passage
missing from one ranked after its last). Questions where the elasticsearch setting and Lucene disagree on the top-3
set are explained: a query or passage the two analyzers tokenize differently, a tie at the cut, or a score
difference left (float rounding). Lucene needs the [lucene] extra; without it the pairs with Lucene are left out.
Headline ``ratio``: same top-3 set, elasticsearch setting vs Lucene (vs the default when Lucene is absent).

    python bench/bm25_agreement.py --world 1000000 --json runs/bench/bm25_scale.json

``--world N`` measures scale instead: the embedded world scaled to N passages (``bench/scale.py``'s corpus), each
setting built by ``python -m retrieval_adapt.build_index`` and queried by ``python -m retrieval_adapt.search`` in its
own process under ``/usr/bin/time`` (wall time, peak RSS, the JVM's included), then a process that loads the index
and answers ``--queries`` world questions (first answer, queries a second, best of ``--repeats``), and the top-3
agreement of those answers. Headline ``ratio`` there: Lucene's build time over the elasticsearch setting's.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

import numpy as np
from harness import add_json_arg, load_1min, print_table, write_json
from scale import du, measured
from scipy.stats import kendalltau

from data_builders.corpus import pool_corpus
from data_builders.readers import read_corpus, read_qa
from retrieval_adapt import lucene
from retrieval_adapt.bm25 import BM25Retriever
from retrieval_adapt.es_analysis import EnglishAnalyzer

DEPTH = 10


def ranked_ids(retriever, queries: list[str], k: int) -> tuple[list[list[str]], list[list[float]], float]:
    start = time.perf_counter()
    hits = retriever.search(queries, k)
    return [[h.passage.id for h in row] for row in hits], [[h.score for h in row] for row in hits], \
        time.perf_counter() - start


def kendall(a: list[str], b: list[str]) -> float:
    union = list(dict.fromkeys(a + b))
    if len(union) < 2:
        return 1.0
    ra = [a.index(x) if x in a else len(a) for x in union]
    rb = [b.index(x) if x in b else len(b) for x in union]
    tau = kendalltau(ra, rb).statistic
    return 1.0 if np.isnan(tau) else float(tau)


def agreement(a: list[list[str]], b: list[list[str]], k: int) -> dict[str, float]:
    return {"top1": float(np.mean([x[:1] == y[:1] for x, y in zip(a, b)])),
            f"top{k}_set": float(np.mean([set(x[:k]) == set(y[:k]) for x, y in zip(a, b)])),
            "kendall_tau": float(np.mean([kendall(x, y) for x, y in zip(a, b)]))}


class LuceneAnalyzer:
    """Lucene's own EnglishAnalyzer, to tell analyzer differences from scoring ones."""

    def __init__(self):
        j = lucene.java()  # before any import of jnius: that starts the JVM, without Lucene on its classpath
        self.analyzer = j.EnglishAnalyzer()
        self.term = j.autoclass("org.apache.lucene.analysis.tokenattributes.CharTermAttribute")

    def analyze(self, text: str) -> list[str]:
        stream = self.analyzer.tokenStream("f", text)
        term = stream.addAttribute(self.term)
        stream.reset()
        out = []
        while stream.incrementToken():
            out.append(term.toString())
        stream.end()
        stream.close()
        return out


def explain(question: str, es: tuple[list[str], list[float]], lu: tuple[list[str], list[float]], by_id, ours,
            theirs, k: int) -> str:
    """Why the top-k sets differ: analysis, a tie at the cut, or what is left (scores)."""
    if ours.analyze(question) != theirs.analyze(question):
        return "query_analysis"
    for pid in set(es[0][:k]) ^ set(lu[0][:k]):
        p = by_id[pid]
        if any(ours.analyze(t) != theirs.analyze(t) for t in (p.title, p.text)):
            return "passage_analysis"
    for _, scores in (es, lu):
        if len(scores) > k and abs(scores[k - 1] - scores[k]) <= 1e-6 * max(abs(scores[k - 1]), 1e-9):
            return "tie_at_cut"
    return "score"


# build_index flags per setting
BUILDS = {"default": ["--kind", "bm25"], "elasticsearch": ["--kind", "bm25", "--bm25_scoring", "elasticsearch"],
          "lucene": ["--kind", "lucene"]}


def serve(index: str, queries_file: str, out: str, repeats: int) -> None:
    """Child mode: load the index, first answer, queries a second (best of ``repeats``); the top-10 ids to ``out``."""
    t0 = time.perf_counter()
    from retrieval_adapt.search import open_index

    retriever = open_index(index)
    queries = json.loads(Path(queries_file).read_text())
    retriever.search(queries[:1], DEPTH)
    first = time.perf_counter() - t0
    best, hits = float("inf"), []
    for _ in range(repeats):
        start = time.perf_counter()
        hits = retriever.search(queries, DEPTH)
        best = min(best, time.perf_counter() - start)
    Path(out).write_text(json.dumps({"first_answer_s": first, "qps": len(queries) / best,
                                     "ids": [[h.passage.id for h in row] for row in hits]}))


def scale(n: int, n_queries: int, repeats: int, chunk_size: int, work: Path, keep: bool) -> dict:
    from data_builders.readers import write_passages_jsonl
    from data_builders.world import build_world, scale_passages

    work.mkdir(parents=True, exist_ok=True)
    world = build_world()
    questions = [q.question for q in world.single_hop + world.two_hop + world.common_knowledge]
    queries_file = work / "queries.json"
    queries_file.write_text(json.dumps(random.Random(0).choices(questions, k=n_queries)))
    corpus = work / f"corpus-{n}.jsonl"
    write_passages_jsonl(scale_passages(world, n), corpus)
    del world
    settings = [s for s in BUILDS if s != "lucene" or lucene.available()]
    if "lucene" not in settings:
        print(f"lucene left out: {lucene.EXTRA}")
    results: dict = {"passages": n, "queries": n_queries, "chunk_size": chunk_size}
    rows, ids = [], {}
    py = sys.executable
    for name in settings:
        index = work / f"{name}-{n}"
        shutil.rmtree(index, ignore_errors=True)
        load_before = load_1min()
        chunk = ["--chunk_size", str(chunk_size)] if name != "lucene" else []
        build_s, build_gb, _ = measured([py, "-m", "retrieval_adapt.build_index", "--corpus", str(corpus),
                                         "--output_dir", str(index), *BUILDS[name], *chunk])
        query = json.loads(queries_file.read_text())[0]
        search_s, search_gb, _ = measured([py, "-m", "retrieval_adapt.search", str(index), query,
                                           "--top_k", str(DEPTH)])
        answers = work / f"{name}-answers.json"
        _, serve_gb, _ = measured([py, __file__, "--serve", str(index), str(queries_file), str(answers),
                                   "--repeats", str(repeats)])
        served = json.loads(answers.read_text())
        ids[name] = served["ids"]
        row = {"build_s": build_s, "build_peak_gb": build_gb, "index_gb": du(index), "search_one_query_s": search_s,
               "search_peak_gb": search_gb, "first_answer_s": served["first_answer_s"], "qps": served["qps"],
               "serve_peak_gb": serve_gb, "load_1min": max(load_before, load_1min())}
        results.update({f"{name}_{k}": v for k, v in row.items()})
        rows.append([name, *row.values()])
        if not keep:
            shutil.rmtree(index, ignore_errors=True)
        print(f"done {name}: {row}", file=sys.stderr, flush=True)
    if not keep:
        corpus.unlink()
    print(f"{n} world passages, {n_queries} queries")
    print_table(["setting", "build s", "build peak GB", "index GB", "1 query s", "its peak GB", "first answer s",
                 "q/s", f"{n_queries} q peak GB", "load"], rows)
    agree_rows = []
    for a, b in combinations(settings, 2):
        agree = agreement(ids[a], ids[b], 3)
        agree_rows.append([f"{a} vs {b}", agree["top1"], agree["top3_set"], agree["kendall_tau"]])
        results.update({f"{a}_vs_{b}_{k}": v for k, v in agree.items()})
    print_table(["settings", "same top-1", "same top-3 set", f"Kendall tau (top-{DEPTH})"], agree_rows, ".3f")
    if "lucene" in settings:
        results["ratio"] = results["lucene_build_s"] / results["elasticsearch_build_s"]
        results["ratio_of"] = "lucene build seconds / elasticsearch setting build seconds"
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", default="../shared/data/hotpotqa/dev_subsampled.jsonl",
                        help="a HotpotQA question file that ships its paragraphs (IRCoT's dev_subsampled.jsonl)")
    parser.add_argument("--format", default="ircot", help="its read_corpus format")
    parser.add_argument("--top_k", "-k", type=int, default=3)
    parser.add_argument("--no_lucene", "--no-lucene",
                        action="store_true", help="leave Lucene out even when the extra is there")
    parser.add_argument("--world", type=int, default=0, help="measure scale on the world scaled to this many passages")
    parser.add_argument("--queries", type=int, default=200, help="--world: questions asked")
    parser.add_argument("--repeats", type=int, default=3, help="--world: timed runs of the questions (best of)")
    parser.add_argument("--chunk_size", "--chunk-size",
                        type=int, default=100_000, help="--world: the bm25s builds' chunk size")
    parser.add_argument("--workdir", default="runs/bench/bm25_agreement", help="--world: corpora and indexes")
    parser.add_argument("--keep", action="store_true", help="--world: keep the corpus and indexes")
    parser.add_argument("--serve", nargs=3, metavar=("INDEX", "QUERIES", "OUT"), help=argparse.SUPPRESS)
    add_json_arg(parser)
    args = parser.parse_args()
    if args.serve:
        serve(*args.serve, args.repeats)
        return
    if args.world:
        write_json(args.json, scale(args.world, args.queries, args.repeats, args.chunk_size, Path(args.workdir),
                                    args.keep))
        return

    passages = pool_corpus([read_corpus(args.questions, format=args.format)])
    questions = [q.question for q in read_qa(args.questions)]
    print(f"{len(passages)} passages, {len(questions)} questions; load {load_1min()}")
    runs, build_s = {}, {}
    start = time.perf_counter()
    default = BM25Retriever.build(passages, show_progress=False)
    build_s["default"] = time.perf_counter() - start
    start = time.perf_counter()
    es = BM25Retriever.build(passages, scoring="elasticsearch")
    build_s["elasticsearch"] = time.perf_counter() - start
    settings = {"default": default, "elasticsearch": es}
    tmp = None
    if lucene.available() and not args.no_lucene:
        tmp = tempfile.TemporaryDirectory()
        start = time.perf_counter()
        settings["lucene"] = lucene.LuceneRetriever.build(passages, f"{tmp.name}/idx")
        build_s["lucene"] = time.perf_counter() - start
    elif not args.no_lucene:
        print(f"lucene left out: {lucene.EXTRA}")
    search_s = {}
    for name, retriever in settings.items():
        ids, scores, search_s[name] = ranked_ids(retriever, questions, DEPTH)
        runs[name] = (ids, scores)

    results: dict[str, float | int | str] = {"passages": len(passages), "questions": len(questions), "k": args.top_k,
                                              "load_1min": load_1min()}
    rows = []
    for a, b in combinations(["elasticsearch", "lucene", "default"], 2):
        if a not in runs or b not in runs:
            continue
        agree = agreement(runs[a][0], runs[b][0], args.top_k)
        rows.append([f"{a} vs {b}", agree["top1"], agree[f"top{args.top_k}_set"], agree["kendall_tau"]])
        for key, value in agree.items():
            results[f"{a}_vs_{b}_{key}"] = value
    print_table(["settings", "same top-1", f"same top-{args.top_k} set", f"Kendall tau (top-{DEPTH})"], rows, ".3f")
    print_table(["setting", "build s", f"search s ({len(questions)} queries)"],
                [[n, build_s[n], search_s[n]] for n in settings], ".2f")
    for n in settings:
        results[f"{n}_build_s"], results[f"{n}_search_s"] = build_s[n], search_s[n]

    if "lucene" in runs:
        ours, theirs = EnglishAnalyzer(), LuceneAnalyzer()
        by_id = {p.id: p for p in passages}
        causes: dict[str, int] = {}
        for i, q in enumerate(questions):
            e = (runs["elasticsearch"][0][i], runs["elasticsearch"][1][i])
            lu = (runs["lucene"][0][i], runs["lucene"][1][i])
            if set(e[0][:args.top_k]) != set(lu[0][:args.top_k]):
                cause = explain(q, e, lu, by_id, ours, theirs, args.top_k)
                causes[cause] = causes.get(cause, 0) + 1
                print(f"differs ({cause}): {q}\n  elasticsearch {list(zip(e[0][:4], np.round(e[1][:4], 4)))}\n"
                      f"  lucene        {list(zip(lu[0][:4], np.round(lu[1][:4], 4)))}")
        print("top-3 differences, by cause:", causes or "none")
        for cause, n in causes.items():
            results[f"differs_{cause}"] = n
        # how far the two scorings are apart where they agree: the largest relative score difference
        diffs = [abs(x - y) / max(abs(y), 1e-9) for (ia, sa), (ib, sb) in
                 zip(zip(*runs["elasticsearch"]), zip(*runs["lucene"])) if ia == ib for x, y in zip(sa, sb)]
        results["max_rel_score_diff"] = float(max(diffs)) if diffs else 0.0
        print(f"largest relative score difference where the rankings agree: {results['max_rel_score_diff']:.2e}")
        settings["lucene"].close()
        tmp.cleanup()
    key = "elasticsearch_vs_lucene" if "lucene" in runs else "elasticsearch_vs_default"
    results["ratio"] = results[f"{key}_top{args.top_k}_set"]
    results["ratio_of"] = f"{key}: share of questions with the same top-{args.top_k} set"
    print(f"ratio ({results['ratio_of']}): {results['ratio']:.3f}; load {load_1min()}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
