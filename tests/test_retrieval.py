"""BM25 and dense retrieval: build, search, save, load; recall on the embedded world."""

from __future__ import annotations

import numpy as np
import pytest

from data_builders.schema import Passage
from retrieval_adapt.bm25 import BM25Retriever
from retrieval_adapt.loading import load_retriever

CORPUS = [Passage("a", "Quarvik", "Quarvik is a port city on the Tessna river."),
          Passage("b", "Veltrane Osk", "Veltrane Osk was born in Quarvik in 1962 and founded Kelmora Records."),
          Passage("c", "Kelmora Records", "Kelmora Records is a music label based in Halvenmark."),
          Passage("d", "Zürich", "Zürich is the largest city in Switzerland; its lake is called Zürichsee.")]


def test_bm25_ranks_and_differs_per_query(tmp_path):
    bm25 = BM25Retriever.build(CORPUS, show_progress=False)
    hits = bm25.search(["Was Veltrane Osk born in Quarvik?", "music label Halvenmark", "Zürichsee"], k=2)
    assert [row[0].passage.id for row in hits] == ["b", "c", "d"]  # not the same documents for every query
    assert hits[0][0].score >= hits[0][1].score
    bm25.save(tmp_path / "idx")
    again = load_retriever(tmp_path / "idx")
    assert [h.passage.id for h in again.search(["Was Veltrane Osk born in Quarvik?"], 2)[0]] == [h.passage.id for h in
                                                                                          hits[0]]


def test_bm25_edge_cases():
    bm25 = BM25Retriever.build(CORPUS, show_progress=False)
    assert bm25.search([], 3) == []
    assert bm25.search(["the of and"], 3) == [[]]  # only stopwords: nothing to rank
    assert len(bm25.search(["Quarvik"], 50)[0]) <= len(CORPUS)
    with pytest.raises(ValueError, match="k must be positive"):
        bm25.search(["x"], 0)
    with pytest.raises(ValueError, match="empty corpus"):
        BM25Retriever.build([])


def test_not_an_index_folder(tmp_path):
    with pytest.raises(FileNotFoundError, match="not an index folder"):
        load_retriever(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["flat", "ivf", "hnsw"])
def test_dense_build_save_load(tmp_path, kind):
    from retrieval_adapt.dense import DenseRetriever, FaissOptions
    from retrieval_adapt.encoders import MeanPoolingEncoder

    enc = MeanPoolingEncoder.from_name("minilm")
    many = [Passage(f"{p.id}{i}", p.title, p.text) for i in range(20) for p in CORPUS]
    dense = DenseRetriever.build(many if kind == "ivf" else CORPUS, enc,
                                 faiss_options=FaissOptions(kind=kind, nlist=2), show_progress=False)
    top = dense.search(["Who founded Kelmora Records?"], 2)[0]
    assert top[0].passage.id[0] in ("b", "c")
    dense.save(tmp_path / "d")
    again = load_retriever(tmp_path / "d")
    assert [h.passage.id for h in again.search(["Who founded Kelmora Records?"], 2)[0]] == [h.passage.id for h in top]
    assert np.allclose(again.passage_embeddings([0]).numpy(), dense.embeddings[:1], atol=1e-6)


@pytest.mark.slow
def test_world_recall_table_bm25_and_dense():
    from data_builders.world import build_world
    from retrieval_adapt.dense import DenseRetriever
    from retrieval_adapt.encoders import MeanPoolingEncoder
    from retrieval_adapt.recall import recall_table

    world = build_world()
    bm25 = BM25Retriever.build(world.passages, show_progress=False)
    dense = DenseRetriever.build(world.passages, MeanPoolingEncoder.from_name("minilm"), show_progress=False)
    print("\nretriever  recall@1  recall@3  recall@10  (world single-hop)")
    for name, r in (("bm25", bm25), ("dense", dense)):
        table = recall_table(r, world.single_hop, ks=(1, 3, 10))
        print(f"{name:9s}  {table['recall@1']:.3f}     {table['recall@3']:.3f}     {table['recall@10']:.3f}")
        assert table["recall@3"] >= 0.8
