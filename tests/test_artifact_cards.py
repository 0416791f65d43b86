"""Artifact cards and --push_to_hub: every artifact gets a README.md the Hub reads (front matter + provenance, data
hashes, metrics, how to load), loading the artifact back still works with the card beside it, and a push without
the Hub ends in one line that says where the artifact is saved and how to push it later."""

from __future__ import annotations

import json
import time
from pathlib import Path

import huggingface_hub
import pytest
import torch
import yaml
from conftest import tiny_llama
from huggingface_hub import DatasetCard, ModelCard

from adaptive_rag.lm.base_model import BaseModelConfig
from adaptive_rag.plumbing.cards import (
    PushToHubError,
    push_to_hub,
    write_adapter_card,
    write_dataset_card,
)
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.records import Passage
from data_builders.adapt_llm import AdaptDataConfig, load_adapt_dataset, save_dataset

SHA = "ab" * 32


def _adapt_rows(n: int) -> dict[str, list[str]]:
    kinds = ["parametric_answer", "parametric_ret", "context"]
    return {"prompt": [f"question {i}?" for i in range(n)], "completion": [f"answer {i}" for i in range(n)],
            "kind": [kinds[i % 3] for i in range(n)], "question_id": [f"q{i}" for i in range(n)]}


@pytest.fixture()
def data_dir(tmp_path) -> Path:
    """An Algorithm 1 data_dir as data_builders.adapt_llm writes it: dataset/, stats.json."""
    from datasets import Dataset, DatasetDict

    folder = tmp_path / "data"
    save_dataset(DatasetDict(train=Dataset.from_dict(_adapt_rows(6)), validation=Dataset.from_dict(_adapt_rows(2))),
                 folder / "dataset")
    stats = {"mode": "adapt", "questions": 5, "instances": 8, "source": "world", "source_sha256": SHA,
             "closed_book_accuracy": 0.4, "by_group": {"common": {"questions": 2, "correct": 1}}}
    (folder / "stats.json").write_text(json.dumps(stats))
    return folder


def test_dataset_card_beside_the_dataset(data_dir, tmp_path):
    stats = json.loads((data_dir / "stats.json").read_text())
    path = write_dataset_card(data_dir, stats, (BaseModelConfig(), AdaptDataConfig(data_dir=str(data_dir))),
                              command="python -m data_builders.adapt_llm my.yaml")
    assert path == data_dir / "README.md"
    card = DatasetCard.load(path)
    assert card.data.pretty_name == "ADAPT-LLM training data (Algorithm 1)"
    assert card.data.configs[0]["data_files"] == [{"split": "train", "path": "dataset/train/*.arrow"},
                                                  {"split": "validation", "path": "dataset/validation/*.arrow"}]
    assert card.data.size_categories == ["n<1K"]
    body = card.text
    for expected in ("python -m data_builders.adapt_llm my.yaml", f"| source_sha256 | {SHA} |",
                     "| closed_book_accuracy | 0.4 |", "| by_group.common.correct | 1 |", "load_from_disk(",
                     "base_model: smollm2-135m", "train (6 rows), validation (2 rows)", "adaptive-rag, commit"):
        assert expected in body
    # The card does not get in the way of loading back: the project's loader, plain load_from_disk ...
    assert load_adapt_dataset(data_dir)["train"].num_rows == 6
    from datasets import load_dataset, load_from_disk

    assert load_from_disk(str(data_dir / "dataset"))["validation"]["prompt"] == ["question 0?", "question 1?"]
    # ... and the folder reads as a Hub dataset through the card's `configs` (what load_dataset(REPO) does).
    hub_like = load_dataset(str(data_dir), cache_dir=str(tmp_path / "hf-cache"))
    assert hub_like["train"]["question_id"] == [f"q{i}" for i in range(6)]


def test_dataset_card_names_the_baseline_mode(data_dir):
    card = DatasetCard.load(write_dataset_card(data_dir, {"mode": "nr"}, {"source": "world"}))
    assert card.data.pretty_name.endswith("mode nr")


def _tiny_adapter(folder: Path, base_name: str) -> None:
    """A LoRA adapter folder as the training job leaves it (adapter, config.yaml)."""
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(tiny_llama(64), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    model.save_pretrained(folder)  # peft writes a placeholder README.md here
    (folder / "config.yaml").write_text(yaml.safe_dump({"base_model": base_name, "lora_r": 2,
                                                        "source": "world", "source_sha256": SHA}))


def test_adapter_card_replaces_peft_placeholder(tmp_path):
    from peft import PeftModel

    folder = tmp_path / "model"
    _tiny_adapter(folder, "smollm2-135m")
    assert "library_name: peft" in (folder / "README.md").read_text()  # peft's own card, about to be replaced
    config = yaml.safe_load((folder / "config.yaml").read_text())
    metrics = {"train_loss": 1.25, "adapter": {"tensors": 8, "parameters": 512}, "mode": "adapt"}
    card = ModelCard.load(write_adapter_card(folder, config, metrics, command="accelerate launch training/x.py"))
    assert card.data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct" and card.data.library_name == "peft"
    for expected in ("| train_loss | 1.25 |", "| adapter.parameters | 512 |", f"| source_sha256 | {SHA} |",
                     'PeftModel.from_pretrained(base, "', 'resolve_model("smollm2-135m")', "de-quantised",
                     "`accelerate launch training/x.py`", "lora_r: 2"):
        assert expected in card.text
    PeftModel.from_pretrained(tiny_llama(64), str(folder))  # still loads with the card beside it


def test_adapter_card_on_a_local_base_links_no_hub_model(tmp_path):
    folder = tmp_path / "model"
    _tiny_adapter(folder, str(tmp_path / "my-base"))
    card = ModelCard.load(write_adapter_card(folder, {"base_model": str(tmp_path / "my-base")}, {}))
    assert card.data.base_model is None and "(none recorded)" in card.text


def _recorder(monkeypatch) -> list[tuple[str, dict]]:
    calls: list[tuple[str, dict]] = []

    def create_repo(repo_id, **kw):
        calls.append(("create_repo", {"repo_id": repo_id, **kw}))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(**kw):
        calls.append(("upload_folder", kw))

    monkeypatch.setattr(huggingface_hub, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub, "upload_folder", upload_folder)
    return calls


def test_push_uploads_the_folder(data_dir, monkeypatch):
    calls = _recorder(monkeypatch)
    url = push_to_hub(data_dir, "me/adapt-data", repo_type="dataset")
    assert url == "https://huggingface.co/me/adapt-data"
    (name, create), (_, upload) = calls
    assert name == "create_repo" and create["exist_ok"] is True and create["repo_type"] == "dataset"
    assert upload["repo_id"] == "me/adapt-data" and upload["folder_path"] == str(data_dir.resolve())
    assert upload["repo_type"] == "dataset" and "checkpoint-*" in upload["ignore_patterns"]


def test_push_offline_is_one_line_and_quick(data_dir, monkeypatch, capsys):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    (data_dir / "checkpoint-5").mkdir()
    start = time.perf_counter()
    with pytest.raises(PushToHubError, match="HF_HUB_OFFLINE=1") as err:
        push_to_hub(data_dir, "me/adapt-data", repo_type="dataset")
    assert time.perf_counter() - start < 30  # fails at once, never waits on the network
    message = str(err.value)
    assert "\n" not in message and f"saved locally at {data_dir.resolve()}" in message
    assert f"hf upload me/adapt-data {data_dir.resolve()} . --repo-type dataset --exclude" in message
    # run_cli (every entry point) prints it as one line, exit status 2
    assert run_cli(lambda argv: push_to_hub(data_dir, "me/adapt-data", repo_type="dataset")) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: could not push to the Hub dataset repo me/adapt-data")


def test_push_without_network_is_one_line(data_dir, monkeypatch):
    def unreachable(repo_id, **kw):
        raise OSError("[Errno -2] Name or service not known")

    monkeypatch.setattr(huggingface_hub, "create_repo", unreachable)
    with pytest.raises(PushToHubError, match=r"OSError: \[Errno -2\].*saved locally at .*hf upload me/x"):
        push_to_hub(data_dir, "me/x")


def test_bad_repo_id_fails_before_any_work():
    from retrieval_adapt.distill_config import DistillConfig

    with pytest.raises(ValueError, match="push_to_hub 'not a repo!' is not a Hub repo id"):
        DistillConfig(push_to_hub="not a repo!")


# -- the distillation job writes the query encoder's card and pushes it ------------------------------------------

PASSAGES = [Passage(f"p{i}", f"Title {i}", f"Passage number {i} about topic {i % 3}.") for i in range(8)]


@pytest.fixture(scope="module")
def distill_setup(tmp_path_factory) -> dict[str, Path]:
    """A tiny random BERT encoder, a dense index over 8 passages and a distillation dataset (as test_distill)."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from adaptive_rag.lm.models import resolve_model
    from data_builders.distill_schema import to_dataset_dict
    from retrieval_adapt.dense import DenseRetriever
    from retrieval_adapt.encoders import MeanPoolingEncoder

    root = tmp_path_factory.mktemp("cards")
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("minilm"))
    bert = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                intermediate_size=32))
    MeanPoolingEncoder(bert, tokenizer, normalize=True, max_length=32).save(root / "encoder")
    DenseRetriever.build(PASSAGES, MeanPoolingEncoder.from_name(str(root / "encoder")),
                         show_progress=False).save(root / "index")
    rows = [{"question_id": f"q{i}", "question": f"question {i} topic {i % 3}", "answers": ["a"], "gold_ids": [],
             "y1": f"draft {i}", "y1_answer": "", "candidate_ids": [f"p{(i + j) % 8}" for j in range(3)],
             "candidate_positions": [(i + j) % 8 for j in range(3)], "teacher_scores": [0.0, 3.0, 0.0],
             "retriever_scores": [0.0] * 3} for i in range(6)]
    to_dataset_dict(rows, 0.34, 0).save_to_disk(str(root / "data" / "dataset"))
    (root / "data" / "stats.json").write_text(json.dumps({"questions_sha256": SHA, "n_train": 4}))
    return {"encoder": root / "encoder", "index": root / "index", "data": root / "data"}


def test_retrieval_adapt_data_card(distill_setup, tmp_path):
    from datasets import load_dataset

    from data_builders.question_loader import QuestionsConfig
    from training.distill_set import RetrievalAdaptDataConfig

    folder = distill_setup["data"]
    stats = json.loads((folder / "stats.json").read_text())
    configs = (QuestionsConfig(dataset="world-two-hop"), RetrievalAdaptDataConfig(index="runs/index/x"))
    card = DatasetCard.load(write_dataset_card(folder, stats, configs, kind="retrieval_adapt"))
    assert card.data.task_categories == ["text-retrieval"]
    for expected in ("| dataset | world-two-hop |", "| index | runs/index/x |", f"| questions_sha256 | {SHA} |",
                     "candidate_positions", "num_candidates: null"):  # null: the top_k candidates of Eq. 3
        assert expected in card.text
    hub_like = load_dataset(str(folder), cache_dir=str(tmp_path / "hf-cache"))
    assert hub_like["train"].num_rows + hub_like["validation"].num_rows == 6
    (folder / "README.md").unlink()  # the module fixture is shared


def test_distillation_writes_a_card_and_pushes_the_encoder(distill_setup, tmp_path, monkeypatch, capfd):
    from transformers import AutoModel

    from retrieval_adapt.distill import train
    from retrieval_adapt.distill_config import DistillConfig

    out = tmp_path / "out"
    cfg = dict(data_dir=str(distill_setup["data"]), index=str(distill_setup["index"]), output_dir=str(out),
               batch_size=2, learning_rate=1e-2, eval_steps=1, logging_steps=1, temperature=0.1,
               push_to_hub="me/world-query-encoder")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    capfd.readouterr()
    with pytest.raises(PushToHubError, match=f"saved locally at {out.resolve() / 'query_encoder'}"):
        train(DistillConfig(max_steps=1, **cfg))  # offline: trained and saved, only the push fails
    assert "Writing model shards" not in capfd.readouterr().err  # stderr is a log here: no bar per saved encoder
    encoder_dir = out / "query_encoder"
    assert AutoModel.from_pretrained(str(encoder_dir)).config.hidden_size == 16  # loads back, card beside it
    card = ModelCard.load(encoder_dir / "README.md")
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "feature-extraction"
    best = json.loads((encoder_dir / "best.json").read_text())
    for expected in (f"| best_val_loss | {best['val_loss']:.6g} |", "| initial_val_loss |", "| steps_done | 1 |",
                     f"| questions_sha256 | {SHA} |", f"| passage_encoder | {distill_setup['encoder']} |",
                     'AutoModel.from_pretrained("me/world-query-encoder")', "push_to_hub: me/world-query-encoder",
                     "torch.nn.functional.normalize"):
        assert expected in card.text

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    calls = _recorder(monkeypatch)
    result = train(DistillConfig(max_steps=2, **cfg))  # resumes at step 1, then pushes
    assert result["pushed_to"] == "https://huggingface.co/me/world-query-encoder"
    upload = dict(calls)["upload_folder"]
    assert upload["folder_path"] == str(encoder_dir.resolve()) and upload["repo_type"] == "model"
    assert "| steps_done | 2 |" in (encoder_dir / "README.md").read_text()  # rewritten at the end of the run


def test_distill_command_offline_push_ends_in_one_line(distill_setup, tmp_path, monkeypatch, capsys):
    import importlib.util

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    path = tmp_path / "distill.yaml"
    path.write_text(yaml.safe_dump({"data_dir": str(distill_setup["data"]), "index_dir": str(distill_setup["index"]),
                                    "output_dir": str(tmp_path / "cli"), "batch_size": 2, "eval_steps": 1}))
    script = Path(__file__).resolve().parents[1] / "training" / "distill_retriever.py"
    spec = importlib.util.spec_from_file_location("distill_retriever", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    capsys.readouterr()
    assert run_cli(module.main, argv=[str(path), "--max_steps", "1", "--push_to_hub", "me/enc"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "hf upload me/enc" in errors[0] and "saved locally at" in errors[0]
    assert (tmp_path / "cli" / "query_encoder" / "README.md").is_file()
