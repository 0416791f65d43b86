"""User mistakes end in one line naming the culprit, before anything heavy runs and with nothing left behind; the
commands that read a run folder say what they left out and score each run as its config.yaml says."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import check_yaml_values, parse_config
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.record_log import RecordLog
from adaptive_rag.plumbing.records import PredictionRecord
from inference.commands import compare_runs, report
from inference.commands.eval_folder import read_predictions, run_scoring

ROOT = Path(__file__).resolve().parents[1]


# --- a YAML value of the wrong shape --------------------------------------------------------------------------

def test_a_list_where_a_number_goes_ends_in_one_line_before_the_model_loads(tmp_path, capsys, monkeypatch):
    from inference.commands import evaluate

    def no_run(*args, **kwargs):
        raise AssertionError("nothing may run: no model load, no output folder")

    monkeypatch.setattr(evaluate, "evaluate", no_run)
    out = tmp_path / "runs" / "eval"
    recipe = tmp_path / "eval.yaml"
    recipe.write_text(f"model: smollm2-135m\ndataset: world-two-hop\nmethod: dragin\ntop_k: [3, 5]\n"
                      f"output_dir: {out}\n")
    assert run_cli(evaluate.main, argv=[str(recipe)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{recipe}: field 'top_k' expects a whole number" in err and "[3, 5]" in err
    assert not (tmp_path / "runs").exists()  # no config.yaml, no folder left behind


@pytest.mark.parametrize(("value", "expected"), [
    ("theta: [0.8]", "field 'theta' expects a number"),
    ("method: {name: dragin}", "field 'method' expects one of"),
    ("dataset: [a, b]", "field 'dataset' expects a single value"),
    ("limit: 2.5", "field 'limit' expects a whole number"),
])
def test_other_values_of_the_wrong_shape(tmp_path, value, expected):
    from inference.commands.evaluate import CONFIG_TYPES

    recipe = tmp_path / "eval.yaml"
    recipe.write_text(f"{value}\n")
    with pytest.raises(ConfigError, match=expected):
        parse_config(CONFIG_TYPES, [str(recipe)])


def test_strings_are_still_converted_by_argparse_and_flags_still_win(tmp_path):
    from inference.commands.evaluate import CONFIG_TYPES

    recipe = tmp_path / "eval.yaml"
    recipe.write_text("theta: '1.5'\ntop_k: 4\n")
    cfg, method, *_ = parse_config(CONFIG_TYPES, [str(recipe), "--top_k", "2"])
    assert method.theta == 1.5 and method.top_k == 2


def _programs():
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from test_readme import program_types

    from training.grpo import CONFIG_TYPES as GRPO_TYPES

    return [program_types(p) for p in ("inference.commands.evaluate", "training/adapt_llm.py", "training.distill_set",
                                       "training/distill_retriever.py", "training.evaluate_adapted",
                                       "training/search_sft.py")] + [GRPO_TYPES]


def test_every_shipped_recipe_passes_the_value_check():
    listed = subprocess.run(["git", "ls-files", "*.yaml"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    recipes = [p for p in listed if p.startswith(("bench/", "retrieval_adapt/configs/", "inference/configs/",
                                                   "training/configs/"))]
    assert recipes
    programs = _programs()
    for path in recipes:
        data = yaml.safe_load((ROOT / path).read_text(encoding="utf-8")) or {}
        data.pop("sweep", None)
        types = next(t for t in programs if set(data) <= {f.name for c in t for f in dataclasses.fields(c)})
        check_yaml_values(types, data, path)


# --- a query encoder of another size than the index -----------------------------------------------------------

def test_a_query_encoder_of_another_dimension_is_refused_in_one_line(dense_index, wide_encoder, tiny_encoder, tmp_path,
                                                                       monkeypatch):
    from retrieval_adapt import dense
    from retrieval_adapt.loading import load_retriever

    wide = wide_encoder
    assert dense.index_dim(dense_index) == 16 and dense.encoder_dim(str(wide)) == 24
    (dense_index / "embeddings.npy").rename(tmp_path / "kept.npy")  # the faiss header alone tells the size too
    try:
        assert dense.index_dim(dense_index) == 16
    finally:
        (tmp_path / "kept.npy").rename(dense_index / "embeddings.npy")
    expected = r"query encoder .*wide makes 24-dimensional vectors, but the index .* holds 16-dimensional ones"
    with pytest.raises(ConfigError, match=expected):
        dense.check_query_encoder(dense_index, str(wide))

    def no_weights(*args, **kwargs):
        raise AssertionError("the encoder's weights must not load")

    monkeypatch.setattr(dense.MeanPoolingEncoder, "from_name", no_weights)
    with pytest.raises(ConfigError, match=expected):
        load_retriever(dense_index, query_encoder=str(wide))
    dense.check_query_encoder(dense_index, str(tiny_encoder))  # the same size: nothing to say


def test_evaluate_checks_the_query_encoder_size_before_the_model_loads(dense_index, wide_encoder, tmp_path, capsys,
                                                                        monkeypatch):
    from adaptive_rag.lm import models
    from inference.commands import evaluate

    def no_load(*args, **kwargs):
        raise AssertionError("the model must not load")

    monkeypatch.setattr(models, "load_causal_lm", no_load)
    out = tmp_path / "out"
    argv = ["--method", "sr-rag", "--dataset", "world-two-hop", "--limit", "1", "--index", str(dense_index),
            "--query_encoder", str(wide_encoder), "--output_dir", str(out)]
    assert run_cli(evaluate.main, argv=argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "makes 24-dimensional vectors" in err and not out.exists()


# --- a run folder where an index goes ---------------------------------------------------------------------------

@pytest.mark.parametrize("index", [None, "runs/index/hotpotqa-bm25"])
def test_a_run_folder_given_as_the_index_is_named_a_run_folder(index, tmp_path, capsys):
    from inference.commands.eval_checks import check_index_folder
    from retrieval_adapt import search
    from retrieval_adapt.corpus_store import load_meta

    run = _run(tmp_path / "run", [_rec("q1", "So the answer is Osk.")], {"method": "dragin", "index": index})
    used = f"that run read the index {index}" if index else "that run read the embedded world's BM25 (no index folder)"
    expected = f"--index {run} is a run folder (predictions.jsonl, metrics.json), not an index folder; {used}"
    with pytest.raises(ConfigError) as err:
        check_index_folder(str(run))
    assert str(err.value) == expected
    with pytest.raises(ValueError, match="is a run folder .* not an index folder") as err:
        load_meta(run)
    assert "unfinished" not in str(err.value) and "rebuild" not in str(err.value)
    assert run_cli(search.main, argv=[str(run), "who founded Kelmora?"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a run folder" in err
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml", "metrics.json", "predictions.jsonl"]


# --- torn last lines, and each run scored as its config.yaml says ---------------------------------------------

def _rec(qid: str, output: str) -> dict:
    return PredictionRecord(id=qid, question="q", answers=["Osk"], output=output, retrievals=[],
                            llm_forward_passes=1, generated_tokens=1, batch_mean_seconds=0.1).to_dict()


def _run(folder: Path, records: list[dict], config: dict, *, torn: bool = False, metrics: bool = True) -> Path:
    folder.mkdir(parents=True)
    body = "".join(json.dumps(r) + "\n" for r in records)
    if torn:
        body += json.dumps(_rec("q-torn", "So the answer is Osk."))[:25]  # killed mid-write
    (folder / "predictions.jsonl").write_text(body)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    if metrics:
        (folder / "metrics.json").write_text(json.dumps({"n": len(records), "em": 1.0, "f1": 1.0}))
    return folder


def test_a_torn_last_line_is_reported_and_the_file_left_as_it_is(tmp_path, capsys):
    run = _run(tmp_path / "runs" / "a", [_rec("q1", "So the answer is Osk.")], {"method": "dragin"}, torn=True)
    before = (run / "predictions.jsonl").read_bytes()
    records, torn = read_predictions(run)
    assert [r.id for r in records] == ["q1"] and torn == {"predictions.jsonl": 25}
    assert "1 torn last line left out (predictions.jsonl (25 bytes))" in capsys.readouterr().err
    assert run_cli(report.main, argv=[str(tmp_path / "runs"), "--out", str(tmp_path / "report")]) == 0
    assert "1 torn last line left out" in capsys.readouterr().err
    assert (run / "predictions.jsonl").read_bytes() == before  # a reader never cuts another run's file
    log = RecordLog(run / "predictions.jsonl")
    assert [r["id"] for r in log.read(repair=False)] == ["q1"] and log.torn_bytes == 25


def test_compare_runs_scores_each_run_as_its_config_says_and_reports_torn_lines(tmp_path, capsys):
    """The other run has no metrics.json (unfinished) and a torn last line; its config.yaml says DRAGIN's answer
    extraction, under which 'Answer: Osk' is no answer (the project's extraction would find Osk)."""
    base = _run(tmp_path / "base", [_rec("q1", "Answer: Osk"), _rec("q2", "So the answer is Osk.")],
                {"method": "dragin", "answer_extraction": "project", "dataset": "hotpotqa"})
    other = _run(tmp_path / "other", [_rec("q1", "Answer: Osk"), _rec("q2", "So the answer is Osk.")],
                 {"method": "dragin", "answer_extraction": "dragin", "dataset": "hotpotqa"}, torn=True, metrics=False)
    assert run_scoring(yaml.safe_load((other / "config.yaml").read_text()))["extraction"] == "dragin"
    assert run_cli(compare_runs.main, argv=[str(base), str(other), "--json", str(tmp_path / "c.json")]) == 0
    [row] = json.loads((tmp_path / "c.json").read_text())
    assert row["em_base"] == 1.0 and row["em"] == 0.5 and row["questions"] == 2
    captured = capsys.readouterr()
    assert "1 torn last line left out" in captured.err and "no metrics.json (an unfinished run)" in captured.err
    assert "answer_extraction dragin, hotpotqa rule" in captured.out


def test_the_report_says_which_runs_are_unfinished(tmp_path, capsys):
    _run(tmp_path / "runs" / "done", [_rec("q1", "So the answer is Osk.")], {"method": "dragin"})
    _run(tmp_path / "runs" / "cut", [_rec("q1", "So the answer is Osk.")], {"method": "dragin"}, metrics=False)
    runs = report.find_runs([str(tmp_path / "runs")])
    assert sorted(r.name for r in runs.evals) == ["runs/cut (unfinished)", "runs/done"]
    err = capsys.readouterr().err
    assert err.count("no metrics.json") == 1 and "cut: no metrics.json" in err and "claims" in err


def test_trace_reads_a_saved_record_as_the_other_readers_do(tmp_path, capsys):
    from inference.commands import trace

    signals = [{"round": 1, "theta": 1.0, "kept_tokens": 1, "trigger": None, "docs": [],
                "words": [{"text": "Osk", "first_token": 0, "score": 0.5, "entropy": 1.0, "attention": 0.5,
                           "content": True, "min_prob": 0.4}]}]
    run = _run(tmp_path / "run", [{**_rec("q1", "So the answer is Osk."), "signals": signals},
                                  _rec("q2", "Osk.")], {"method": "dragin"}, torn=True)
    before = (run / "predictions.jsonl").read_bytes()
    out = tmp_path / "t.html"
    # the run folder itself, or its predictions file; the torn last line is said and left alone
    assert run_cli(trace.main, argv=["--predictions", str(run), "--question_id", "q1", "--output_file", str(out)]) == 0
    assert "1 torn last line left out" in capsys.readouterr().err and "Osk" in out.read_text()
    assert (run / "predictions.jsonl").read_bytes() == before
    for argv, message in [(["--question_id", "q9"], "question id q9 not in "),
                          (["--question_id", "q2"], "record q2 of "),
                          ([], "--predictions needs --question_id")]:
        assert run_cli(trace.main, argv=["--predictions", str(run / "predictions.jsonl"), *argv,
                                         "--output_file", str(tmp_path / "u.html")]) == 2
        err = capsys.readouterr().err
        assert err.splitlines()[-1].startswith(f"error: {message}") and not (tmp_path / "u.html").exists()


def test_trace_checks_the_index_before_the_model_loads(tmp_path, capsys, monkeypatch):
    from inference.commands import trace

    monkeypatch.setattr(trace, "load_causal_lm", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded")))
    run = _run(tmp_path / "run", [_rec("q1", "Osk.")], {"method": "dragin", "index": None})
    assert run_cli(trace.main, argv=["--index", str(run), "--output_file", str(tmp_path / "t.html")]) == 2
    assert "is a run folder" in capsys.readouterr().err


def test_the_sweeps_finished_check_reports_a_torn_line_without_cutting_it(tmp_path, capsys):
    from inference.commands import sweep

    run = _run(tmp_path / "point", [_rec("q1", "Osk."), _rec("q2", "Osk.")], {"method": "dragin"}, torn=True)
    before = (run / "predictions.jsonl").read_bytes()
    assert sweep._done_ids(run) == {"q1", "q2"}
    assert "1 torn last line left out (predictions.jsonl (25 bytes))" in capsys.readouterr().err
    assert (run / "predictions.jsonl").read_bytes() == before  # evaluate cuts it when it resumes the folder


# --- a streamed BM25 build that meets a repeated id ------------------------------------------------------------

@pytest.mark.parametrize("kind", ["jsonl", "tsv"])
def test_a_repeated_passage_id_names_its_lines(kind, tmp_path, capsys):
    from retrieval_adapt import build_index

    rows = [("a", "alpha"), ("b", "beta"), ("c", "gamma"), ("a", "delta")]
    corpus = tmp_path / f"corpus.{kind}"
    if kind == "jsonl":  # a blank line counts as a line
        lines = [json.dumps({"id": i, "title": "T", "text": t}) for i, t in rows]
        corpus.write_text("\n".join(lines[:2] + [""] + lines[2:]) + "\n")
        expected = "(on lines 1 and 5)"
    else:  # the header is line 1
        corpus.write_text("id\ttext\ttitle\n" + "".join(f"{i}\t{t}\tT\n" for i, t in rows))
        expected = "(on lines 2 and 5)"
    out = tmp_path / "index"
    assert run_cli(build_index.main, argv=["--corpus", str(corpus), "--output_dir", str(out),
                                           "--chunk_size", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"passage id 'a' appears more than once {expected}" in err and err.startswith("error: ")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == [corpus.name]
