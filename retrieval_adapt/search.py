"""Query a saved index from the command line.

    python -m retrieval_adapt.search runs/index/world-bm25 "Where was Veltrane Osk born?" --top_k 3
"""

from __future__ import annotations

import sys

from adaptive_rag.plumbing.cli import OneLineArgumentParser, run_cli
from adaptive_rag.plumbing.retriever import Retriever
from retrieval_adapt.loading import load_retriever


def open_index(index: str, query_encoder: str | None = None) -> Retriever:
    """Any index folder (bm25, dense, lucene)."""
    return load_retriever(index, query_encoder=query_encoder)


def main(argv: list[str] | None = None) -> None:
    parser = OneLineArgumentParser(prog="python -m retrieval_adapt.search", description=__doc__.splitlines()[0])
    parser.add_argument("index", help="index folder written by retrieval_adapt.build_index")
    parser.add_argument("queries", nargs="+")
    parser.add_argument("--top_k", "-k", type=int, default=3, help="passages per query")
    parser.add_argument("--query_encoder", "--query-encoder", default=None,
                        help="adapted query encoder folder (dense only)")
    args = parser.parse_args(argv)
    retriever = open_index(args.index, query_encoder=args.query_encoder)
    for query, hits in zip(args.queries, retriever.search(args.queries, args.top_k)):
        print(f"query: {query}")
        for rank, hit in enumerate(hits, 1):
            print(f"  [{rank}] {hit.score:8.3f}  {hit.passage.id}  {hit.passage.title}: {hit.passage.text[:100]}")


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    return run_cli(main, resume_hint="nothing was written")


if __name__ == "__main__":
    sys.exit(cli())
