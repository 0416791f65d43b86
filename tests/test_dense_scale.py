"""Dense indexes at scale: sharded encoding (two processes give one process's embeddings), resumed shards, faiss
kinds with their recall against exact search, memory-mapped IVF, an adapted query encoder on the result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.errors import DataError
from retrieval_adapt.bm25_stream import build_dir
from retrieval_adapt.build_dense import DenseScaleConfig, build
from retrieval_adapt.build_dense import main as dense_main
from retrieval_adapt.loading import load_retriever

ROOT = Path(__file__).resolve().parents[1]


def _cfg(tiny_encoder, out, **kw) -> DenseScaleConfig:
    base = {"encoder": str(tiny_encoder), "output_dir": str(out), "shard_size": 150, "max_length": 32, "pq_m": 4,
            "nlist": 8, "nprobe": 2, "train_size": 400, "recall_queries": 60}
    return DenseScaleConfig(**{**base, **kw})


def test_two_processes_encode_what_one_does(tiny_encoder, tmp_path):
    args = ["-m", "retrieval_adapt.build_dense", "--encoder", str(tiny_encoder), "--shard_size", "150",
            "--max_length", "32", "--faiss", "flat"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    one = subprocess.run([sys.executable, *args, "--out", str(tmp_path / "one")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    # torchrun is what `accelerate launch --num_processes 2` runs; accelerate has no multi-process CPU launcher
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", *args, "--out",
                          str(tmp_path / "two")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    assert "(2 process(es)" in two.stdout
    a, b = np.load(tmp_path / "one" / "embeddings.npy"), np.load(tmp_path / "two" / "embeddings.npy")
    assert a.shape == b.shape and a.shape[0] > 300
    assert np.array_equal(a, b)
    assert (tmp_path / "one" / "passages.jsonl").read_bytes() == (tmp_path / "two" / "passages.jsonl").read_bytes()


def test_finished_shards_are_not_encoded_again(tiny_encoder, tmp_path, monkeypatch):
    from retrieval_adapt.encoders import MeanPoolingEncoder

    first = build(_cfg(tiny_encoder, tmp_path / "a", faiss="flat"))
    calls = []
    real = MeanPoolingEncoder.encode

    def counting(self, texts, **kw):
        calls.append(len(texts))
        if len(calls) == 2:
            raise KeyboardInterrupt  # killed while encoding the second shard
        return real(self, texts, **kw)

    monkeypatch.setattr(MeanPoolingEncoder, "encode", counting)
    with pytest.raises(KeyboardInterrupt):
        build(_cfg(tiny_encoder, tmp_path / "b", faiss="flat"))
    assert sorted(p.name for p in build_dir(tmp_path / "b").iterdir()) == ["encode.json", "shard-00000.npy"]
    calls.clear()
    monkeypatch.setattr(MeanPoolingEncoder, "encode", lambda self, texts, **kw: calls.append(1) or real(self, texts,
                                                                                                      **kw))
    again = build(_cfg(tiny_encoder, tmp_path / "b", faiss="flat"))
    assert len(calls) == -(-first["passages"] // 150) - 1  # every shard but the first
    assert np.array_equal(np.load(tmp_path / "a" / "embeddings.npy"), np.load(tmp_path / "b" / "embeddings.npy"))
    assert again["passages"] == first["passages"] and not build_dir(tmp_path / "b").exists()


def test_other_encoder_settings_are_refused(tiny_encoder, tmp_path):
    work = build_dir(tmp_path / "c")
    work.mkdir()
    (work / "encode.json").write_text(json.dumps({"encoder": "other"}))
    with pytest.raises(DataError, match="holds embeddings made with other settings .*encoder"):
        build(_cfg(tiny_encoder, tmp_path / "c"))


@pytest.mark.parametrize("kind", ["flat", "hnsw_sq", "ivfpq"])
def test_index_kinds_report_recall_and_search(tiny_encoder, tmp_path, kind, capsys):
    out = tmp_path / kind
    assert run_cli(dense_main, argv=[f"--{k}={v}" for k, v in vars(_cfg(tiny_encoder, out, faiss=kind)).items()
                                     if v is not None]) == 0
    printed = capsys.readouterr().out
    meta = json.loads((out / "meta.json").read_text())
    assert f"recall@10 vs exact {meta['recall10_vs_flat']:.3f}" in printed
    if kind == "flat":
        assert meta["recall10_vs_flat"] == 1.0
    assert 0.0 < meta["recall10_vs_flat"] <= 1.0
    retriever = load_retriever(out)
    assert not isinstance(retriever.passages, list)
    hit = retriever.search([retriever.passages[5].contents], 3)[0]
    assert len(hit) == 3
    if kind != "ivfpq":  # 4-byte PQ codes of a random 16-d encoder cannot rank a passage first for its own text
        assert hit[0].passage == retriever.passages[5]


def test_ivfpq_refined_is_mmapped_and_takes_an_adapted_query_encoder(tiny_encoder, tmp_path):
    import faiss
    import torch

    from retrieval_adapt.encoders import MeanPoolingEncoder

    build(_cfg(tiny_encoder, tmp_path / "r", faiss="ivfpq", refine=8))
    plain = build(_cfg(tiny_encoder, tmp_path / "p", faiss="ivfpq"))
    refined = json.loads((tmp_path / "r" / "meta.json").read_text())
    assert refined["recall10_vs_flat"] >= plain["recall10_vs_flat"]
    retriever = load_retriever(tmp_path / "r")
    assert isinstance(faiss.extract_index_ivf(retriever.index).invlists, faiss.InvertedLists)
    assert retriever.refine == 8
    # an adapted query encoder (here: the passage encoder with perturbed weights) on the same index
    adapted = MeanPoolingEncoder.from_name(str(tiny_encoder))
    with torch.no_grad():
        for p in adapted.model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    adapted.save(tmp_path / "adapted")
    swapped = load_retriever(tmp_path / "r", query_encoder=str(tmp_path / "adapted"))
    q = ["Who founded Ludisk Records?"]
    assert not np.allclose(swapped.embed_queries(q), retriever.embed_queries(q))
    assert len(swapped.search(q, 5)[0]) == 5
    assert swapped.passage_embeddings([0, 3]).shape == (2, 16)  # what distillation reads
