"""Distillation-data builder with a fake retriever, an echo generator and a stub re-ranker: rows, split, stats,
resume after a crash, refusal to mix settings; question slices; the before/after evaluation with the same fakes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptive_rag.lm.generation import Generation
from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.question_set import QuestionSet
from adaptive_rag.plumbing.record_log import FolderInUseError
from adaptive_rag.plumbing.records import Passage
from adaptive_rag.plumbing.retriever import Hit
from data_builders.distill_schema import check_row, split_ids
from data_builders.question_loader import QuestionsConfig, load_questions
from data_builders.world import WorldConfig, build_world
from inference.iter_retgen.loop import IterRetGen, IterRetGenConfig
from training.distill_set import RetrievalAdaptDataConfig, build, row_log
from training.evaluate_adapted import EvaluateAdaptedConfig, evaluate


class FakeDense:
    """Holds the world's passages; search returns the first k passages whose title shares a query word."""

    def __init__(self, passages: list[Passage]):
        self.passages = passages
        self.queries: list[str] = []

    def search(self, queries: list[str], k: int) -> list[list[Hit]]:
        self.queries.extend(queries)
        out = []
        for q in queries:
            words = set(q.lower().replace("?", "").split())
            ranked = sorted(self.passages, key=lambda p: -len(words & set(p.contents.lower().split())))
            out.append([Hit(p, float(len(words & set(p.contents.lower().split())))) for p in ranked[:k]])
        return out


class Echo:
    def generate(self, prompts):
        return [Generation(f"Draft about {p.user.rsplit('Question: ', 1)[1]}", 3, {}) for p in prompts]


class StubReranker:
    def __init__(self):
        self.seen: list[str] = []

    def score_batch(self, items):
        self.seen.extend(item.question for item in items)
        return [[float(len(p.text) % 7) for p in item.passages] for item in items]


@pytest.fixture(scope="module")
def world():
    return build_world(WorldConfig(seed=0))


def _models(world):
    retriever = FakeDense(world.passages)
    loop = IterRetGen(retriever, Echo(), IterRetGenConfig(iterations=1, top_k=2))
    return retriever, loop, StubReranker()


def _configs(out: Path, **kw):
    qcfg = QuestionsConfig(dataset="world-two-hop", shuffle_seed=0, start=0, limit=5)
    kw.setdefault("candidate_query", "question")  # these counts assume candidates retrieved with the question alone
    cfg = RetrievalAdaptDataConfig(output_dir=str(out), num_candidates=4, batch_size=2, validation_fraction=0.4,
                                   show_progress=False, **kw)
    return qcfg, cfg


def test_rows_dataset_stats(world, tmp_path):
    qcfg, cfg = _configs(tmp_path / "d")
    models = _models(world)
    dataset, stats = build(qcfg, cfg, models=models)
    assert (len(dataset["train"]), len(dataset["validation"])) == (3, 2)
    row = dataset["train"][0]
    assert len(row["candidate_ids"]) == len(row["candidate_positions"]) == len(row["teacher_scores"]) == 4
    assert [world.passages[p].id for p in row["candidate_positions"]] == row["candidate_ids"]
    assert row["y1"] == f"Draft about {row['question']}"
    first = load_questions(qcfg.question_set())[0].question
    assert models[0].queries[2] == first  # batch of 2: y1 queries, then candidates by q
    assert stats["n_questions"] == 5 and stats["built_this_run"] == 5 and 0 <= stats["gold_in_candidates"] <= 1
    assert json.loads((tmp_path / "d" / "stats.json").read_text())["questions_sha256"] == stats["questions_sha256"]
    assert (tmp_path / "d" / "config.yaml").is_file() and (tmp_path / "d" / "dataset" / "dataset_dict.json").is_file()


def test_candidates_can_be_retrieved_with_y1(world, tmp_path):
    qcfg, cfg = _configs(tmp_path / "d", candidate_query="question_y1")
    models = _models(world)
    build(qcfg, cfg, models=models)
    first = load_questions(qcfg.question_set())[0].question
    assert f"Draft about {first} {first}" in models[0].queries


def test_resume_skips_done_ids_and_repairs_a_torn_line(world, tmp_path):
    qcfg, cfg = _configs(tmp_path / "d")
    build(qcfg, cfg, models=_models(world))
    log = tmp_path / "d" / "rows.jsonl"
    full = row_log(tmp_path / "d").read()
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[:3]) + lines[3][:40])  # a crash while writing row 4: row 5 never written
    models = _models(world)
    dataset, stats = build(qcfg, cfg, models=models)
    assert stats["built_this_run"] == 2
    assert models[2].seen == [full[3]["question"], full[4]["question"]]  # only the missing questions
    assert row_log(tmp_path / "d").read() == full  # same rows, in the same order, the torn line gone
    assert len(dataset["train"]) + len(dataset["validation"]) == 5
    again = _models(world)
    assert build(qcfg, cfg, models=again)[1]["built_this_run"] == 0 and again[2].seen == []


def test_resume_refuses_other_settings(world, tmp_path):
    qcfg, cfg = _configs(tmp_path / "d")
    build(qcfg, cfg, models=_models(world))
    build(qcfg, _configs(tmp_path / "d", rerank_batch_size=4)[1], models=_models(world))  # speed only: fine
    build(qcfg, _configs(Path(f"{tmp_path}/../{tmp_path.name}/d"))[1], models=_models(world))  # same folder
    build(QuestionsConfig(dataset="world-two-hop", shuffle_seed=0, start=2, limit=2), cfg, models=_models(world))
    with pytest.raises(FolderInUseError, match=r"rows made with other settings \(num_candidates: 4 -> 8\)"):
        other = RetrievalAdaptDataConfig(output_dir=str(tmp_path / "d"), num_candidates=8, batch_size=2,
                                         validation_fraction=0.4, candidate_query="question")
        build(qcfg, other, models=_models(world))


def test_split_is_independent_of_order():
    ids = [f"q{i}" for i in range(20)]
    assert split_ids(ids, 0.25, 0) == split_ids(list(reversed(ids)), 0.25, 0)
    assert len(split_ids(ids, 0.25, 0)) == 5 and split_ids(ids, 0.0, 0) == set() and split_ids(["a"], 0.5, 0) == set()


def test_check_row_errors():
    row = {"question_id": "q", "question": "Q", "answers": ["a"], "gold_ids": [], "y1": "", "y1_answer": "",
           "candidate_ids": ["a", "b"], "candidate_positions": [0, 1], "teacher_scores": [0.0],
           "retriever_scores": [0.0, 0.0]}
    with pytest.raises(DataError, match="field 'teacher_scores': 1 values for 2 candidates"):
        check_row(row)
    with pytest.raises(DataError, match="missing column"):
        check_row({"question_id": "q"})
    with pytest.raises(DataError, match="non-finite"):
        check_row({**row, "teacher_scores": [float("nan"), 0.0]})


def test_question_slices(world):
    assert [e.id for e in load_questions(QuestionSet("world-two-hop", limit=3))] == [e.id for e in world.two_hop[:3]]
    train = {e.id for e in load_questions(QuestionSet("world-two-hop", shuffle_seed=0, limit=100))}
    held = {e.id for e in load_questions(QuestionSet("world-two-hop", shuffle_seed=0, start=100))}
    assert len(train) == 100 and len(held) == len(world.two_hop) - 100 and not train & held
    with pytest.raises(ConfigError, match="limit must be >= 1"):
        QuestionsConfig(start=5, limit=0)
    with pytest.raises(ConfigError, match="not an embedded set; known: world-two-hop"):
        QuestionsConfig(dataset="world-three-hop")
    with pytest.raises(ConfigError, match="start 10000 is past the end of world-two-hop"):
        load_questions(QuestionSet("world-two-hop", start=10_000))


def test_config_validation():
    with pytest.raises(ValueError, match="num_candidates must be >= 2"):
        RetrievalAdaptDataConfig(num_candidates=1)
    with pytest.raises(ValueError, match="validation_fraction"):
        RetrievalAdaptDataConfig(validation_fraction=1.0)


def test_evaluate_report_with_fakes(world, tmp_path):
    passages = world.passages
    retrievers = {"base": FakeDense(passages), "adapted": FakeDense(passages[::-1])}
    cfg = EvaluateAdaptedConfig(output_dir=str(tmp_path), recall_ks=[1, 5], iterations=2, top_k=2, iter_retgen_limit=2,
                                iter_retgen_retrievers=["adapted"])
    report = evaluate(QuestionsConfig(limit=4), cfg, retrievers=retrievers, generator=Echo())
    assert report["n_questions"] == 4 and report["n_iter_retgen"] == 2
    assert set(report["recall"]) == {"base", "adapted"} and set(report["recall"]["base"]) == {
        "recall@1", "recall@5", "answer_recall@1", "answer_recall@5"}
    assert list(report["iter_retgen"]["curves"]) == ["adapted"]
    assert [row["t"] for row in report["iter_retgen"]["curves"]["adapted"]] == [1, 2]
    md = (tmp_path / "report.md").read_text()
    assert "| base | " in md and "| adapted | 2 |" in md
    records = [json.loads(line) for line in (tmp_path / "iter_retgen_adapted.jsonl").read_text().splitlines()]
    assert len(records) == 2 and len(records[0]["iterations"]) == 2
    assert json.loads((tmp_path / "report.json").read_text())["top_k"] == 2


def test_evaluate_config_validation():
    with pytest.raises(ValueError, match="recall_ks must be positive"):
        EvaluateAdaptedConfig(recall_ks=[0])
    with pytest.raises(ValueError, match="unknown \\['other'\\]"):
        EvaluateAdaptedConfig(iter_retgen_retrievers=["other"])


def test_rows_log_torn_inside_a_multibyte_character(world, tmp_path):
    """The shared RecordLog repairs a row cut inside "北" (a kill mid-write) and the builder redoes only that row."""
    qcfg, cfg = _configs(tmp_path / "d")
    build(qcfg, cfg, models=_models(world))
    log = tmp_path / "d" / "rows.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    row = json.loads(lines[4])
    torn = (json.dumps({**row, "y1": "北京 " + row["y1"]}, ensure_ascii=False) + "\n").encode()
    log.write_bytes(b"".join(lines[:4]) + torn[:torn.index("北".encode()) + 1])
    kept = [r["question_id"] for r in row_log(tmp_path / "d").read()]
    assert kept == [json.loads(line)["question_id"] for line in lines[:4]]
    models = _models(world)
    assert build(qcfg, cfg, models=models)[1]["built_this_run"] == 1
    assert models[2].seen == [row["question"]]


def _lock(folder: Path, pid: int) -> None:
    import socket

    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname()}))


def test_locked_output_folder_fails_in_one_line_and_stale_lock_is_taken_over(world, tmp_path, capsys, caplog):
    import logging
    import os
    import subprocess
    import sys

    from adaptive_rag.plumbing.cli import run_cli
    from training.distill_set import main

    out = tmp_path / "d"
    _lock(out, os.getppid())  # a live process holds the folder
    (tmp_path / "idx").mkdir()  # the inputs are checked first: they must pass for the lock to be reached
    (tmp_path / "idx" / "meta.json").write_text('{"kind": "bm25"}')
    argv = ["--out", str(out), "--limit", "3", "--show_progress", "false", "--index_dir", str(tmp_path / "idx")]
    assert run_cli(main, argv=argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "is being written" in err and err.count("\n") == 1
    assert sorted(p.name for p in out.iterdir()) == [".lock"]  # nothing written
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    _lock(out, dead.pid)
    qcfg, cfg = _configs(out)
    with caplog.at_level(logging.WARNING):
        assert build(qcfg, cfg, models=_models(world))[1]["built_this_run"] == 5
    assert "taking over a stale lock" in caplog.text and not (out / ".lock").exists()


def test_dataset_is_replaced_whole_or_not_at_all(world, tmp_path, monkeypatch):
    """A kill while dataset/ is saved leaves the previous dataset loadable and no staging folder behind."""
    from datasets import DatasetDict, load_from_disk

    qcfg, cfg = _configs(tmp_path / "d")
    build(qcfg, cfg, models=_models(world))
    before = load_from_disk(str(tmp_path / "d" / "dataset"))["train"]["question_id"]

    def killed(self, path, **kw):
        (Path(path) / "dataset_dict.json").write_text("{")  # a partial write, then the kill
        raise KeyboardInterrupt

    monkeypatch.setattr(DatasetDict, "save_to_disk", killed)
    with pytest.raises(KeyboardInterrupt):
        build(qcfg, cfg, models=_models(world))
    assert load_from_disk(str(tmp_path / "d" / "dataset"))["train"]["question_id"] == before
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["config.yaml", "dataset", "rows.jsonl",
                                                                   "stats.json"]
