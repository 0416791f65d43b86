"""ADAPT-LLM fine-tuning on a tiny random Llama with SmolLM2's tokenizer: <RET> is one added token whose
embedding and output rows really train (tied and untied), the batch arithmetic, checkpoints and resuming, the
whole-run results, the adapter check, training ids from inference's prompt_ids, the configs, and the training
script from a temporary YAML."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import yaml
from conftest import bos_tokenizer
from datasets import Dataset, DatasetDict

from adaptive_rag.lm.base_model import BaseModelConfig
from adaptive_rag.lm.models import load_tokenizer
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.records import Passage, QAExample
from data_builders.adapt_llm import COLUMNS, AdaptDataConfig, build_adapt_dataset
from data_builders.adapt_llm_prompts import parametric_prompt
from training.adapt_llm_config import AdaptEvalConfig, AdaptTrainConfig
from training.lora_sft import (
    add_ret_token,
    build_peft_model,
    check_adapter,
    configure_wandb,
    gradient_accumulation,
    resolve_checkpoint,
    train_adapt,
)

ROOT = Path(__file__).resolve().parents[1]


def _tiny_model(vocab_size: int, tied: bool = True):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tied, bos_token_id=1,
                      eos_token_id=2, pad_token_id=2, max_position_embeddings=512)
    return LlamaForCausalLM(cfg)


def _save_tiny(out: Path, tied: bool = True, tokenizer=None) -> Path:
    tokenizer = tokenizer or load_tokenizer("smollm2-135m")
    _tiny_model(len(tokenizer), tied).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory) -> Path:
    """A tiny random Llama saved with SmolLM2's (local) tokenizer: loadable by name like any model folder."""
    return _save_tiny(tmp_path_factory.mktemp("tiny"))


@pytest.fixture(scope="module")
def untied_dir(tmp_path_factory) -> Path:
    """The same with its own LM head matrix, as Llama-2 and Mistral have."""
    return _save_tiny(tmp_path_factory.mktemp("untied"), tied=False)


def _dataset(prompts: list[str], completions: list[str], kind: str = "parametric_ret") -> DatasetDict:
    rows = {"prompt": prompts, "completion": completions, "kind": [kind] * len(prompts),
            "question_id": [f"q{i}" for i in range(len(prompts))]}
    return DatasetDict({"train": Dataset.from_dict(rows), "validation": Dataset.from_dict({c: [] for c in COLUMNS})})


def _examples(n: int) -> list[QAExample]:
    return [QAExample(id=f"q{i}", question=f"Where is Town{i}?", answers=[f"Land{i}"],
                      gold_passages=[Passage(f"p{i}", f"Town{i}", f"Town{i} is a town in Land{i}.")])
            for i in range(n)]


@pytest.fixture(scope="module")
def data(tmp_path_factory, tiny_dir):
    tmp = tmp_path_factory.mktemp("data")
    source = tmp / "qa.jsonl"
    source.write_text("".join(json.dumps(ex.to_dict()) + "\n" for ex in _examples(6)))
    cfg = AdaptDataConfig(data_dir=str(tmp / "data"), dataset=str(source), shuffle_seed=None, validation_fraction=0.0)
    dsd = build_adapt_dataset(cfg, answer_fn=lambda b: ["Land0" if ex.id == "q0" else "?" for ex in b],
                              show_progress=False, model=_model(tiny_dir))
    return cfg, dsd


def _model(path: Path) -> BaseModelConfig:
    """The base model a test trains: a model folder."""
    return BaseModelConfig(base_model=str(path))


def _train_cfg(out: Path, **kw) -> AdaptTrainConfig:
    base = dict(output_dir=str(out), micro_batch_size=4, effective_batch_size=4, max_steps=1, learning_rate=1e-2,
                warmup_steps=0, logging_steps=1, save_steps=1, eval_steps=None, max_length=256)
    return AdaptTrainConfig(**{**base, **kw})


def test_ret_token_added_once_as_a_single_id():
    tokenizer = load_tokenizer("smollm2-135m")
    n = len(tokenizer)
    model = _tiny_model(n)
    ret_id = add_ret_token(tokenizer, model)
    assert add_ret_token(tokenizer, model) == ret_id and len(tokenizer) == n + 1
    assert tokenizer("Q <RET>", add_special_tokens=False)["input_ids"][-1] == ret_id
    assert tokenizer("<RET>", add_special_tokens=False)["input_ids"] == [ret_id]
    assert model.get_input_embeddings().weight.shape[0] == n + 1


def test_gradient_accumulation_from_effective_batch(caplog):
    assert gradient_accumulation(128, 32, 1) == 4
    assert gradient_accumulation(128, 32, 4) == 1
    assert gradient_accumulation(16, 8, 1) == 2
    assert gradient_accumulation(128, 32, 3) == 2 and "not a multiple" in caplog.text


@pytest.mark.parametrize("mode", ["trainable_tokens", "modules_to_save"])
def test_ret_rows_change_after_one_step(tiny_dir, data, tmp_path, mode):
    """The <RET> embedding row and output row (tied) train; LoRA trains; with trainable tokens nothing else."""
    from trl import SFTTrainer

    from training.lora_sft import sft_config

    _, dsd = data
    tokenizer = load_tokenizer(str(tiny_dir))
    model = _tiny_model(len(tokenizer))
    ret_id = add_ret_token(tokenizer, model)
    cfg = _train_cfg(tmp_path, ret_token_training=mode, save_steps=100)
    peft_model = build_peft_model(model, cfg, ret_id, str(tiny_dir))
    emb, out = peft_model.get_input_embeddings(), peft_model.get_output_embeddings()
    before = (emb.weight[ret_id].detach().clone(), out.weight[ret_id].detach().clone(), emb.weight[5].detach().clone())
    lora_before = {n: p.detach().clone() for n, p in peft_model.named_parameters() if "lora_B" in n}
    train = dsd["train"].select_columns(["prompt", "completion"])
    trainer = SFTTrainer(model=peft_model, args=sft_config(cfg, 1, False), train_dataset=train,
                         processing_class=tokenizer)
    trainer.train()
    assert "loss" in trainer.state.log_history[0]
    assert not torch.allclose(emb.weight[ret_id], before[0])
    assert not torch.allclose(out.weight[ret_id], before[1])
    if mode == "trainable_tokens":  # just the <RET> row; modules_to_save trains the whole (tied) matrix
        assert torch.equal(emb.weight[5], before[2])
    assert all(not torch.equal(p, lora_before[n]) for n, p in peft_model.named_parameters() if "lora_B" in n)


def test_train_adapt_writes_checked_adapter_and_resumes(tiny_dir, data, tmp_path):
    from safetensors.torch import save_file

    data_cfg, dsd = data
    out = tmp_path / "model"
    metrics = train_adapt(data_cfg, _train_cfg(out, max_steps=2), dsd, model=_model(tiny_dir))
    assert metrics["adapter"]["tensors"] > 0 and (out / "checkpoint-2").is_dir()
    for name in ("adapter_config.json", "config.yaml", "data_stats.json", "train_results.json", "tokenizer.json"):
        assert (out / name).is_file(), name
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_dir)
    assert "<RET>" in load_tokenizer(str(out)).get_vocab()
    # resumes at step 2: one more step
    again = train_adapt(data_cfg, _train_cfg(out, max_steps=3), dsd, model=_model(tiny_dir))
    assert again["train_runtime"] >= 0 and (out / "checkpoint-3").is_dir()
    assert json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())["global_step"] == 3
    # the finished run resumed again: no step runs, and its real loss is kept (the trainer would report 0)
    finished = train_adapt(data_cfg, _train_cfg(out, max_steps=3), dsd, model=_model(tiny_dir))
    assert finished["resumed_without_new_steps"] and finished["train_loss"] == again["train_loss"] > 0
    assert json.loads((out / "train_results.json").read_text())["train_loss"] == again["train_loss"]
    with pytest.raises(ConfigError, match="other learning_rate"):  # another recipe never continues these
        train_adapt(data_cfg, _train_cfg(out, max_steps=4, learning_rate=1e-3), dsd, model=_model(tiny_dir))
    with pytest.raises(ConfigError, match="other base_model"):  # the model config's base_model is checked too
        train_adapt(data_cfg, _train_cfg(out, max_steps=4), dsd, model=BaseModelConfig(base_model="other-model"))
    assert yaml.safe_load((out / "config.yaml").read_text())["base_model"] == str(tiny_dir)
    save_file({"base_model.model.x.weight": torch.zeros(1)}, str(tmp_path / "adapter_model.safetensors"))
    with pytest.raises(RuntimeError, match="lacks LoRA"):
        check_adapter(tmp_path, _train_cfg(out))


def test_ret_row_gets_its_own_learning_rate(tiny_dir):
    from training.lora_sft import build_optimizer

    tokenizer = load_tokenizer(str(tiny_dir))
    model = _tiny_model(len(tokenizer))
    ret_id = add_ret_token(tokenizer, model)
    cfg = _train_cfg(Path("unused"), learning_rate=1e-3, ret_token_learning_rate=5e-2)
    peft_model = build_peft_model(model, cfg, ret_id, str(tiny_dir))
    groups = build_optimizer(peft_model, cfg).param_groups
    assert [g["lr"] for g in groups] == [1e-3, 5e-2]
    assert [tuple(p.shape) for p in groups[1]["params"]] == [(1, 16)]  # just the <RET> row
    assert build_optimizer(peft_model, _train_cfg(Path("unused"))) is None


def test_loaded_adapter_generates_with_p_ret(tiny_dir, data, tmp_path):
    from adaptive_rag.lm.models import load_causal_lm
    from inference.adapt_gate.gate import model_generator

    data_cfg, dsd = data
    train_adapt(data_cfg, _train_cfg(tmp_path / "m", merge_adapter=True), dsd, model=_model(tiny_dir))
    assert (tmp_path / "m" / "adapter_model.safetensors").stat().st_size < 100_000  # no whole embedding matrix
    rows = []
    for seed in (1, 2):  # the resized base row is random; the loaded <RET> row must come from the adapter
        torch.manual_seed(seed)
        model, tokenizer = load_causal_lm(str(tmp_path / "m"))
        rows.append(model.get_input_embeddings().weight[tokenizer.convert_tokens_to_ids("<RET>")].detach())
    assert torch.equal(rows[0], rows[1])
    gens = model_generator(model, tokenizer, max_new_tokens=2).generate(["Q: a?", "Q: b?"])
    assert all(0.0 <= g.first_token_probs["<RET>"] <= 1.0 for g in gens)
    merged, _ = load_causal_lm(str(tmp_path / "m" / "merged"))
    assert merged.get_input_embeddings().weight.shape[0] == len(tokenizer)


def test_quantized_loading_refused_without_cuda(tiny_dir, data, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    data_cfg, dsd = data
    with pytest.raises(RuntimeError, match="needs CUDA"):
        train_adapt(data_cfg, _train_cfg(tmp_path, load_in_4bit=True), dsd, model=_model(tiny_dir))


def test_resolve_checkpoint(tmp_path):
    assert resolve_checkpoint("auto", str(tmp_path / "none")) is None
    for step in (3, 12):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        (tmp_path / f"checkpoint-{step}" / "adapter_model.safetensors").write_bytes(b"x")
    assert resolve_checkpoint("auto", str(tmp_path)).endswith("checkpoint-12")
    assert resolve_checkpoint("never", str(tmp_path)) is None
    with pytest.raises(FileNotFoundError, match="no checkpoint folder"):
        resolve_checkpoint(str(tmp_path / "missing"), str(tmp_path))


def test_wandb_only_when_asked_and_never_prompting(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    configure_wandb("none")
    assert "WANDB_MODE" not in __import__("os").environ
    configure_wandb("wandb")
    assert __import__("os").environ["WANDB_MODE"] == "offline"


@pytest.mark.parametrize("override, message", [
    (["--effective_batch_size", "8", "--micro_batch_size", "16"], "effective_batch_size"),
    (["--load_in_4bit", "true", "--load_in_8bit", "true"], "one of load_in_4bit"),
    (["--lora_dropout", "1.0"], "lora_dropout"),
])
def test_bad_train_config_fails(override, message):
    with pytest.raises(ConfigError, match=message):
        parse_config((AdaptTrainConfig,), override)
    with pytest.raises(ConfigError, match="invalid choice"):  # argparse rejects a name outside the Literal
        parse_config((AdaptTrainConfig,), ["--ret_token_training", "everything"])


def test_shipped_configs_parse_and_readme_paths_exist():
    for name in ("adapt_llm_paper.yaml", "adapt_llm_demo_cpu.yaml"):
        model, data_cfg, train_cfg, _ = parse_config((BaseModelConfig, AdaptDataConfig, AdaptTrainConfig,
                                                      AdaptEvalConfig), [str(ROOT / "training" / "configs" / name)])
        assert model.base_model == "smollm2-135m"
        assert train_cfg.lora_r == 8 and train_cfg.lora_target_modules == ["q_proj", "v_proj"]
    paper = parse_config((AdaptTrainConfig,), [])[0]  # defaults are the paper's recipe
    assert (paper.effective_batch_size, paper.micro_batch_size, paper.num_train_epochs, paper.learning_rate) == (
        128, 32, 3.0, 3e-4)
    readme = (ROOT / "accelerate_configs" / "README.md").read_text()
    for name in ("cpu", "single_gpu", "multi_gpu", "fsdp", "deepspeed_zero2"):
        path = ROOT / "accelerate_configs" / f"{name}.yaml"
        assert isinstance(yaml.safe_load(path.read_text()), dict) and f"accelerate_configs/{name}.yaml" in readme
    for path in ("training/adapt_llm.py", "training/configs/adapt_llm_paper.yaml",
                 "training/configs/adapt_llm_demo_cpu.yaml"):
        assert (ROOT / path).is_file()


def test_script_runs_from_a_temporary_yaml(tiny_dir, data, tmp_path, capsys):
    """training/adapt_llm.py end to end on the tiny model: data (answers already on disk), one step, evaluation."""
    import importlib.util

    data_cfg, _ = data
    spec = importlib.util.spec_from_file_location("adapt_llm_script", ROOT / "training" / "adapt_llm.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "data_dir": data_cfg.data_dir, "dataset": data_cfg.dataset, "shuffle_seed": None, "validation_fraction": 0.0,
        "base_model": str(tiny_dir), "output_dir": str(tmp_path / "model"), "micro_batch_size": 4,
        "effective_batch_size": 4, "max_steps": 1, "eval_steps": None, "warmup_steps": 0,
        "eval_dataset": data_cfg.dataset, "eval_limit": 3, "eval_max_new_tokens": 2}))
    assert run_cli(script.main, argv=[str(config)]) == 0
    out = capsys.readouterr().out
    assert "NR (never retrieve)" in out and "AR (always retrieve)" in out and "ADAPT-LLM (token)" in out
    evaluation = tmp_path / "model" / "eval"  # the evaluate command's files, and the three policies' summary
    assert len((evaluation / "predictions.jsonl").read_text().splitlines()) == 3
    assert json.loads((evaluation / "metrics.json").read_text())["n"] == 3
    saved = yaml.safe_load((evaluation / "config.yaml").read_text())
    assert saved["method"] == "adapt-llm" and saved["gate_all_answers"] is True and saved["top_k"] == 1
    assert "NR (never retrieve)" in json.loads((evaluation / "summary.json").read_text())["summaries"]
    assert json.loads((tmp_path / "model" / "timings.json").read_text())["total_s"] > 0


def test_untied_model_trains_both_ret_rows_and_emits_ret_after_reload(untied_dir, tmp_path):
    """Llama-2 and Mistral keep a separate LM head: its <RET> row must train too, be saved and come back on
    reload, or greedy decoding never emits <RET>. All-<RET> targets, then inference's greedy path from disk."""
    from safetensors import safe_open

    from adaptive_rag.lm.generation import generate_texts
    from adaptive_rag.lm.models import load_causal_lm

    prompts = [parametric_prompt(f"Where is Town{i}?") for i in range(8)]
    data_cfg = AdaptDataConfig(data_dir=str(tmp_path / "data"))
    out = tmp_path / "model"
    train_adapt(data_cfg, _train_cfg(out, max_steps=8, micro_batch_size=8, effective_batch_size=8,
                                     ret_token_learning_rate=0.3, save_steps=100), _dataset(prompts, ["<RET>"] * 8),
                model=_model(untied_dir))
    with safe_open(str(out / "adapter_model.safetensors"), framework="pt") as f:
        rows = [k for k in f.keys() if "trainable_tokens_delta" in k]
    assert sorted(k.split(".token_adapter")[0].rsplit(".", 1)[-1] for k in rows) == ["embed_tokens", "lm_head"]
    model, tokenizer = load_causal_lm(str(out))
    ret_id = tokenizer.convert_tokens_to_ids("<RET>")
    head_row = model.get_output_embeddings().weight[ret_id]
    assert not torch.allclose(head_row, model.get_input_embeddings().weight[ret_id])  # untied: two distinct rows
    gens = generate_texts(model, tokenizer, prompts[:3] + [parametric_prompt("Who wrote Hamlet?")],
                          max_new_tokens=1, watch_tokens=("<RET>",))
    assert [g.text for g in gens] == ["<RET>"] * 4
    assert all(g.first_token_probs["<RET>"] > 0.5 for g in gens)


def test_check_adapter_wants_the_head_row_on_an_untied_model(tiny_dir, untied_dir, data, tmp_path):
    from safetensors.torch import load_file, save_file

    from training.lora_sft import lora_config, ret_token_modules

    assert ret_token_modules(_tiny_model(8, tied=True)) == ("embed_tokens",)
    assert ret_token_modules(_tiny_model(8, tied=False)) == ("embed_tokens", "lm_head")
    untied = lora_config(_train_cfg(tmp_path), 7, tied=False)
    assert untied.trainable_token_indices == {"embed_tokens": [7], "lm_head": [7]}
    assert lora_config(_train_cfg(tmp_path), 7, tied=True).trainable_token_indices == {"embed_tokens": [7]}
    data_cfg, dsd = data
    out = tmp_path / "untied"
    metrics = train_adapt(data_cfg, _train_cfg(out), dsd, model=_model(untied_dir))
    assert metrics["adapter"]["tensors"] > 0
    cfg = _train_cfg(out)
    tensors = load_file(str(out / "adapter_model.safetensors"))
    save_file({k: v for k, v in tensors.items() if "lm_head" not in k}, str(out / "adapter_model.safetensors"))
    check_adapter(out, cfg)  # a tied model needs only the embedding's row
    with pytest.raises(RuntimeError, match="lacks the <RET> row of lm_head"):
        check_adapter(out, cfg, ("embed_tokens", "lm_head"))




def test_training_ids_are_inference_prompt_ids(tmp_path, monkeypatch):
    """A BOS-adding tokenizer: the trainer sees prompt_ids(prompt) + completion + EOS, one BOS even when the prompt
    already starts with it (as a chat template writes it); trl alone would put two there."""
    import trl

    from adaptive_rag.lm.tokenization import prompt_ids

    tokenizer = bos_tokenizer()
    base = _save_tiny(tmp_path / "bos-model", tokenizer=tokenizer)
    seen = {}
    original = trl.SFTTrainer.train

    def capture(self, *args, **kwargs):
        seen["train"] = self.train_dataset
        return original(self, *args, **kwargs)

    monkeypatch.setattr(trl.SFTTrainer, "train", capture)
    bos = tokenizer.bos_token
    prompts = [parametric_prompt("Where is Town1?"), bos + parametric_prompt("Where is Town2?")]
    data_cfg = AdaptDataConfig(data_dir=str(tmp_path / "data"))
    train_adapt(data_cfg, _train_cfg(tmp_path / "model", micro_batch_size=2, effective_batch_size=2),
                _dataset(prompts, ["Land1", "<RET>"]), model=_model(base))
    trained = load_tokenizer(str(tmp_path / "model"))
    ret_id, eos = trained.convert_tokens_to_ids("<RET>"), trained.eos_token_id
    land = trained("Land1", add_special_tokens=False)["input_ids"]
    rows = {tuple(ids): labels for ids, labels in zip(seen["train"]["input_ids"], seen["train"]["labels"])}
    expected = [prompt_ids(trained, prompts[0]) + land + [eos], prompt_ids(trained, prompts[1]) + [ret_id, eos]]
    assert sorted(rows) == sorted(tuple(e) for e in expected)
    for ids in expected:
        assert ids[:2] == [trained.bos_token_id, ids[1]] and ids[1] != trained.bos_token_id  # exactly one BOS
        n_prompt = len(ids) - (2 if ids[-2] == ret_id else len(land) + 1)  # the prompt itself names <RET>
        assert rows[tuple(ids)] == [-100] * n_prompt + ids[n_prompt:]  # loss on the completion and EOS only


def test_resumed_run_reports_the_whole_run(tiny_dir, data, tmp_path):
    """Interrupted after 2 steps (max_steps), resumed to 4: train_results.json covers all 4 steps and both
    sessions, with the session's own figures under session_* keys."""
    from training.adapt_llm_checkpoints import SESSIONS_FILE

    data_cfg, dsd = data
    out = tmp_path / "model"
    first = train_adapt(data_cfg, _train_cfg(out, max_steps=2, save_steps=2), dsd, model=_model(tiny_dir))
    assert first["sessions"] == 1 and first["global_step"] == 2 and first["mode"] == "adapt"
    assert json.loads((out / "checkpoint-2" / SESSIONS_FILE).read_text())["session_runtimes"][0] > 0
    second = train_adapt(data_cfg, _train_cfg(out, max_steps=4, save_steps=2), dsd, model=_model(tiny_dir))
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    losses = [e["loss"] for e in state["log_history"] if "loss" in e]
    assert len(losses) == 4 and second["train_loss_logged_steps"] == 4
    assert second["train_loss"] == pytest.approx(sum(losses) / 4)
    assert second["session_train_loss"] == pytest.approx(sum(losses[2:]) / 2, rel=1e-3)
    assert second["sessions"] == 2 and len(second["session_runtimes"]) == 2
    assert second["session_runtimes"][1] == pytest.approx(second["session_train_runtime"], abs=1e-3)
    assert second["train_runtime"] == pytest.approx(sum(second["session_runtimes"]), abs=1e-3)
    assert json.loads((out / "train_results.json").read_text())["train_loss"] == second["train_loss"]


def test_adapter_names_a_base_that_plain_peft_loads(tiny_dir, data, tmp_path):
    """adapter_config.json once named the base `smollm2-135m`, which only this project can resolve: plain
    transformers + peft now load the adapter from what it records, as the project's loader does."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from adaptive_rag.lm.models import ADAPTER_BASE_FILE, load_causal_lm

    data_cfg, dsd = data
    out = tmp_path / "model"
    train_adapt(data_cfg, _train_cfg(out, max_steps=1), dsd, model=_model(tiny_dir))
    recorded = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert recorded == str(tiny_dir.resolve())  # a local base by its absolute path
    assert json.loads((out / ADAPTER_BASE_FILE).read_text()) == {"base_model": str(tiny_dir.resolve())}
    assert (out / "checkpoint-1" / ADAPTER_BASE_FILE).is_file()  # checkpoints load on the same base
    tokenizer = AutoTokenizer.from_pretrained(out)  # with <RET>
    base = AutoModelForCausalLM.from_pretrained(recorded)
    base.resize_token_embeddings(len(tokenizer))
    plain = PeftModel.from_pretrained(base, out).eval()
    ours, our_tokenizer = load_causal_lm(str(out))
    ids = our_tokenizer("Where is Town0? <RET>", return_tensors="pt")["input_ids"]
    assert ids[0, -1] == tokenizer.convert_tokens_to_ids("<RET>")
    with torch.no_grad():
        assert torch.allclose(plain(ids).logits, ours(ids).logits, atol=1e-5)


def test_embedded_base_is_recorded_by_its_hub_id_and_loaded_by_its_embedded_name(tmp_path, monkeypatch):
    """An adapter on the embedded SmolLM2 names HuggingFaceTB/SmolLM2-135M-Instruct (the same model, loadable
    anywhere); adaptive_rag.json keeps `smollm2-135m`, which the project's loader and checks prefer (offline
    too, where the hub id is not in the cache)."""
    from adaptive_rag.lm.models import adapter_base
    from inference.commands.eval_checks import check_model_name
    from training.lora_sft import loadable_base, project_base, record_adapter_base

    assert loadable_base("smollm2-135m") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert loadable_base("meta-llama/Llama-2-7b-hf") == "meta-llama/Llama-2-7b-hf"
    assert project_base("smollm2-135m") == "smollm2-135m"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "base").mkdir()
    assert loadable_base("base") == project_base("base") == str(tmp_path / "base")
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps(
        {"base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct"}))
    assert adapter_base(str(adapter)) == "HuggingFaceTB/SmolLM2-135M-Instruct"
    record_adapter_base(adapter, "smollm2-135m")
    assert adapter_base(str(adapter)) == "smollm2-135m"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    check_model_name(str(adapter))  # resolves through the embedded name, not the hub


def test_training_writes_no_cache_files_into_the_dataset_folder(tiny_dir, tmp_path):
    """datasets' map cache once landed next to the saved dataset (cache-*.arrow in data_dir/dataset/...)."""
    from data_builders.adapt_llm import load_adapt_dataset

    source = tmp_path / "qa.jsonl"
    source.write_text("".join(json.dumps(ex.to_dict()) + "\n" for ex in _examples(10)))
    data_cfg = AdaptDataConfig(data_dir=str(tmp_path / "data"), dataset=str(source), shuffle_seed=None,
                               validation_fraction=0.3)
    build_adapt_dataset(data_cfg, answer_fn=lambda b: ["?" for _ in b], show_progress=False, model=_model(tiny_dir))
    dsd = load_adapt_dataset(data_cfg.data_dir)  # memory-mapped from data_dir/dataset, as the job loads it
    train_adapt(data_cfg, _train_cfg(tmp_path / "model", eval_steps=1), dsd, model=_model(tiny_dir))
    assert sorted(p.name for p in (tmp_path / "data").rglob("cache-*")) == []


def _script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("adapt_llm_script", ROOT / "training" / "adapt_llm.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


@pytest.mark.parametrize("fields, message", [
    ({"eval_index": "runs/index/never-built"}, r"--eval_index runs/index/never-built: no such folder"),
    ({"eval_index": "HERE"}, r"--eval_index .* is not an index folder \(no meta.json\)"),
    ({"eval_dataset": "missing.jsonl"}, r"missing.jsonl"),
    ({"eval_dataset": "world-adapt-heldout"}, r"eval_dataset world-adapt-heldout needs dataset world-adapt-train"),
    ({"eval_source": "world_heldout"}, r"eval_source was renamed: use eval_dataset \(world_heldout is now "
                                       r"world-adapt-heldout\)"),
    ({"eval_dataset": "world_heldout"}, r"question set 'world_heldout' was renamed: use 'world-adapt-heldout'"),
    ({"base_model": "./no-such-model"}, r"--base_model ./no-such-model: no such model folder"),
    ({"dataset": "missing-train.jsonl"}, r"dataset 'missing-train.jsonl' is neither an embedded set"),
    ({"source": "world"}, r"source was renamed: use dataset \(world is now world-adapt-train\)"),
    ({"source_limit": 3}, r"source_limit was renamed: use limit"),
])
def test_job_checks_its_inputs_before_any_model_loads(tiny_dir, data, tmp_path, monkeypatch, capsys, fields, message):
    """The SQuAD -> PopQA recipe once failed only after Algorithm 1 and training, at its evaluation index."""
    import adaptive_rag.lm.models

    data_cfg, _ = data
    monkeypatch.chdir(tmp_path)

    def no_load(*args, **kwargs):
        raise AssertionError("a model loaded before the inputs were checked")

    monkeypatch.setattr(adaptive_rag.lm.models, "load_causal_lm", no_load)
    fields = {k: str(tmp_path) if v == "HERE" else v for k, v in fields.items()}
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({
        "data_dir": str(tmp_path / "data"), "dataset": data_cfg.dataset, "base_model": str(tiny_dir),
        "output_dir": str(tmp_path / "model"), "eval_dataset": data_cfg.dataset, **fields}))
    assert run_cli(_script().main, argv=[str(config)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
    assert not (tmp_path / "data").exists() and not (tmp_path / "model").exists()


def test_training_frees_its_model_before_the_evaluation_loads_one(tiny_dir, data, tmp_path, monkeypatch):
    """The trainer and the model sit in reference cycles: the demo's evaluation once ran with training's model
    still resident (3.6 GB against 1.6 GB once freed)."""
    import weakref

    import adaptive_rag.lm.models

    data_cfg, dsd = data
    models = []
    real = adaptive_rag.lm.models.load_causal_lm

    def recording(*args, **kwargs):
        model, tokenizer = real(*args, **kwargs)
        models.append(weakref.ref(model))
        return model, tokenizer

    monkeypatch.setattr(adaptive_rag.lm.models, "load_causal_lm", recording)
    train_adapt(data_cfg, _train_cfg(tmp_path / "model"), dsd, model=_model(tiny_dir))
    assert len(models) == 1 and models[0]() is None


def test_resumed_run_outlives_its_rotated_checkpoint(tiny_dir, data, tmp_path):
    """save_total_limit rotates the checkpoint a rerun resumed from away before training ends: the rerun still
    writes the adapter and the whole run's train_results.json (the step is read before training)."""
    data_cfg, dsd = data
    out = tmp_path / "model"
    train_adapt(data_cfg, _train_cfg(out, max_steps=1, save_total_limit=1), dsd, model=_model(tiny_dir))
    assert (out / "checkpoint-1").is_dir()
    (out / "train_results.json").unlink()  # as after a kill: the first session never reached its end
    second = train_adapt(data_cfg, _train_cfg(out, max_steps=3, save_total_limit=1), dsd, model=_model(tiny_dir))
    assert not (out / "checkpoint-1").exists() and (out / "checkpoint-3").is_dir()  # rotated away
    assert second["sessions"] == 2 and second["global_step"] == 3
    assert json.loads((out / "train_results.json").read_text())["sessions"] == 2
    assert (out / "adapter_model.safetensors").is_file()


def test_the_same_command_trains_the_same_adapter(tiny_dir, data, tmp_path):
    # the <RET> row and LoRA's A matrices start random: without a seed before they are drawn, two runs of one
    # command trained different gates (the knowing world's claim 1 moved between reruns of the same recipe)
    from safetensors.torch import load_file

    data_cfg, dsd = data
    weights = []
    for run in ("a", "b"):
        torch.manual_seed(len(run) + ord(run))  # whatever state the process is in when training starts
        train_adapt(data_cfg, _train_cfg(tmp_path / run, max_steps=1), dsd, model=_model(tiny_dir))
        weights.append(load_file(tmp_path / run / "adapter_model.safetensors"))
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
