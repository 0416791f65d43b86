"""BM25 at scale: build time and peak memory, index size, load memory, first answer and throughput per corpus size,
the fitted growth, and the projection to the DPR Wikipedia dump (21,015,324 passages).

    python bench/scale.py --sizes 250000,500000,1000000 --json runs/bench/scale.json
    python bench/scale.py --sizes 20000,40000 --queries 50          # a quick look

Corpora are the embedded world scaled with ``data_builders.world.scale_passages`` (a smaller size is a prefix of a
larger one), written as passage JSONL. Every measured step runs in its own process under ``/usr/bin/time``, whose
peak RSS is that process's own: the build (``python -m retrieval_adapt.build_index``),
one query from a cold process (``python -m retrieval_adapt.search``: imports, load, answer), and a throughput run
that loads the index and times ``search`` against bm25s's own ``tokenize`` + ``retrieve`` on the same index files.
Headline ``ratio``: the project's search throughput divided by bm25s's on the largest corpus (1.0 = no overhead).

Growth is fitted as ``a + b * passages`` (least squares) and projected to 21M passages scaled by DPR's average
passage length over the world's: the terms that grow with the corpus grow with its tokens.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from harness import add_json_arg, load_1min, print_table, write_json

ROOT = Path(__file__).resolve().parents[1]
DPR_PASSAGES = 21_015_324
# psgs_w100.tsv: 13.0 GB over 21,015,324 lines is 619 bytes a line; less the id and separators, ~600 characters
# of title + text (100 words each).
DPR_CHARS = 600


def measured(argv: list[str]) -> tuple[float, float, str]:
    """(wall seconds, peak RSS in GB, stdout) of one child process, run under ``/usr/bin/time``: a child forked
    straight from this (large) process would inherit its peak RSS at exec, so the small ``time`` process forks it."""
    start = time.perf_counter()
    proc = subprocess.run(["/usr/bin/time", "-f", "PEAK_KB %M", *argv], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    wall = time.perf_counter() - start
    peak = [line for line in proc.stderr.splitlines() if line.startswith("PEAK_KB ")]
    if proc.returncode != 0 or not peak:
        raise SystemExit(f"failed: {' '.join(argv)}\n{proc.stderr[-2000:]}")
    return wall, int(peak[-1].split()[1]) / 1024**2, proc.stdout


def throughput(index: str, queries_file: str, repeats: int) -> None:
    """Child mode: load, first answer, then project search vs bm25s retrieve; prints one JSON line."""
    t0 = time.perf_counter()
    from retrieval_adapt.loading import load_retriever

    retriever = load_retriever(index)
    queries = json.loads(Path(queries_file).read_text())
    retriever.search(queries[:1], 10)
    first = time.perf_counter() - t0
    import bm25s
    import Stemmer

    own = bm25s.BM25.load(str(Path(index) / "bm25"), mmap=True)
    stemmer = Stemmer.Stemmer("english")

    def theirs():
        tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
        return own.retrieve(tokens, k=10, show_progress=False, n_threads=0)

    ours_s, theirs_s = [], []
    for _ in range(repeats):  # interleaved, best of: the machine is shared
        start = time.perf_counter()
        retriever.search(queries, 10)
        ours_s.append(time.perf_counter() - start)
        start = time.perf_counter()
        theirs()
        theirs_s.append(time.perf_counter() - start)
    print(json.dumps({"first_answer_s": first, "ours_qps": len(queries) / min(ours_s),
                      "bm25s_qps": len(queries) / min(theirs_s)}))


def du(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1024**3


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(a, b) of y = a + b x, least squares (b = 0 with one point)."""
    if len(xs) < 2:
        return ys[0], 0.0
    b, a = np.polyfit(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), 1)
    return float(a), float(b)


def bench_dense(n: int, encoder: str, kinds: list[str], work: Path, pq_m: int, refine: int) -> list[dict]:
    """Dense kinds over one encoding: the first build encodes into a kept shard folder, the others reuse it."""
    from data_builders.readers import write_passages_jsonl
    from data_builders.world import build_world, scale_passages

    corpus = work / f"dense-{n}.jsonl"
    write_passages_jsonl(scale_passages(build_world(), n), corpus)
    shards = work / f"dense-{n}-shards"
    shutil.rmtree(shards, ignore_errors=True)
    rows = []
    for kind in kinds:
        for r in ([0, refine] if kind == "ivfpq" and refine else [0]):
            out = work / f"dense-{n}-{kind}-r{r}"
            wall, peak, _ = measured([sys.executable, "-m", "retrieval_adapt.build_dense", "--corpus", str(corpus),
                                      "--encoder", encoder, "--faiss", kind, "--pq_m", str(pq_m), "--refine", str(r),
                                      "--nlist", str(max(1, n // 39)), "--shards_dir", str(shards),
                                      "--keep_shards", "true", "--output_dir", str(out)])
            meta = json.loads((out / "meta.json").read_text())
            dim = int(np.load(out / "embeddings.npy", mmap_mode="r").shape[1])
            rows.append({"kind": kind if not r else f"{kind}+refine{r}", "passages": n, "build_s": wall,
                         "peak_gb": peak, "recall10": meta["recall10_vs_flat"], "index_mb": meta["index_bytes"] / 1e6,
                         "bytes_per_passage": meta["index_bytes"] / n, "dim": dim})
            shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(shards, ignore_errors=True)
    corpus.unlink()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250000,500000,1000000", help="corpus sizes, comma-separated")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk_size", "--chunk-size", type=int, default=100_000)
    parser.add_argument("--workdir", default="runs/bench/scale")
    parser.add_argument("--keep", action="store_true", help="keep the corpora and indexes")
    parser.add_argument("--dense", type=int, default=0, help="also build dense indexes over this many passages")
    parser.add_argument("--dense_encoder", "--dense-encoder", default="minilm")
    parser.add_argument("--dense_kinds", "--dense-kinds", default="flat,hnsw_sq,ivfpq")
    parser.add_argument("--pq_m", "--pq-m",
                        type=int, default=48, help="IVF-PQ bytes per vector (must divide the dimension)")
    parser.add_argument("--refine", type=int, default=4, help="also IVF-PQ re-ranking refine*k exact candidates")
    parser.add_argument("--throughput", nargs=2, metavar=("INDEX", "QUERIES"), help=argparse.SUPPRESS)
    add_json_arg(parser)
    args = parser.parse_args()
    if args.throughput:
        throughput(*args.throughput, args.repeats)
        return

    from data_builders.readers import write_passages_jsonl
    from data_builders.world import build_world, scale_passages

    sizes = sorted(int(s) for s in args.sizes.split(","))
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    world = build_world()
    questions = [q.question for q in world.single_hop + world.two_hop + world.common_knowledge]
    queries_file = work / "queries.json"
    queries_file.write_text(json.dumps(random.Random(0).choices(questions, k=args.queries)))
    corpus = scale_passages(world, sizes[-1])
    chars = float(np.mean([len(p.contents) for p in corpus[: min(len(corpus), 200_000)]]))
    for n in sizes:
        write_passages_jsonl(corpus[:n], work / f"corpus-{n}.jsonl")
    del corpus
    py = sys.executable
    results: dict[str, float] = {"world_chars_per_passage": chars, "chunk_size": args.chunk_size}
    rows = []
    for n in sizes:
        index = work / f"bm25-{n}"
        shutil.rmtree(index, ignore_errors=True)
        load_before = load_1min()
        build_s, build_gb, _ = measured([py, "-m", "retrieval_adapt.build_index", "--corpus",
                                         str(work / f"corpus-{n}.jsonl"), "--output_dir", str(index),
                                         "--chunk_size", str(args.chunk_size)])
        query = json.loads(queries_file.read_text())[0]
        search_s, search_gb, _ = measured([py, "-m", "retrieval_adapt.search", str(index), query, "--top_k", "10"])
        _, _, out = measured([py, str(ROOT / "bench" / "scale.py"), "--throughput", str(index), str(queries_file),
                              "--repeats", str(args.repeats)])
        t = json.loads(out.strip().splitlines()[-1])
        row = {"passages": n, "build_s": build_s, "build_peak_gb": build_gb, "index_gb": du(index),
               "search_one_query_s": search_s, "search_peak_gb": search_gb, "first_answer_s": t["first_answer_s"],
               "ours_qps": t["ours_qps"], "bm25s_qps": t["bm25s_qps"], "ratio": t["ours_qps"] / t["bm25s_qps"],
               "load_1min": max(load_before, load_1min())}
        results.update({f"{k}_{n}": v for k, v in row.items() if k != "passages"})
        rows.append(row)
        if not args.keep:
            shutil.rmtree(index, ignore_errors=True)
            (work / f"corpus-{n}.jsonl").unlink()
        print(f"done {n}: {row}", file=sys.stderr, flush=True)

    print_table(["passages", "build s", "build peak GB", "index GB", "search 1 query s", "its peak GB",
                 "first answer s", "q/s", "bm25s q/s", "ratio", "load"],
                [[r["passages"], r["build_s"], r["build_peak_gb"], r["index_gb"], r["search_one_query_s"],
                  r["search_peak_gb"], r["first_answer_s"], r["ours_qps"], r["bm25s_qps"], r["ratio"],
                  r["load_1min"]] for r in rows])
    scale = DPR_PASSAGES * DPR_CHARS / chars  # world-passage equivalents of the DPR dump's tokens
    print(f"\nfit a + b*n, projected to {DPR_PASSAGES:,} passages of {DPR_CHARS} characters "
          f"(the world's average: {chars:.0f}):")
    proj_rows = []
    for key in ("build_s", "build_peak_gb", "index_gb", "search_peak_gb"):
        a, b = fit([r["passages"] for r in rows], [r[key] for r in rows])
        results[f"{key}_fit_a"], results[f"{key}_fit_b_per_million"] = a, b * 1e6
        results[f"{key}_projected_21m"] = a + b * scale
        proj_rows.append([key, a, b * 1e6, a + b * scale])
    print_table(["figure", "a", "b per 1M", "projected"], proj_rows)
    if args.dense:
        dense = bench_dense(args.dense, args.dense_encoder, args.dense_kinds.split(","), work, args.pq_m,
                            args.refine)
        print(f"\ndense ({args.dense_encoder}, {args.dense} passages; recall@10 against exact search on held-out "
              "passages; 21M projected as pq_m + 8 bytes a passage for IVF-PQ, bytes a passage otherwise):")
        proj = []
        for d in dense:
            per = d["bytes_per_passage"] if not d["kind"].startswith("ivfpq") else args.pq_m + 8
            proj.append([d["kind"], d["build_s"], d["peak_gb"], d["recall10"], d["index_mb"], per * DPR_PASSAGES / 1e9])
            results.update({f"dense_{d['kind']}_{k}": v for k, v in d.items() if k not in ("kind",)})
            results[f"dense_{d['kind']}_projected_21m_gb"] = per * DPR_PASSAGES / 1e9
        print_table(["kind", "build s", "peak GB", "recall@10", "index MB", "21M GB"], proj, floats=".3f")
    results["ratio"] = rows[-1]["ratio"]
    results["load_1min"] = load_1min()
    print(f"ratio (project search ÷ bm25s retrieve, {rows[-1]['passages']} passages): {results['ratio']:.2f}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
