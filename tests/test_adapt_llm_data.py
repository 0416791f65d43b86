"""ADAPT-LLM data: the prompts (exact text), Algorithm 1's branches, the resumable closed-book step, sources,
splits, the builder's outputs and its CLI. A stub generator and a stub judge stand in for the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from adaptive_rag.lm.base_model import BaseModelConfig
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.records import Passage, QAExample
from data_builders import adapt_closed_book
from data_builders.adapt_llm import (
    AdaptDataConfig,
    algorithm1,
    build_adapt_dataset,
    check_schema,
    load_adapt_dataset,
    load_source,
    main,
    make_judge,
    split_rows,
)
from data_builders.adapt_llm_prompts import (
    TEMPLATE_DIR,
    context_prompt,
    never_retrieve_prompt,
    parametric_prompt,
)
from data_builders.adapt_world import world_split

HEAD = ("Below is an instruction that describes a task, paired with an input that provides further context. "
        "Write a response that appropriately completes the request.\n\n### Instruction:\n")


def _examples(n: int = 5) -> list[QAExample]:
    return [QAExample(id=f"q{i}", question=f"Who founded Org{i}?", answers=[f"Founder {i}", f"F{i}"],
                      gold_passages=[Passage(f"p{i}", f"Org{i}", f"Org{i} was founded by Founder {i}.")])
            for i in range(n)]


def _write_source(tmp_path: Path, examples: list[QAExample]) -> Path:
    path = tmp_path / "qa.jsonl"
    path.write_text("".join(json.dumps(ex.to_dict()) + "\n" for ex in examples))
    return path


def _cfg(tmp_path: Path, source: Path, **kw) -> AdaptDataConfig:
    """Algorithm 1 over a QA file, in file order unless ``shuffle_seed`` is given."""
    kw = {"shuffle_seed": None, "closed_book_batch_size": 2, **kw}
    return AdaptDataConfig(data_dir=str(tmp_path / "data"), dataset=str(source), **kw)


class CountingAnswers:
    """Answers "Founder i" for even i (correct), "no idea" for odd i; records every question it was asked."""

    def __init__(self, crash_after: int | None = None):
        self.asked: list[str] = []
        self.crash_after = crash_after

    def __call__(self, batch):
        if self.crash_after is not None and len(self.asked) >= self.crash_after:
            raise KeyboardInterrupt("simulated crash")
        self.asked += [ex.id for ex in batch]
        return [f"It was Founder {ex.id[1:]}." if int(ex.id[1:]) % 2 == 0 else "no idea" for ex in batch]


def test_prompt_text_exact():
    assert parametric_prompt("Who wrote Hamlet?") == (
        HEAD + "Answer the question Q. If you need help answer <RET> to get the context.\n\n"
        "### Input:\nQ: Who wrote Hamlet?\n\n### Response:\n")
    assert context_prompt("Who wrote Hamlet?", [Passage("p", "Hamlet", "Hamlet is by Shakespeare.")]) == (
        HEAD + "Answer the question Q given the context C.\n\n### Input:\nQ: Who wrote Hamlet?\n"
        "C: Hamlet is by Shakespeare.\n\n### Response:\n")
    assert never_retrieve_prompt("Who wrote Hamlet?") == (
        HEAD + "Answer the question Q.\n\n### Input:\nQ: Who wrote Hamlet?\n\n### Response:\n")
    assert "answer the question Q given the context C\n" in context_prompt("q?", ["c"], variant="reference")


def test_context_prompt_cuts_and_joins_passages():
    text = context_prompt("q?", ["one two three four", "five six"], max_passage_words=2)
    assert "C: one two\nfive six\n\n### Response:\n" in text
    with pytest.raises(ValueError, match="at least one passage"):
        context_prompt("q?", [])
    with pytest.raises(ValueError, match="unknown prompt variant"):
        parametric_prompt("q?", variant="nope")


def test_templates_are_data_and_readme_paths_exist():
    for name in ("alpaca.json", "adapt_llm.json"):
        json.loads((TEMPLATE_DIR / name).read_text())
    readme = (TEMPLATE_DIR / "README.md").read_text()
    root = TEMPLATE_DIR.parents[1]
    for path in ("data_builders/adapt_llm_prompts.py",):
        assert path in readme and (root / path).is_file()


def test_algorithm1_branches_with_stub_judge():
    examples = _examples(2)
    judge_calls = []

    def judge(pred, golds):  # "correct" exactly when the stub answer says so
        judge_calls.append((pred, list(golds)))
        return pred == "RIGHT"

    rows = algorithm1(examples, {"q0": "RIGHT", "q1": "WRONG"}, judge)
    assert judge_calls == [("RIGHT", ["Founder 0", "F0"]), ("WRONG", ["Founder 1", "F1"])]
    assert [(r["question_id"], r["kind"], r["completion"]) for r in rows] == [
        ("q0", "parametric_answer", "Founder 0"),
        ("q1", "parametric_ret", "<RET>"),
        ("q1", "context", "Founder 1"),
    ]
    assert rows[0]["prompt"] == rows[1]["prompt"].replace("Org1", "Org0") == parametric_prompt("Who founded Org0?")
    assert rows[2]["prompt"] == context_prompt("Who founded Org1?", examples[1].gold_passages)


def test_closed_book_parametric_target():
    rows = algorithm1(_examples(1), {"q0": "It was Founder 0."}, lambda p, g: True, parametric_target="closed_book")
    assert [(r["kind"], r["completion"]) for r in rows] == [("parametric_answer", "It was Founder 0.")]


def test_judges():
    contains = make_judge("contains")
    assert contains("It was the Founder 0!", ["founder 0"]) and not contains("nobody", ["Founder 0"])
    raw = make_judge("contains", normalize=False)
    assert raw("FOUNDER 0 did", ["Founder 0"]) and not raw("Founder, 0", ["Founder 0"])
    em = make_judge("exact_match")
    assert em("the Founder 0.", ["Founder 0"]) and not em("It was Founder 0", ["Founder 0"])
    with pytest.raises(ValueError, match="unknown judge"):
        make_judge("fuzzy")


def test_build_writes_dataset_stats_config(tmp_path):
    cfg = _cfg(tmp_path, _write_source(tmp_path, _examples(10)), validation_fraction=0.2)
    dsd = build_adapt_dataset(cfg, answer_fn=CountingAnswers(), show_progress=False)
    check_schema(dsd)
    assert set(dsd) == {"train", "validation"}
    assert dsd["train"].column_names == ["prompt", "completion", "kind", "question_id"]
    train_q, val_q = set(dsd["train"]["question_id"]), set(dsd["validation"]["question_id"])
    assert len(val_q) == 2 and not train_q & val_q  # whole questions per split
    stats = json.loads((tmp_path / "data" / "stats.json").read_text())
    assert (stats["questions"], stats["correct"], stats["ret_instances"], stats["context_instances"]) == (10, 5, 5, 5)
    assert stats["judge"] == "contains" and stats["base_model"] == "smollm2-135m" and len(stats["source_sha256"]) == 64
    saved = yaml.safe_load((tmp_path / "data" / "config.yaml").read_text())
    assert saved["dataset"] == cfg.dataset and saved["judge"] == "contains" and stats["dataset"] == cfg.dataset
    assert saved["base_model"] == "smollm2-135m"  # the model config is saved beside the data config
    again = load_adapt_dataset(cfg.data_dir)
    assert again["train"]["prompt"] == dsd["train"]["prompt"]


def test_split_is_seeded():
    rows = algorithm1(_examples(20), {f"q{i}": "x" for i in range(20)}, lambda p, g: False)
    a, b, c = split_rows(rows, 0.25, 0), split_rows(rows, 0.25, 0), split_rows(rows, 0.25, 1)
    assert a["validation"]["question_id"] == b["validation"]["question_id"] != c["validation"]["question_id"]


def test_resume_after_crash_loses_and_repeats_nothing(tmp_path):
    cfg = _cfg(tmp_path, _write_source(tmp_path, _examples(5)), validation_fraction=0.0)
    crashing = CountingAnswers(crash_after=2)  # the first batch (2 questions) completes, then the crash
    with pytest.raises(KeyboardInterrupt):
        build_adapt_dataset(cfg, answer_fn=crashing, show_progress=False)
    lines = (tmp_path / "data" / "closed_book.jsonl").read_text().splitlines()
    assert len(lines) == 2
    resumed = CountingAnswers()
    dsd = build_adapt_dataset(cfg, answer_fn=resumed, show_progress=False)
    assert sorted(resumed.asked) == sorted(set(f"q{i}" for i in range(5)) - set(crashing.asked))
    ids = [json.loads(line)["id"] for line in (tmp_path / "data" / "closed_book.jsonl").read_text().splitlines()]
    assert sorted(ids) == [f"q{i}" for i in range(5)]  # no duplicates, none lost
    assert len(set(dsd["train"]["question_id"])) == 5
    assert build_adapt_dataset(cfg, answer_fn=CountingAnswers(crash_after=0), show_progress=False)  # nothing asked


def test_torn_last_line_is_dropped_and_labeller_checked(tmp_path):
    path = tmp_path / "closed_book.jsonl"
    who = {"model": "m", "prompt_variant": "paper", "max_new_tokens": 4}
    path.write_text(json.dumps({"id": "q0", "answer": "a", "labeller": who}) + "\n" + '{"id": "q1", "ans')
    assert adapt_closed_book.read_answers(path, who) == {"q0": "a"}
    assert path.read_text().count("\n") == 1 and "q1" not in path.read_text()
    with pytest.raises(DataError, match="written by"):
        adapt_closed_book.read_answers(path, {**who, "model": "other"})
    path.write_text('{"broken\n' + json.dumps({"id": "q0", "answer": "a", "labeller": who}) + "\n")
    with pytest.raises(DataError, match=r"line 1: not a JSON record"):  # the shared RecordLog's message
        adapt_closed_book.read_answers(path, who)


def test_missing_gold_passages_is_a_clear_error(tmp_path):
    no_gold = [QAExample(id="q0", question="Who?", answers=["x"])]
    cfg = _cfg(tmp_path, _write_source(tmp_path, no_gold))
    with pytest.raises(DataError, match="Algorithm 1 needs gold passages"):
        build_adapt_dataset(cfg, answer_fn=CountingAnswers(), show_progress=False)


def test_world_split_disjoint_stratified_deterministic():
    train, held = world_split(0, 0.2, 0)
    assert not {ex.id for ex in train} & {ex.id for ex in held}
    assert world_split(0, 0.2, 0)[1] == held
    kinds = {ex.metadata["kind"] for ex in held}
    assert kinds == {"fictional", "common"}
    facts = {(ex.metadata["entity"], ex.metadata["relation"]) for ex in held if "entity" in ex.metadata}
    assert not any((ex.metadata.get("entity"), ex.metadata.get("relation")) in facts for ex in train)


def test_world_source_sampling(tmp_path):
    cfg = AdaptDataConfig(data_dir=str(tmp_path), limit=40, world_common_fraction=0.5)
    examples = load_source(cfg)
    assert len(examples) == 40 and sum(ex.metadata["kind"] == "common" for ex in examples) == 20
    heldout = {ex.id for ex in world_split(0, 0.2, 0)[1]}
    assert not heldout & {ex.id for ex in examples}


@pytest.mark.parametrize("override, message", [
    (["--validation_fraction", "1.5"], "validation_fraction"),
    (["--dataset_format", "csv"], "dataset_format"),
    (["--closed_book_batch_size", "0"], "closed_book_batch_size"),
])
def test_bad_config_fails(override, message):
    from adaptive_rag.plumbing.config import parse_config

    with pytest.raises(ConfigError, match=message):
        parse_config((AdaptDataConfig,), override)


def test_cli_from_yaml_resumes_without_a_model(tmp_path, capsys):
    """The CLI on a temporary YAML; every answer is already on disk, so no model is loaded."""
    examples = _examples(3)
    source = _write_source(tmp_path, examples)
    cfg = _cfg(tmp_path, source, validation_fraction=0.0)
    (tmp_path / "data").mkdir()
    with (tmp_path / "data" / "closed_book.jsonl").open("w") as f:
        for ex in examples:
            f.write(json.dumps({"id": ex.id, "answer": "no idea", "labeller": cfg.labeller(BaseModelConfig())}) + "\n")
    config = tmp_path / "adapt.yaml"
    config.write_text(yaml.safe_dump({"data_dir": cfg.data_dir, "dataset": str(source), "shuffle_seed": None,
                                      "validation_fraction": 0.0}))
    assert run_cli(main, argv=[str(config)]) == 0
    assert "3 questions, 0 answered correctly" in capsys.readouterr().out
    config.write_text(yaml.safe_dump({"data_dir": cfg.data_dir, "sourse": "x"}))
    assert run_cli(main, argv=[str(config)]) == 2
    assert "unknown field(s) sourse" in capsys.readouterr().err


def test_file_source_first_or_seeded_sample(tmp_path):
    source = _write_source(tmp_path, _examples(5))
    first = load_source(_cfg(tmp_path, source, limit=3))
    assert [ex.id for ex in first] == [ex.id for ex in _examples(5)[:3]]
    sample = load_source(_cfg(tmp_path, source, limit=3, shuffle_seed=0))
    assert len(sample) == 3 and [ex.id for ex in sample] == [
        ex.id for ex in load_source(_cfg(tmp_path, source, limit=3, shuffle_seed=0))]
    everything = load_source(_cfg(tmp_path, source, shuffle_seed=0))
    assert sorted(ex.id for ex in everything) == sorted(ex.id for ex in _examples(5))


class NoModel:
    """A closed-book generator that must never be asked (the nr and ar baselines need no closed-book pass)."""

    def __call__(self, batch):
        raise AssertionError(f"asked {len(batch)} questions closed-book")


@pytest.mark.parametrize("mode", ["nr", "ar"])
def test_baseline_modes_build_one_gold_instance_per_question(tmp_path, mode):
    """The paper's NR-LLM and AR-LLM training sets from the same source, checked by hand on three questions."""
    examples = _examples(3)
    cfg = _cfg(tmp_path, _write_source(tmp_path, examples), validation_fraction=0.0, mode=mode)
    dsd = build_adapt_dataset(cfg, answer_fn=NoModel(), show_progress=False)
    got = sorted(zip(dsd["train"]["question_id"], dsd["train"]["kind"], dsd["train"]["prompt"],
                     dsd["train"]["completion"]))
    if mode == "nr":
        assert [(q, k, c) for q, k, _, c in got] == [("q0", "never_retrieve", "Founder 0"),
                                                      ("q1", "never_retrieve", "Founder 1"),
                                                      ("q2", "never_retrieve", "Founder 2")]
        assert got[1][2] == HEAD + "Answer the question Q.\n\n### Input:\nQ: Who founded Org1?\n\n### Response:\n"
    else:
        assert [(q, k, c) for q, k, _, c in got] == [("q0", "context", "Founder 0"), ("q1", "context", "Founder 1"),
                                                      ("q2", "context", "Founder 2")]
        assert got[2][2] == (HEAD + "Answer the question Q given the context C.\n\n### Input:\nQ: Who founded Org2?\n"
                             "C: Org2 was founded by Founder 2.\n\n### Response:\n")
    assert not (tmp_path / "data" / "closed_book.jsonl").exists()
    stats = json.loads((tmp_path / "data" / "stats.json").read_text())
    assert (stats["mode"], stats["questions"], stats["instances"]) == (mode, 3, 3)
    assert stats["context_instances"] == (3 if mode == "ar" else 0)
    assert yaml.safe_load((tmp_path / "data" / "config.yaml").read_text())["mode"] == mode
    with pytest.raises(DataError, match=f"holds the mode '{mode}' dataset, not 'adapt'"):  # one mode per data_dir
        build_adapt_dataset(_cfg(tmp_path, Path(cfg.dataset)), answer_fn=CountingAnswers(), show_progress=False)


def test_base_model_is_a_model_setting(tmp_path):
    """base_model lives on BaseModelConfig, not on the data config; the flat YAML/flags still reach it, and the
    builder records the model it was given."""
    from dataclasses import fields

    from adaptive_rag.plumbing.config import parse_config
    from training.adapt_llm_config import AdaptEvalConfig, AdaptTrainConfig

    assert "base_model" not in {f.name for f in fields(AdaptDataConfig)}
    model, data, _, _ = parse_config((BaseModelConfig, AdaptDataConfig, AdaptTrainConfig, AdaptEvalConfig),
                                     ["--base_model", "x"])
    assert model.base_model == "x" and not hasattr(data, "base_model")
    cfg = _cfg(tmp_path, _write_source(tmp_path, _examples(2)), validation_fraction=0.0)
    build_adapt_dataset(cfg, answer_fn=CountingAnswers(), show_progress=False, model=BaseModelConfig("my-model"))
    assert json.loads((tmp_path / "data" / "stats.json").read_text())["base_model"] == "my-model"
    assert yaml.safe_load((tmp_path / "data" / "config.yaml").read_text())["base_model"] == "my-model"
    labels = {json.loads(line)["labeller"]["model"] for line in (tmp_path / "data" / "closed_book.jsonl").open()}
    assert labels == {"my-model"}


def test_mode_is_checked():
    from adaptive_rag.plumbing.config import parse_config

    assert parse_config((AdaptDataConfig,), [])[0].mode == "adapt"
    with pytest.raises((ConfigError, SystemExit)):
        parse_config((AdaptDataConfig,), ["--mode", "sometimes"])
    with pytest.raises(ValueError, match="mode must be one of adapt, nr, ar"):
        AdaptDataConfig(mode="sometimes")


def _long_passage(answer_at: int, n: int = 300, answer: str = "Zanzibar") -> str:
    return " ".join(answer if i == answer_at else f"w{i}" for i in range(n))


def test_answer_window_keeps_an_answer_beyond_the_first_words():
    from data_builders.adapt_llm_prompts import answer_window

    # answer at word 150 of 300, 100 words kept: centred, 49 words before it and 50 after (slack 99 // 2)
    cut = answer_window(_long_passage(150), 100, ["zanzibar"])
    words = cut.text.split(" ")
    assert (cut.cut, cut.recentred, len(words)) == (True, True, 100)
    assert words[0] == "w101" and words[49] == "Zanzibar" and words[-1] == "w200"
    near_end = answer_window(_long_passage(295), 100, ["Zanzibar"]).text.split(" ")  # window stops at the end
    assert near_end[0] == "w200" and near_end[-1] == "w299" and "Zanzibar" in near_end
    early = answer_window(_long_passage(40), 100, ["Zanzibar"])  # inside the first 100 words: a plain cut
    assert (early.cut, early.recentred) == (True, False) and early.text.split(" ")[-1] == "w99"
    missing = answer_window(_long_passage(150), 100, ["Atlantis"])
    assert (missing.recentred, missing.text.split(" ")[-1]) == (False, "w99")
    alias = answer_window(_long_passage(150), 100, ["Atlantis", "ZANZIBAR"])  # target absent: an alias counts
    assert alias.recentred and "Zanzibar" in alias.text
    two_words = answer_window(_long_passage(150, answer="Zanzibar City"), 100, ["Zanzibar City"]).text.split(" ")
    assert two_words[0] == "w101" and two_words[49:51] == ["Zanzibar", "City"]  # span 2: slack 98, 49 before
    short = answer_window("a b c", 100, ["b"])
    assert (short.text, short.cut, short.recentred) == ("a b c", False, False)


def test_algorithm1_context_keeps_the_answer_and_stats_count_the_cuts(tmp_path):
    examples = [QAExample(id=f"q{i}", question=f"Where is Org{i}?", answers=["Zanzibar"],
                          gold_passages=[Passage(f"p{i}", f"Org{i}", _long_passage(at))])
                for i, at in enumerate((150, 40, 10))]
    examples[2].gold_passages[0] = Passage("p2", "Org2", "Org2 is in Zanzibar.")  # short: never cut
    cfg = _cfg(tmp_path, _write_source(tmp_path, examples), validation_fraction=0.0, max_passage_words=100)
    dsd = build_adapt_dataset(cfg, answer_fn=lambda batch: ["no idea"] * len(batch), show_progress=False)
    contexts = [p for p, k in zip(dsd["train"]["prompt"], dsd["train"]["kind"]) if k == "context"]
    assert len(contexts) == 3 and all("Zanzibar" in p for p in contexts)  # a head cut would lose q0's answer
    stats = json.loads((tmp_path / "data" / "stats.json").read_text())
    assert (stats["passages_cut"], stats["passages_recentred"], stats["answer_not_in_passages"]) == (2, 1, 0)
    assert stats["mode"] == "adapt" and stats["max_passage_words"] == 100
