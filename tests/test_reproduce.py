"""The reproduce command without models: its tables and their steps, every printed command accepted by its own
program's parser, resume (a complete step is skipped, a changed one runs again), the report's cells, and user
mistakes in one line."""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
from pathlib import Path

import pytest

from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.errors import ConfigError
from inference.commands import reproduce as rp
from inference.commands.reproduce_plan import Options, model_slug
from inference.commands.reproduce_report import cell, differences
from inference.commands.reproduce_tables import TABLES

ROOT = Path(__file__).resolve().parents[1]


def test_list_names_every_table_with_its_steps(capsys):
    rp.main(["--list"])
    out = capsys.readouterr().out
    for name in ("dragin-table2", "adapt-llm-popqa", "iter-retgen-hotpotqa"):
        assert f"{name}: " in out
    assert "27 steps: download, index, 2wiki/wo-rag" in out  # 4 datasets x 6 methods, download, index, report
    assert "5 steps: download, train-nr, train-ar, train-adapt, report" in out
    assert "5 steps: download, corpus, index, iter-retgen, report" in out


@pytest.mark.parametrize("argv, culprit", [
    (["nope"], "unknown table 'nope'"),
    ([], "name a table"),
    (["dragin-table2", "--datasets", "hotpotqa,nq"], "--datasets nq"),
    (["dragin-table2", "--methods", "flare"], "--methods flare"),
    (["dragin-table2", "--index_kind", "contriever"], "--index_kind contriever: dragin-table2 takes bm25-es"),
    (["iter-retgen-hotpotqa", "--datasets", "hotpotqa"], "--datasets and --methods"),
    (["iter-retgen-hotpotqa", "--set", "no_such_field=1"], "--set no_such_field"),
    (["dragin-table2", "--set", "output_dir=x"], "the reproduce command sets it"),
    (["iter-retgen-hotpotqa", "--train_limit", "3"], "--train_limit is adapt-llm-popqa's"),
])
def test_a_mistake_is_one_line_naming_it(argv, culprit, capsys):
    assert run_cli(rp.main, argv=[*argv, "--dry_run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and culprit in err and len(err.strip().splitlines()) == 1


def test_a_bad_flag_value_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        rp.main(["dragin-table2", "--limit", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().startswith("error: argument --limit: expected a number >= 1")


class Parsed(Exception):
    def __init__(self, extras):
        super().__init__("parsed")
        self.extras = extras


def parses(command: str, monkeypatch) -> list[str]:
    """Run the command's program up to its own parse of the arguments (nothing after it); returns what the parser
    left over. A flag it refuses fails the test (argparse exits)."""
    words = shlex.split(command)
    assert words[:2] == ["python", "-m"], command
    module = importlib.import_module(words[2])
    original = argparse.ArgumentParser.parse_known_args

    def parse_and_stop(self, args=None, namespace=None):
        _, extras = original(self, args, namespace)
        raise Parsed(extras)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", parse_and_stop)
    try:
        module.main(words[3:])
    except Parsed as parsed:
        return parsed.extras
    finally:
        monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", original)
    raise AssertionError(f"{words[2]}: main() returned without parsing its arguments")


@pytest.mark.parametrize("argv", [
    ["dragin-table2", "--datasets", "hotpotqa,2wiki", "--model", "smollm2-135m", "--limit", "2",
     "--set", "max_new_tokens=8", "--index_kind", "bm25"],
    ["adapt-llm-popqa", "--no_cuda", "--train_limit", "4", "--limit", "2", "--set", "max_steps=1"],
    ["iter-retgen-hotpotqa", "--index_kind", "minilm", "--mirror", "/tmp"],
])
def test_the_dry_run_prints_commands_their_programs_accept(argv, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)  # the recipes are shown relative to the working folder, as a user in the checkout runs
    rp.main([*argv, "--dry-run", "--output_dir", "OUT"])
    lines = capsys.readouterr().out.strip().splitlines()
    opts = rp.options_from(rp.parser().parse_args([*argv, "--output_dir", "OUT"]), cuda=rp._has_cuda())
    assert lines == [step.command for step in TABLES[argv[0]].steps(opts)]
    for line in lines:
        assert parses(line, monkeypatch) == [], line
    assert lines[-1].startswith(f"python -m inference.commands.reproduce {argv[0]} --output_dir OUT")
    assert lines[-1].endswith("--report_only")  # the report: the same options, nothing run


def test_the_runs_take_the_options():
    opts = Options("dragin-table2", output_dir="o", model="smollm2-135m", limit=2, datasets=["hotpotqa"],
                   methods=["dragin"], sets={"max_new_tokens": "8"})
    run = [s for s in TABLES["dragin-table2"].steps(opts) if s.kind == "run"]
    assert [s.name for s in run] == ["hotpotqa/dragin"]
    args = run[0].args
    values = dict(zip(args[::2], args[1:][::2]))
    assert values["--model"] == "smollm2-135m" and values["--limit"] == "2" and values["--max_new_tokens"] == "8"
    assert values["--attention_pass"] == "authors" and values["--reference_config"] == "Llama2-7b-chat"
    others = TABLES["dragin-table2"].steps(Options("dragin-table2", datasets=["hotpotqa"], methods=["wo-rag"]))
    # the row's settings as its config gives them (the other methods read no attention: the pass is skipped there)
    assert "--attention_pass" in others[2].args and "--sampling" in others[2].args
    assert run[0].folder == "o/dragin-table2/smollm2-135m/hotpotqa/method=dragin"
    vicuna = Options("dragin-table2", model="lmsys/vicuna-13b-v1.5", datasets=["2wiki"], methods=["dragin"])
    assert "Vicuna-13b-v1.5" in TABLES["dragin-table2"].steps(vicuna)[2].args  # the authors' row of that model
    assert model_slug("meta-llama/Llama-2-7b-chat-hf") == "Llama-2-7b-chat-hf" and model_slug("a b/") == "a_b"


def fake_run(made: list[str]):
    """A step runner that writes what the real command would leave, and records the step."""
    def run(step):
        made.append(step.name)
        if step.kind == "download":
            data = Path(step.args[step.args.index("--output_dir") + 1])
            data.mkdir(parents=True, exist_ok=True)
            (data / "f.json").write_text("{}")
            (data / "manifest.json").write_text(json.dumps({s: {"files": {"f.json": {}}} for s in step.sources}))
        for out in step.outputs:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).write_text("{}")
    return run


def test_a_rerun_skips_complete_steps_and_runs_a_changed_one_again(tmp_path, monkeypatch):
    made: list[str] = []
    monkeypatch.setattr(rp, "run_step", fake_run(made))
    opts = Options("iter-retgen-hotpotqa", output_dir=str(tmp_path), limit=2, index_kind="bm25")
    logs: list[str] = []
    assert rp.reproduce(opts, log=logs.append) == ["download", "corpus", "index", "iter-retgen", "report"]
    assert rp.reproduce(opts, log=logs.append) == ["report"]  # the report always shows the runs as they are now
    assert "[2/5] corpus: complete, skipped" in logs
    # another limit is another command: the run goes again (and the evaluation resumes its own folder)
    assert rp.reproduce(Options(**{**vars(opts), "limit": 3}), log=logs.append) == ["iter-retgen", "report"]
    # a run whose folder lost its metrics is not complete, though its stamp is there
    (tmp_path / "iter-retgen-hotpotqa" / "Llama-2-7b-chat-hf" / "iter-retgen" / "metrics.json").unlink()
    assert rp.reproduce(Options(**{**vars(opts), "limit": 3}), log=logs.append) == ["iter-retgen", "report"]


def test_a_failing_step_names_itself_in_one_line(tmp_path, monkeypatch):
    def fail(argv):
        raise ConfigError("dataset x.json does not exist")

    monkeypatch.setattr(importlib.import_module("data_builders.download"), "main", fail)
    with pytest.raises(ConfigError, match="^step download: dataset x.json does not exist$"):
        rp.reproduce(Options("iter-retgen-hotpotqa", output_dir=str(tmp_path)), log=lambda _: None)


def test_a_cell_is_ours_with_its_interval_the_paper_and_the_difference():
    assert cell(0.25, (0.1, 0.4), 0.232) == ["0.250 [0.100, 0.400]", "0.232", "+0.018"]
    assert cell(1.5, (1.0, 2.0), 3.0, digits=2) == ["1.50 [1.00, 2.00]", "3.00", "-1.50"]
    assert cell(0.3, None, None) == ["0.300", "—", "—"]  # no published number: never a guess
    assert cell(None, None, 0.2) == ["—", "0.200", "—"]


def test_the_report_says_what_differs_from_the_paper():
    table = TABLES["dragin-table2"]
    same = differences(table, Options("dragin-table2"))
    assert not any(line.startswith(("model:", "questions:", "index kind:")) for line in same)
    mine = differences(table, Options("dragin-table2", model="smollm2-135m", limit=2, index_kind="bm25",
                                      datasets=["hotpotqa"], sets={"max_new_tokens": "8", "show_progress": "false"}))
    assert mine[:5] == ["model: smollm2-135m (paper: meta-llama/Llama-2-7b-chat-hf (also Llama-2-13b-chat, "
                        "Vicuna-13b-v1.5))",
                        "questions: the first 2 of each evaluation (paper: the first 1,000 questions of each dataset)",
                        "index kind: bm25 (paper: bm25-es)", "datasets: only hotpotqa",
                        "max_new_tokens: 8 (set with --set)"]
    assert not any("show_progress" in line for line in mine)  # how a run is shown is no difference
    adapt = differences(TABLES["adapt-llm-popqa"], Options("adapt-llm-popqa", cuda=False))
    assert any(line.startswith("precision: full") for line in adapt)


def _gate_folder(folder: Path, summaries: dict) -> None:
    """An ADAPT-LLM evaluation as training/adapt_llm.py leaves it: four PopQA-like questions whose closed-book answer
    is right for the first only, whose context answer is right for the first three, and whose parametric answer is
    the gold one for the first and <RET> for the others."""
    eval_dir = folder / "eval"
    eval_dir.mkdir(parents=True)
    (folder / "config.yaml").write_text("judge: contains\njudge_normalize: false\ngate_rule: token\n")
    golds = ["Lima", "Paris", "Rome", "Oslo"]
    rows = []
    for i, gold in enumerate(golds):
        rows.append({"id": str(i), "question": f"q{i}?", "answers": [gold], "output": "", "policy": "adapt_llm",
                     "retrieved": i > 0, "answered_by": "context" if i else "parametric", "p_ret": 0.1,
                     "popularity": 3, "retrievals": [], "parametric_output": gold if i == 0 else "<RET>",
                     "closed_book_output": gold if i == 0 else "no idea", "context_output": gold if i < 3 else "Bern",
                     "llm_forward_passes": 3, "generated_tokens": 3, "batch_mean_seconds": 0.1})
    (eval_dir / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (eval_dir / "summary.json").write_text(json.dumps({"summaries": summaries}))


def test_the_adapt_llm_rows_come_from_each_trained_model_with_intervals_from_its_records(tmp_path):
    from inference.commands.reproduce_report import adapt_rows

    opts = Options("adapt-llm-popqa", output_dir=str(tmp_path), model="m")
    runs = [s for s in TABLES["adapt-llm-popqa"].steps(opts) if s.kind == "run"]
    # by hand: NR answers 1 of 4 (closed-book), AR 3 of 4 (context), ADAPT-LLM 1 parametric + 2 of 3 retrieved = 3/4
    job = {"nr": [0.25, 0.75, 0.75], "ar": [0.25, 0.75, 0.75], "adapt": [0.25, 0.75, 0.75]}
    job["ar"][1] = 0.5  # this summary disagrees with its records: its row shows no interval rather than a wrong one
    for step, mode in zip(runs, ("nr", "ar", "adapt")):
        names = ("NR", "AR", "ADAPT-LLM")
        _gate_folder(Path(step.folder).parent, {
            n: {"n": 4, "accuracy": acc, "retrieval_share": share}
            for n, acc, share in zip(names, job[mode], (0.0, 1.0, 0.75))})
    lines = adapt_rows(runs)
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip("|").split("|")] for line in lines[2:]}
    assert rows["NR-LLM"][2:] == ["4", "0.250 [0.000, 0.750]", "—", "—", "0.000", "—", "—"]
    assert rows["AR-LLM"][3] == "0.500"  # no interval: the records give 0.75
    assert rows["ADAPT-LLM"][3].startswith("0.750 [") and rows["ADAPT-LLM"][6] == "0.750"


def test_ctrl_c_names_the_step_and_keeps_its_own_word(tmp_path, monkeypatch, capsys):
    def interrupted(argv):
        raise KeyboardInterrupt("1 of 2 questions are saved in x/predictions.jsonl")

    monkeypatch.setattr(importlib.import_module("data_builders.download"), "main", interrupted)
    assert run_cli(rp.main, argv=["iter-retgen-hotpotqa", "--output_dir", str(tmp_path)]) == 130
    err = capsys.readouterr().err.strip()
    assert err == ("interrupted: during step download (1 of 2 questions are saved in x/predictions.jsonl); rerun the "
                   "same command: complete steps are skipped and this one resumes")


def test_a_run_cut_off_is_scored_from_its_records_and_marked(tmp_path):
    from inference.commands.reproduce_report import dragin_rows

    opts = Options("dragin-table2", output_dir=str(tmp_path), datasets=["hotpotqa"], methods=["sr-rag", "dragin"])
    runs = [s for s in TABLES["dragin-table2"].steps(opts) if s.kind == "run"]
    folder = Path(runs[0].folder)
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(
        "method: sr-rag\ndataset: data/hotpotqa/hotpot_dev_distractor_v1.json\ndemos: hotpotqa\n"
        "dragin_profile: reference\nreference_config: Llama2-7b-chat\n")
    records = [{"id": "a", "question": "q?", "answers": ["Lima"], "output": "So the answer is Lima.",
                "retrievals": [{"round": 0, "query": "q?", "doc_ids": ["1"]}]},
               {"id": "b", "question": "r?", "answers": ["Rome"], "output": "So the answer is Oslo.",
                "retrievals": [{"round": 0, "query": "r?", "doc_ids": ["2"]}]}]
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + '{"id": "c", "quest')
    lines = dragin_rows(runs)
    cells = [c.strip() for c in lines[2].strip("|").split("|")]
    assert cells[:3] == ["hotpotqa", "sr-rag (unfinished)", "2"]  # the torn third line is left out
    assert cells[3].startswith("0.500 [") and cells[4:6] == ["0.164", "+0.336"]  # EM: one of two; the paper's
    assert cells[9:] == ["1.00 [1.00, 1.00]", "1.00", "+0.00"]
    assert lines[3] == "| hotpotqa | dragin | 0 | " + " | ".join(["—"] * 9) + " |"  # not run yet
