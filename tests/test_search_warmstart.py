"""The search policy's supervised warm start: Algorithm 1's labels as Search-R1 trajectories, on every tokenizer
family (byte-level BPE, the same with a BOS, Llama-2-style SentencePiece). The prompt is the rollout's own, the
<information> ids are the environment's own and carry no loss, the text of the policy's ids is stated; bad rows fail
in one line; the job runs end to end on tiny models (tied without BOS, untied with SentencePiece and BOS) and its
adapter is what the GRPO search task continues."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from datasets import Dataset, DatasetDict, load_from_disk
from tokenizer_matrix import make_tokenizer, shared_tokenizer

from adaptive_rag.lm.tokenization import continuation_ids, decode_continuation
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage, QAExample
from inference.search_agent.loop import SearchSettings, first_ids
from inference.search_agent.protocol import information_block
from training.adapt_llm_tokens import tokenize_split
from training.search_warmstart import gold_information, instance, labels_of, retrieved_information, search_dataset

ROOT = Path(__file__).resolve().parents[1]
FAMILIES = ("bpe", "bpe_bos", "sentencepiece")


def _example(i: int = 0, answer: str = "Kelmora", passage: str | None = None) -> QAExample:
    text = passage or f"Osk founded {answer} in 1970. Its port opened."
    return QAExample(id=f"q{i}", question=f"Who founded city {i}?", answers=[answer],
                     gold_passages=[Passage(id=f"p{i}", title="Osk", text=text)])


def _policy_text(tokenizer, row: dict) -> list[str]:
    """The runs of ids under the mask, each decoded as text in the middle of a longer text."""
    runs, current = [], []
    for token, m in zip(row["input_ids"], row["completion_mask"]):
        if m:
            current.append(token)
        elif current:
            runs.append(current)
            current = []
    runs.append(current)
    eos = tokenizer.eos_token_id
    return [decode_continuation(tokenizer, [t for t in run if t != eos]) for run in runs if run]


@pytest.mark.parametrize("family", FAMILIES)
def test_a_known_question_is_the_rollouts_prompt_then_the_answer_and_eos(family):
    tokenizer = shared_tokenizer(family)
    settings = SearchSettings(chat=True, max_passage_words=40)
    row = instance(tokenizer, _example(), True, settings)
    head = first_ids(tokenizer, "Who founded city 0?", settings)
    assert row["input_ids"][:len(head)] == head and row["completion_mask"][:len(head)] == [0] * len(head)
    assert row["input_ids"][-1] == tokenizer.eos_token_id and row["completion_mask"][-1] == 1
    assert sum(row["completion_mask"]) == len(row["input_ids"]) - len(head)  # everything after the prompt trains
    assert _policy_text(tokenizer, row) == ["<answer> Kelmora </answer>"]  # the same text on every family
    assert row["kind"] == "search_answer" and row["completion"] == "<answer> Kelmora </answer>"
    if family != "bpe":  # one BOS, as the rollout's prompt has it
        assert row["input_ids"][0] == tokenizer.bos_token_id and row["input_ids"][1] != tokenizer.bos_token_id


@pytest.mark.parametrize("family", FAMILIES)
def test_an_unknown_question_searches_its_question_and_the_information_block_carries_no_loss(family):
    tokenizer = shared_tokenizer(family)
    settings = SearchSettings(chat=True, max_passage_words=40)
    ex = _example(3, answer="Ada")
    row = instance(tokenizer, ex, False, settings)
    info = continuation_ids(tokenizer, information_block(["Osk Osk founded Ada in 1970. Its port opened."]))
    head = first_ids(tokenizer, ex.question, settings)
    first = continuation_ids(tokenizer, "<search> Who founded city 3? </search>")
    start = len(head) + len(first)
    assert row["input_ids"][start:start + len(info)] == info  # exactly the environment's ids
    assert row["completion_mask"][start:start + len(info)] == [0] * len(info)
    assert row["completion_mask"][len(head):start] == [1] * len(first)
    assert all(row["completion_mask"][start + len(info):])
    assert _policy_text(tokenizer, row) == ["<search> Who founded city 3? </search>", "<answer> Ada </answer>"]
    assert row["kind"] == "search_retrieve" and "<information>Doc 1: Osk Osk founded Ada" in row["completion"]


def test_the_gold_passage_is_cut_around_the_answer_with_its_title():
    long = " ".join(f"w{i}" for i in range(60)) + " Kelmora was founded by Osk."
    cut = gold_information(_example(passage=long), 10)[0]
    assert "Kelmora" in cut and len(cut.split()) == 11  # the title, then a 10-word window holding the answer
    assert gold_information(_example(passage="Short text on Kelmora."), 10) == ["Osk Short text on Kelmora."]


def _hit(pid: str, text: str, title: str = "T"):
    from types import SimpleNamespace

    return SimpleNamespace(passage=Passage(id=pid, title=title, text=text))


def test_retrieved_information_is_the_environments_block_with_the_gold_passage_in_it():
    long = " ".join(f"w{i}" for i in range(60)) + " Kelmora was founded by Osk."
    ex = _example(passage=long)  # gold passage p0, its answer after word 60
    other = [_hit("x1", "one two three four five six"), _hit("x2", "alpha beta gamma delta epsilon zeta")]
    # the gold passage at rank 2: cut around the answer; the others cut to their first words, as the environment does
    got = retrieved_information(ex, [other[0], _hit("p0", long, "Osk"), other[1]], 4)
    assert got == ["T one two three", gold_information(ex, 4)[0], "T alpha beta gamma"]
    assert "Kelmora" in got[1]
    # the index missed it: the gold passage takes the last hit's place
    assert retrieved_information(ex, other, 4) == ["T one two three", gold_information(ex, 4)[0]]
    assert retrieved_information(ex, other[:1], None) == [gold_information(ex, None)[0]]
    # the row's <information> block is exactly those passages, and carries no loss
    tokenizer = shared_tokenizer("sentencepiece")
    settings = SearchSettings(chat=True, max_passage_words=4)
    row = instance(tokenizer, ex, False, settings, got)
    info = continuation_ids(tokenizer, information_block(got))
    start = next(i for i in range(len(row["input_ids"])) if row["input_ids"][i:i + len(info)] == info)
    assert row["completion_mask"][start:start + len(info)] == [0] * len(info)
    assert _policy_text(tokenizer, row) == ["<search> Who founded city 0? </search>", "<answer> Kelmora </answer>"]


def test_rows_without_an_answer_or_without_a_passage_fail_in_one_line():
    tokenizer = shared_tokenizer("bpe")
    settings = SearchSettings()
    with pytest.raises(DataError, match="gold answer"):
        instance(tokenizer, QAExample(id="e", question="Q?", answers=[" "], gold_passages=[]), True, settings)
    with pytest.raises(DataError, match="gold passage"):
        instance(tokenizer, QAExample(id="p", question="Q?", answers=["A"], gold_passages=[]), False, settings)
    # a known question needs no passage
    assert instance(tokenizer, QAExample(id="k", question="Q?", answers=["A"], gold_passages=[]), True, settings)
    with pytest.raises(DataError, match="no training question"):
        search_dataset(tokenizer, [_example()], set(), {"train": set(), "validation": {"q0"}}, settings)


def test_labels_and_splits_come_from_algorithm_1s_dataset():
    def part(ids, kinds):
        return Dataset.from_dict({"prompt": ["p"] * len(ids), "completion": ["c"] * len(ids), "kind": kinds,
                                  "question_id": ids})
    dsd = DatasetDict({"train": part(["a", "b", "b"], ["parametric_answer", "parametric_ret", "context"]),
                       "validation": part(["c"], ["parametric_answer"])})
    known, splits = labels_of(dsd)
    assert known == {"a", "c"} and splits == {"train": {"a", "b"}, "validation": {"c"}}
    tokenizer = shared_tokenizer("bpe")
    examples = [QAExample(id=q, question=f"Q {q}?", answers=[f"A{q}"], gold_passages=[Passage(q, "", f"A{q}.")])
                for q in "abc"]
    out = search_dataset(tokenizer, examples, known, splits, SearchSettings())
    assert out["train"]["kind"] == ["search_answer", "search_retrieve"] and out["validation"]["question_id"] == ["c"]


def test_prebuilt_ids_pass_through_tokenization_and_trl_masks_the_information_block(tmp_path):
    """trl folds ``completion_mask`` into the labels: -100 on the prompt and on the <information> ids."""
    from trl import SFTTrainer

    from training.adapt_llm_config import AdaptTrainConfig
    from training.lora_sft import sft_config

    tokenizer = make_tokenizer("bpe")
    row = instance(tokenizer, _example(), False, SearchSettings(chat=False))
    ds = Dataset.from_dict({k: [v] for k, v in row.items()})
    cut = tokenize_split(ds, tokenizer, max_length=20)
    assert cut.column_names == ["input_ids", "completion_mask"] and cut[0]["input_ids"] == row["input_ids"][:20]
    whole = tokenize_split(ds, tokenizer)
    assert whole[0]["completion_mask"] == row["completion_mask"]
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32,
                                         num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1))
    cfg = AdaptTrainConfig(output_dir=str(tmp_path), micro_batch_size=1, effective_batch_size=1, max_steps=1,
                           max_length=512, eval_steps=None, ret_token="text")
    trainer = SFTTrainer(model=model, args=sft_config(cfg, 1, False), train_dataset=whole, processing_class=tokenizer)
    batch = trainer.data_collator([trainer.train_dataset[0]])
    labels = batch["labels"][0].tolist()
    expected = [t if m else -100 for t, m in zip(row["input_ids"], row["completion_mask"])]
    assert labels[:len(expected)] == expected and labels.count(-100) > len(first_ids(tokenizer, "x", SearchSettings(
        chat=False)))


def _tiny_folder(out: Path, family: str, tied: bool) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = make_tokenizer(family)
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, tie_word_embeddings=tied, bos_token_id=tokenizer.bos_token_id or 0,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
        max_position_embeddings=1024)).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.mark.parametrize(("family", "tied", "information"), [("bpe", True, "gold"),
                                                             ("sentencepiece", False, "retrieved")])
def test_the_job_trains_an_adapter_that_the_grpo_search_task_continues(tmp_path, family, tied, information, capsys):
    from training.grpo_config import GrpoTaskConfig, GrpoTrainConfig
    from training.grpo_model import load_policy

    base = _tiny_folder(tmp_path / "base", family, tied)
    source = tmp_path / "qa.jsonl"
    source.write_text("".join(json.dumps(_example(i, answer=f"Land{i}").to_dict()) + "\n" for i in range(4)))
    from training import search_sft as script
    config = tmp_path / "run.yaml"
    out = tmp_path / "model"
    config.write_text(yaml.safe_dump({
        "data_dir": str(tmp_path / "data"), "dataset": str(source), "shuffle_seed": None, "validation_fraction": 0.0,
        "base_model": str(base), "output_dir": str(out), "micro_batch_size": 4, "effective_batch_size": 4,
        "max_steps": 1, "eval_steps": None, "warmup_steps": 0, "closed_book_max_new_tokens": 2, "ret_token": "text",
        "max_length": 512, "save_steps": 1}))
    extra = []
    if information == "retrieved":  # the index's top 2 for each question, over the questions' passages
        from retrieval_adapt.bm25 import BM25Retriever

        BM25Retriever.build([_example(i, answer=f"Land{i}").gold_passages[0] for i in range(4)],
                            show_progress=False).save(tmp_path / "index")
        extra = ["--information", "retrieved", "--index", str(tmp_path / "index"), "--information_top_k", "2"]
    assert run_cli(script.main, argv=[str(config), *extra]) == 0
    summary = json.loads((out / "search_sft.json").read_text())
    assert summary["protocol"] == "search-r1" and summary["splits"]["train"]["instances"] == 4
    assert summary["splits"]["train"]["searched"] == 4  # a random model answers nothing closed-book
    assert (out / "adapter_config.json").is_file() and (tmp_path / "data" / "search_dataset").is_dir()
    blocks = [c.split("<information>")[1].split("</information>")[0]
              for c in load_from_disk(str(tmp_path / "data" / "search_dataset"))["train"]["completion"]]
    assert all(b.count("Doc ") == (2 if information == "retrieved" else 1) for b in blocks)
    assert "<RET>" not in (out / "tokenizer_config.json").read_text()
    card = (out / "README.md").read_text()
    assert "# Search-R1 warm-start LoRA adapter" in card and "added `<RET>`" not in card
    task = GrpoTaskConfig(task="search", dataset=str(source), shuffle_seed=None)
    model, tokenizer, base_name = load_policy(str(base), task, GrpoTrainConfig(init_adapter=str(out)), "cpu")
    assert base_name == str(base) and any(p.requires_grad for n, p in model.named_parameters() if "lora_B" in n)
    # a second run resumes: nothing is asked or trained again
    assert run_cli(script.main, argv=[str(config), *extra]) == 0
    assert "trained: loss" in capsys.readouterr().out


def test_bad_settings_fail_before_any_model_loads(tmp_path):
    from training import search_sft as script
    assert run_cli(script.main, argv=["--ret_token", "special", "--output_dir", str(tmp_path / "o")]) == 2
    assert run_cli(script.main, argv=["--ret_token", "text", "--mode", "nr", "--output_dir", str(tmp_path / "o")]) == 2
    assert run_cli(script.main, argv=["--ret_token", "text", "--base_model", str(tmp_path / "missing"),
                                      "--output_dir", str(tmp_path / "o")]) == 2
    assert run_cli(script.main, argv=["--ret_token", "text", "--information", "oracle",
                                      "--output_dir", str(tmp_path / "o")]) == 2
    assert run_cli(script.main, argv=["--ret_token", "text", "--information", "retrieved", "--index",
                                      str(tmp_path / "no_index"), "--output_dir", str(tmp_path / "o")]) == 2
    source = tmp_path / "qa.jsonl"  # a QA file has no built-in index: refused before the closed-book pass
    source.write_text(json.dumps(_example().to_dict()) + "\n")
    assert run_cli(script.main, argv=["--ret_token", "text", "--information", "retrieved", "--dataset", str(source),
                                      "--output_dir", str(tmp_path / "o")]) == 2
    cfg = yaml.safe_load((ROOT / "training" / "configs" / "search_sft_demo_cpu.yaml").read_text())
    assert cfg["ret_token"] == "text" and cfg["mode"] == "adapt"
