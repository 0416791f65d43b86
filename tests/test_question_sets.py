"""One question-set spec (QuestionSet: name, split, start, limit, shuffle_seed), one loader, one vocabulary of
embedded names; the shipped recipes select exactly the questions they selected before the spec was unified."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml

import data_builders.question_loader as question_sets
from adaptive_rag.lm.base_model import BaseModelConfig
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError, DataError
from adaptive_rag.plumbing.question_set import QuestionSet
from adaptive_rag.plumbing.records import QAExample
from data_builders.adapt_llm import AdaptDataConfig, load_source
from data_builders.question_loader import QuestionsConfig, WorldOptions, load_questions
from inference.commands.eval_data import question_at
from inference.commands.evaluate import EngineConfig, EvalConfig, GateMethodConfig, MethodConfig, PromptConfig
from training.adapt_llm_config import AdaptEvalConfig, AdaptTrainConfig
from training.adapt_llm_eval import eval_questions
from training.distill_set import RetrievalAdaptDataConfig
from training.evaluate_adapted import EvaluateAdaptedConfig

ROOT = Path(__file__).resolve().parents[1]
EVALUATE = (EvalConfig, MethodConfig, PromptConfig, EngineConfig, GateMethodConfig)
ADAPT = (BaseModelConfig, AdaptDataConfig, AdaptTrainConfig, AdaptEvalConfig)

# (how many, sha256 of the ids joined by newlines) of every shipped recipe's questions, computed with the code
# before the spec was unified (questions: world:two_hop + start/end, source: world + source_limit, eval_source).
BEFORE = {
    "retrieval_adapt/configs/data_world.yaml":
        (100, "997f9757f2c1520b1dfae40cecb0dd00058a4ef6a4507a76993c886ee24286f4"),
    "retrieval_adapt/configs/evaluate_world.yaml":
        (50, "a21d0d817a74e60de2ce50594e2beddacedb20363c58ca6b1633282b7845c02f"),
    "inference/configs/eval_example.yaml": (50, "7bebe961b58f62ce96ef7d8fe30a364b7c30b86ddcb2fb5e6c3df41cb5418b7b"),
    "bench/experiments/world_six_methods.yaml":
        (100, "c33e13f224799e91636286df5c72ba7e4d880b4c44ee2c23cbafd8abe7569c8f"),
    "bench/experiments/world_theta.yaml": (50, "7bebe961b58f62ce96ef7d8fe30a364b7c30b86ddcb2fb5e6c3df41cb5418b7b"),
    "bench/experiments/world_tune.yaml": (50, "7bebe961b58f62ce96ef7d8fe30a364b7c30b86ddcb2fb5e6c3df41cb5418b7b"),
    "training/configs/adapt_llm_demo_cpu.yaml":
        (192, "b29f4cd3da9c0115541a20c9e3b9c0cb8ee4c7ea5699da5246a681730eedf2a7"),
    "training/configs/adapt_llm_demo_cpu.yaml:eval":
        (94, "3415cf3dcb2479873bade59230ea890be0f58fcea694729b947c8c99eb679f3f"),
    "training/configs/search_sft_demo_cpu.yaml":  # a seeded sample of 64 world training questions
        (64, "7c67570efc659cfe545c6944a79d33528aabd17d2ab1fcc1706422549cb13f57"),
    "training/configs/adapt_llm_paper.yaml": (374, "d65987fd414841beb6720f02db4e229f7ca27ca95edbabb613c786cd5b9e00cd"),
    "training/configs/adapt_llm_paper.yaml:eval":
        (94, "3415cf3dcb2479873bade59230ea890be0f58fcea694729b947c8c99eb679f3f"),
}
# Recipes whose questions exist only in a `data_builders.download` folder: the GPU recipes, and the real-data
# recipes that read the development copies before (their digests were of those files, not the official ones).
DOWNLOAD_ONLY = {
    "retrieval_adapt/configs/data_hotpotqa.yaml", "retrieval_adapt/configs/evaluate_hotpotqa.yaml",
    "bench/experiments/hotpotqa_six_methods.yaml", "bench/experiments/hotpotqa_table.yaml",
    "bench/experiments/hotpotqa_tune.yaml", "training/configs/adapt_llm_squad_popqa_cpu.yaml",
    "training/configs/adapt_llm_llama2_7b_lora.yaml", "training/configs/adapt_llm_llama2_7b_qlora.yaml",
    "inference/configs/iter_retgen_hotpotqa_contriever.yaml", "training/configs/adapt_llm_authors.yaml",
    "retrieval_adapt/configs/data_paper.yaml",
    # one per row the DRAGIN authors ran (their first 1,000 questions of each set)
    *(str(p.relative_to(ROOT)) for p in ROOT.glob("inference/configs/dragin_reference/*.yaml")),
}
# README commands that name their questions on the command line (python -m inference.commands.evaluate ...).
BEFORE_CLI = {
    ("--dataset", "world-two-hop", "--limit", "50"): (
        50, "7bebe961b58f62ce96ef7d8fe30a364b7c30b86ddcb2fb5e6c3df41cb5418b7b"),
    ("--dataset", "world-two-hop"): (150, "e6241cd1ff53e8e1739981752f05623135b0fe0c74d43de6fab23c3c80aec055"),
    ("--dataset", "world-single-hop"): (300, "2876598f5a3cc6701581b3fa17c6a8be18cb9446481cd93f3164b7ead6d51532"),
    ("--dataset", "world-common-knowledge"): (168, "ff5ebaf4296201b64832ec4c354f5fddab9925e4e3b126b29b3c54fec1dd31d0"),
}


def digest(examples: list[QAExample]) -> tuple[int, str]:
    return len(examples), hashlib.sha256("\n".join(ex.id for ex in examples).encode()).hexdigest()


def recipe_questions(recipe: str, tmp_path: Path) -> list[QAExample]:
    """The questions a shipped recipe runs on, parsed by its own program's config classes."""
    path, _, part = recipe.partition(":")
    data = yaml.safe_load((ROOT / path).read_text())
    named = [data.get(k) for k in ("dataset", "eval_dataset")]
    files = [n for n in named if n and not n.startswith("world-")]
    if any(not (ROOT / f).exists() for f in files):
        pytest.skip(f"needs the development data ({', '.join(files)})")
    if "search_sft" in path:  # training/search_sft.py: Algorithm 1's questions, no evaluation of its own
        from training.search_sft import CONFIG_TYPES

        return load_source(parse_config(CONFIG_TYPES, [str(ROOT / path)])[1])
    if path.startswith("training/"):
        _, data_cfg, _, eval_cfg = parse_config(ADAPT, [str(ROOT / path)])
        return eval_questions(data_cfg, eval_cfg) if part == "eval" else load_source(data_cfg)
    if path.startswith("retrieval_adapt/"):
        other = RetrievalAdaptDataConfig if Path(path).name.startswith("data") else EvaluateAdaptedConfig
        qcfg, _ = parse_config((QuestionsConfig, other), [str(ROOT / path)])
        return load_questions(qcfg.question_set(), fmt=qcfg.dataset_format, world=qcfg.world())
    data.pop("sweep", None)  # a sweep's grid varies methods and knobs, never the questions
    plain = tmp_path / "recipe.yaml"
    plain.write_text(yaml.safe_dump(data))
    cfg = parse_config(EVALUATE, [str(plain)])[0]
    return load_questions(QuestionSet.of(cfg), fmt=cfg.dataset_format, world=WorldOptions(seed=cfg.world_seed))


@pytest.mark.parametrize("recipe", sorted(BEFORE))
def test_shipped_recipes_select_the_questions_they_did_before(recipe, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the recipes name data/ (the download folder) relative to the repository
    assert digest(recipe_questions(recipe, tmp_path)) == BEFORE[recipe]


def test_every_shipped_recipe_is_in_the_table():
    recipes = [*ROOT.glob("retrieval_adapt/configs/*.yaml"), *ROOT.glob("bench/experiments/*.yaml"),
               *ROOT.glob("inference/configs/*.yaml"), *ROOT.glob("inference/configs/*/*.yaml"),
               *ROOT.glob("training/configs/*.yaml")]
    # distill_*: no questions; knowing_*: a knowing-model build's files (tests/test_knowing.py runs them on a tiny one);
    # grpo_*: training/grpo.py's config types (tests/test_grpo.py checks their questions)
    shipped = {str(p.relative_to(ROOT)) for p in recipes
               if "distill_" not in p.name and "knowing_" not in p.name and "grpo_" not in p.name}
    assert shipped == {k.partition(":")[0] for k in BEFORE} | DOWNLOAD_ONLY


@pytest.mark.parametrize("argv", sorted(BEFORE_CLI))
def test_readme_commands_select_the_questions_they_did_before(argv):
    cfg = parse_config(EVALUATE, list(argv))[0]
    examples = load_questions(QuestionSet.of(cfg), fmt=cfg.dataset_format, world=WorldOptions(seed=cfg.world_seed))
    assert digest(examples) == BEFORE_CLI[argv]
    assert question_at("world-two-hop", 3).id == "world-q-bridge-0003"  # inference.commands.trace --question_index 3


def test_shuffle_then_slice_by_hand():
    items = list("abcdef")
    assert QuestionSet("x", start=1, limit=2).select(items) == ["b", "c"]
    assert QuestionSet("x", start=4).select(items) == ["e", "f"]
    # random.Random(0).shuffle(list("abcdef")) gives e c b a f d; then [1:4]
    assert QuestionSet("x", start=1, limit=3, shuffle_seed=0).select(items) == ["c", "b", "a"]
    assert QuestionSet("x", limit=100).select(items) == items
    with pytest.raises(ConfigError, match=r"start 6 is past the end of x \(6 questions: 0 to 5\)"):
        QuestionSet("x", start=6).select(items)


@pytest.mark.parametrize("fields, message", [
    ({"limit": 0}, "limit must be >= 1 or null"),
    ({"start": -1}, "start must be >= 0"),
    ({"name": ""}, "needs a name"),
    ({"name": "world-two-hop", "split": "train"}, "the embedded set world-two-hop has no splits"),
    ({"name": "world-three-hop"}, "not an embedded set; known: world-two-hop, world-single-hop"),
])
def test_bad_spec_is_one_config_error(fields, message):
    with pytest.raises(ConfigError, match=message):
        QuestionSet(**{"name": "world-two-hop", **fields})


@pytest.mark.parametrize("old, new", [
    ("world:two_hop", "world-two-hop"), ("world:single_hop", "world-single-hop"),
    ("world:common_knowledge", "world-common-knowledge"), ("world-common", "world-common-knowledge"),
    ("world", "world-adapt-train"), ("world_heldout", "world-adapt-heldout"),
])
def test_old_embedded_names_fail_naming_the_new_one(old, new):
    with pytest.raises(ConfigError, match=f"question set '{old}' was renamed: use '{new}'"):
        QuestionSet(old)
    for config, field in ((EvalConfig, "dataset"), (QuestionsConfig, "dataset"), (AdaptDataConfig, "dataset"),
                          (AdaptEvalConfig, "eval_dataset")):
        with pytest.raises(ConfigError, match=f"use '{new}'"):
            config(**{field: old})


@pytest.mark.parametrize("types, fields, message", [
    ((QuestionsConfig, RetrievalAdaptDataConfig), {"questions": "world:two_hop"}, "questions was renamed: use dataset"),
    ((QuestionsConfig, RetrievalAdaptDataConfig), {"questions_format": "hotpotqa"},
     "questions_format was renamed: use dataset_format"),
    ((QuestionsConfig, RetrievalAdaptDataConfig), {"end": 100}, r"end was renamed: use limit, the number of questions"),
    ((QuestionsConfig, RetrievalAdaptDataConfig), {"k": 5}, "k was renamed: use top_k"),
    ((QuestionsConfig, EvaluateAdaptedConfig), {"end": 150}, "end was renamed: use limit"),
    ((QuestionsConfig, EvaluateAdaptedConfig), {"k": 5}, "k was renamed: use top_k"),
    (ADAPT, {"source": "world"}, r"source was renamed: use dataset \(world is now world-adapt-train\)"),
    (ADAPT, {"source_format": "squad"}, "source_format was renamed: use dataset_format"),
    (ADAPT, {"source_limit": 10}, "source_limit was renamed: use limit"),
    (ADAPT, {"source_shuffle": True}, r"source_shuffle was renamed: use shuffle_seed \(true: shuffle_seed 0"),
    (ADAPT, {"eval_source": "world_heldout"}, "eval_source was renamed: use eval_dataset"),
    (ADAPT, {"eval_format": "popqa_json"}, "eval_format was renamed: use eval_dataset_format"),
])
def test_renamed_fields_fail_naming_the_new_one(types, fields, message, tmp_path):
    recipe = tmp_path / "old.yaml"
    recipe.write_text(yaml.safe_dump(fields))
    with pytest.raises(ConfigError, match=f"old.yaml: {message}"):
        parse_config(types, [str(recipe)])
    (name, value), = fields.items()
    with pytest.raises(ConfigError, match=f"--{message.replace('use ', 'use --', 1)}"):
        parse_config(types, [f"--{name}", str(value)])


def test_a_renamed_flag_ends_in_one_line(capsys):
    from training.distill_set import main

    assert run_cli(main, argv=["--end", "20"]) == 2
    assert capsys.readouterr().err == ("error: --end was renamed: use --limit, the number of questions from start "
                                       "(end 100 from start 0 = limit 100)\n")


def test_every_flat_config_spells_its_question_set_alike():
    for config, prefix in ((EvalConfig, ""), (QuestionsConfig, ""), (AdaptDataConfig, ""), (AdaptEvalConfig, "eval_")):
        fields = set(config.__dataclass_fields__)
        assert {f"{prefix}{f}" for f in ("dataset", "dataset_format", "split", "start", "limit",
                                         "shuffle_seed")} <= fields, config.__name__
    cfg = AdaptEvalConfig(eval_dataset="q.jsonl", eval_start=2, eval_limit=3, eval_shuffle_seed=1)
    assert QuestionSet.of(cfg, prefix="eval_") == QuestionSet("q.jsonl", None, 2, 3, 1)


def _write(path: Path, ids: list[str]) -> Path:
    path.write_text("".join(json.dumps({"id": i, "question": f"{i}?", "answers": ["a"]}) + "\n" for i in ids))
    return path


def test_a_file_is_sliced_and_its_ids_must_be_unique(tmp_path):
    path = _write(tmp_path / "q.jsonl", ["a", "b", "c", "d"])
    assert [e.id for e in load_questions(QuestionSet(str(path), start=1, limit=2))] == ["b", "c"]
    _write(path, ["a", "b", "a"])  # the distillation builder and Algorithm 1 key their logs on the id too
    with pytest.raises(DataError, match=r"question id 'a' is used twice \(questions 0 and 2\)"):
        load_questions(QuestionSet(str(path)))
    with pytest.raises(ConfigError, match="'nope.jsonl' is neither an embedded set"):
        load_questions(QuestionSet("nope.jsonl"))
    with pytest.raises(ConfigError, match="split 'train' is for a hub dataset"):
        load_questions(QuestionSet(str(path), split="train"))


def test_a_hub_split_reaches_the_reader(monkeypatch):
    asked = []

    def read_qa(name, format=None, limit=None):
        asked.append((name, format))
        return [QAExample("q0", "?", ["a"])]

    monkeypatch.setattr(question_sets, "read_qa", read_qa)
    load_questions(QuestionSet("org/popqa", split="test"), fmt="hf")
    load_questions(QuestionSet("org/popqa"), fmt="hf")
    assert asked == [("org/popqa@test", "hf"), ("org/popqa", "hf")]
    with pytest.raises(ConfigError, match="names its split after '@' and split says 'test'"):
        load_questions(QuestionSet("org/popqa@dev", split="test"), fmt="hf")


def test_world_adapt_sets_are_the_train_and_heldout_parts():
    train = load_questions(QuestionSet("world-adapt-train"))
    held = load_questions(QuestionSet("world-adapt-heldout"))
    assert (len(train), len(held)) == (374, 94) and not {e.id for e in train} & {e.id for e in held}
    other_split = load_questions(QuestionSet("world-adapt-heldout"), world=WorldOptions(heldout_seed=1))
    assert {e.id for e in other_split} != {e.id for e in held}
    mixed = load_questions(QuestionSet("world-adapt-train", limit=40, shuffle_seed=0),
                           world=WorldOptions(common_fraction=0.5))
    assert sum(e.metadata["kind"] == "common" for e in mixed) == 20
    with pytest.raises(ConfigError, match="world_common_fraction mixes a seeded sample of world-adapt-train"):
        load_questions(QuestionSet("world-adapt-train", limit=40), world=WorldOptions(common_fraction=0.5))


def test_download_recipes_keep_a_clean_split_of_one_file():
    """The HotpotQA recipes read the downloaded dev file: training and tuning on questions 0-399, reporting on
    400-499, never overlapping (their questions cannot be digested here: the file is downloaded by the user)."""
    spans = {}
    for recipe in sorted(DOWNLOAD_ONLY):
        data = yaml.safe_load((ROOT / recipe).read_text())
        # the GPU recipes follow the papers' protocol (their first 500 / 1,000 dev questions) instead
        if "hotpotqa" in data.get("dataset", "") and recipe.startswith(("bench/", "retrieval_adapt/")) \
                and not recipe.endswith("_paper.yaml"):  # data_paper.yaml: the paper's own split (HotpotQA train)
            start = data.get("start", 0)
            spans[recipe] = (data["dataset"], start, start + data["limit"])
    assert {dataset for dataset, _, _ in spans.values()} == {"data/hotpotqa/hotpot_dev_distractor_v1.json"}
    fit = [r for r, (_, a, b) in spans.items() if b <= 400]
    report = [r for r, (_, a, b) in spans.items() if a >= 400]
    assert sorted(fit + report) == sorted(spans) and fit and report
