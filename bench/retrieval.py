"""Retrieval throughput: bm25s against rank_bm25 (baseline) on the same corpus and queries; dense encoding; faiss.

    python bench/retrieval.py --json runs/bench/retrieval.json
    python bench/retrieval.py --world_size 100000 --queries 200 --shared_data_dir ../shared/data

Corpora: (a) the pooled real corpus from ``../shared/data`` when present (~20k passages), (b) the embedded world
scaled to ``--world_size`` passages (≥ 100k by default). Both BM25 libraries get the same pre-tokenised text
(bm25s' tokenizer: stopwords removed, Snowball stemming), so the comparison is index build + scoring only.
Headline ``ratio``: bm25s query throughput ÷ rank_bm25 query throughput on the scaled world.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from harness import add_json_arg, load_1min, timed, write_json


def bench_bm25(name: str, texts: list[str], queries: list[str], rank_queries: int) -> dict[str, float]:
    from rank_bm25 import BM25Okapi

    stemmer = Stemmer.Stemmer("english")
    tok = lambda xs: bm25s.tokenize(xs, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)  # noqa: E731
    corpus_tokens, t_tok = timed(lambda: tok(texts))
    query_tokens = tok(queries)
    model = bm25s.BM25()
    _, t_build = timed(lambda: model.index(corpus_tokens, show_progress=False))
    (res, _), t_query = timed(lambda: model.retrieve(query_tokens, k=10, show_progress=False))
    rank, t_rank_build = timed(lambda: BM25Okapi(corpus_tokens))
    # rank_bm25 scores every document in Python per query: time a subset and report per-query throughput.
    sub = query_tokens[:rank_queries]
    rank_top, t_rank_query = timed(lambda: [np.argsort(-rank.get_scores(q))[:10] for q in sub])
    agree = np.mean([len(set(res[i][:10].tolist()) & set(rank_top[i].tolist())) / 10 for i in range(len(sub))])
    row = {
        f"{name}_passages": len(texts), f"{name}_tokenize_s": t_tok,
        f"{name}_bm25s_build_s": t_build, f"{name}_rank_bm25_build_s": t_rank_build,
        f"{name}_bm25s_qps": len(queries) / t_query, f"{name}_rank_bm25_qps": len(sub) / t_rank_query,
        f"{name}_top10_overlap": float(agree),
    }
    row[f"{name}_build_ratio"] = t_rank_build / t_build
    row[f"{name}_query_ratio"] = row[f"{name}_bm25s_qps"] / row[f"{name}_rank_bm25_qps"]
    return row


def bench_dense(n_encode: int, n_vectors: int, n_queries: int) -> dict[str, float]:
    import faiss

    from data_builders.world import build_world
    from retrieval_adapt.dense import FaissOptions, build_faiss
    from retrieval_adapt.encoders import MeanPoolingEncoder

    texts = [p.contents for p in build_world().passages][:n_encode]
    enc = MeanPoolingEncoder.from_name("minilm")
    emb, t_enc = timed(lambda: enc.encode(texts, batch_size=64))
    rng = np.random.default_rng(0)
    base = rng.standard_normal((n_vectors, emb.shape[1])).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    queries = base[rng.choice(n_vectors, n_queries, replace=False)] + 0.05 * rng.standard_normal(
        (n_queries, emb.shape[1])).astype(np.float32)
    row: dict[str, float] = {"dense_encode_passages_per_s": len(texts) / t_enc, "faiss_vectors": n_vectors}
    flat_ids = None
    for kind in ("flat", "hnsw"):
        index, t_build = timed(lambda k=kind: build_faiss(base, FaissOptions(kind=k)))
        (_, ids), t_q = timed(lambda i=index: i.search(queries, 10))
        row[f"faiss_{kind}_build_s"] = t_build
        row[f"faiss_{kind}_qps"] = n_queries / t_q
        if kind == "flat":
            flat_ids = ids
        else:
            row["faiss_hnsw_recall10_vs_flat"] = float(np.mean([len(set(a) & set(b)) / 10
                                                                for a, b in zip(ids, flat_ids)]))
    row["faiss_threads"] = faiss.omp_get_max_threads()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world_size", "--world-size", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=500)
    parser.add_argument("--rank_queries", "--rank-queries",
                        type=int, default=50, help="queries timed on rank_bm25 (slow)")
    parser.add_argument("--shared_data_dir", "--shared-data",
                        default=None, help="../shared/data (default: found next to the repo)")
    parser.add_argument("--encode", type=int, default=256, help="passages encoded with minilm")
    parser.add_argument("--faiss_vectors", "--faiss-vectors", type=int, default=100_000)
    add_json_arg(parser)
    args = parser.parse_args()

    from data_builders.corpus import find_shared_data_dir, pooled_shared_corpus
    from data_builders.world import build_world, scale_passages

    results: dict[str, float] = {}
    world = build_world()
    questions = [q.question for q in world.single_hop + world.two_hop + world.common_knowledge]
    shared = Path(args.shared_data_dir) if args.shared_data_dir else find_shared_data_dir()
    if shared and shared.exists():
        real = pooled_shared_corpus(shared)
        queries = random.Random(0).choices(questions, k=args.queries)
        results.update(bench_bm25("real", [p.contents for p in real], queries, args.rank_queries))
    scaled = scale_passages(world, args.world_size)
    queries = random.Random(1).choices(questions, k=args.queries)
    results.update(bench_bm25("world", [p.contents for p in scaled], queries, args.rank_queries))
    results.update(bench_dense(args.encode, args.faiss_vectors, args.queries))
    results["ratio"] = results["world_query_ratio"]
    results["load_1min"] = load_1min()

    print(f"{'corpus':8s} {'passages':>9s} {'bm25s build':>12s} {'rank build':>11s} {'bm25s q/s':>10s} "
          f"{'rank q/s':>9s} {'query ×':>8s} {'top10 overlap':>14s}")
    for name in ("real", "world"):
        if f"{name}_passages" in results:
            r = {k[len(name) + 1:]: v for k, v in results.items() if k.startswith(name + "_")}
            print(f"{name:8s} {r['passages']:9d} {r['bm25s_build_s']:11.2f}s {r['rank_bm25_build_s']:10.2f}s "
                  f"{r['bm25s_qps']:10.1f} {r['rank_bm25_qps']:9.2f} {r['query_ratio']:8.1f} "
                  f"{r['top10_overlap']:14.2f}")
    print(f"dense encode (minilm): {results['dense_encode_passages_per_s']:.1f} passages/s")
    print(f"faiss over {args.faiss_vectors} vectors: flat {results['faiss_flat_qps']:.0f} q/s, hnsw "
          f"{results['faiss_hnsw_qps']:.0f} q/s (recall@10 vs flat {results['faiss_hnsw_recall10_vs_flat']:.2f})")
    print(f"ratio (bm25s ÷ rank_bm25 query throughput, world {args.world_size}): {results['ratio']:.1f}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
