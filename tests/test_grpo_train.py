"""The GRPO job end to end on a tiny random Llama: trl's trainer with the project's rollout trains, is interrupted
after its first checkpoint, resumes from it, and leaves a folder the evaluation command's gate method loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from adaptive_rag.lm.models import load_causal_lm, load_tokenizer
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.records import Passage
from training.grpo import main
from training.grpo_config import GrpoTaskConfig, GrpoTrainConfig
from training.grpo_model import load_policy

QUESTIONS = [("q0", "Who founded Kelmora?", "Osk"), ("q1", "Where is Lima?", "Peru"),
             ("q2", "Which river runs through Varn?", "Tesla"), ("q3", "When was Brill founded?", "1970")]


def tiny_folder(out: Path, tied: bool) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer("smollm2-135m")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=tied,
                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=2,
                      max_position_embeddings=512)
    LlamaForCausalLM(cfg).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Path:
    from retrieval_adapt.bm25 import BM25Retriever

    root = tmp_path_factory.mktemp("grpo")
    tiny_folder(root / "model", tied=True)
    passages = [Passage(f"p{i}", f"T{i}", f"{q} The answer is {a}.") for i, (_, q, a) in enumerate(QUESTIONS)]
    BM25Retriever.build(passages, show_progress=False).save(root / "index")
    (root / "qa.jsonl").write_text("".join(json.dumps({"id": i, "question": q, "answers": [a]}) + "\n"
                                           for i, q, a in QUESTIONS))
    recipe = {"base_model": str(root / "model"), "task": "gate", "dataset": str(root / "qa.jsonl"),
              "shuffle_seed": None, "index": str(root / "index"), "explore_ret": 0.5, "num_generations": 2,
              "questions_per_step": 2, "max_steps": 2, "save_steps": 1, "max_new_tokens": 4,
              "answer_max_new_tokens": 4, "learning_rate": 1e-2, "ret_token_learning_rate": 1e-1}
    (root / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    return root


def test_interrupted_run_resumes_from_its_checkpoint_and_the_gate_loads_it(setup, tmp_path, monkeypatch):
    from trl import GRPOTrainer

    out = tmp_path / "policy"
    argv = [str(setup / "recipe.yaml"), "--output_dir", str(out)]
    real_step, calls = GRPOTrainer.training_step, []

    def killed_at_step_two(self, *args, **kwargs):
        calls.append(self.state.global_step)
        if len(calls) == 2:  # after checkpoint-1 was written: as a kill in the middle of step 2
            raise KeyboardInterrupt
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(GRPOTrainer, "training_step", killed_at_step_two)
    assert run_cli(main, argv=argv) == 130
    assert (out / "checkpoint-1" / "adapter_model.safetensors").is_file()
    assert (out / "checkpoint-1" / "adaptive_rag.json").is_file()  # loadable on its base like the final adapter
    first = json.loads((out / "checkpoint-1" / "trainer_state.json").read_text())["log_history"][0]
    monkeypatch.setattr(GRPOTrainer, "training_step", real_step)

    main(argv)  # the same command: resumes at step 1, runs step 2 only
    results = json.loads((out / "train_results.json").read_text())
    assert results["global_step"] == 2
    steps = [row["step"] for row in results["log"]]
    assert steps == [1, 2]
    assert results["log"][0]["reward"] == first["reward"]  # step 1 was not trained again
    for name in ("rewards/correct/mean", "rewards/retrieval_cost/mean", "rewards/format/mean", "retrieval_share"):
        assert name in results["log"][1]
    assert results["log"][1]["retrieval_share"] >= 0.5  # one decision in two is set to <RET>

    # the output folder is an ADAPT-LLM gate adapter: base + adapter + tokenizer with <RET>
    model, tokenizer = load_causal_lm(str(out))
    assert "<RET>" in tokenizer.get_vocab() and hasattr(model, "merge_and_unload")
    with pytest.raises(Exception, match="other retrieval_penalty"):
        main([*argv, "--retrieval_penalty", "0.5", "--max_steps", "3"])


def test_the_evaluate_command_runs_the_trained_gate(setup, tmp_path):
    from inference.commands.evaluate import main as evaluate

    out = tmp_path / "policy"
    main([str(setup / "recipe.yaml"), "--output_dir", str(out), "--max_steps", "1"])
    ev = tmp_path / "eval"
    evaluate(["--method", "adapt-llm", "--model", str(out), "--dataset", str(setup / "qa.jsonl"), "--index",
              str(setup / "index"), "--output_dir", str(ev), "--show_progress", "false", "--dtype", "float32"])
    rows = [json.loads(line) for line in (ev / "predictions.jsonl").read_text().splitlines()]
    assert len(rows) == len(QUESTIONS) and all(r["policy"] == "adapt_llm" for r in rows)


def test_an_untied_head_trains_its_own_ret_row(tmp_path):
    folder = tiny_folder(tmp_path / "untied", tied=False)
    model, tokenizer, _ = load_policy(str(folder), GrpoTaskConfig(), GrpoTrainConfig(), "cpu")
    trained = [n for n, p in model.named_parameters() if p.requires_grad and "trainable_tokens" in n]
    # Llama-2's shape: greedy decoding writes <RET> only if the LM head's own row learns too
    assert any("embed_tokens" in n for n in trained) and any("lm_head" in n for n in trained)
    assert tokenizer.convert_tokens_to_ids("<RET>") == len(tokenizer) - 1


def test_search_training_takes_the_loss_on_the_policys_tokens_only(setup, tmp_path, monkeypatch):
    """Search-R1's task through trl: trl reads the rollout's env_mask, so the completion length it logs counts the
    policy's tokens and not the <information> block's."""
    from test_search_agent import TurnScript

    from adaptive_rag.lm.tokenization import continuation_ids
    from inference.search_agent import loop as loop_module

    tokenizer = load_tokenizer("smollm2-135m")
    turns = [" <search> Kelmora </search>", " <answer> Osk </answer>"]
    monkeypatch.setattr(loop_module, "decode_until", TurnScript(tokenizer, turns))
    out = tmp_path / "search"
    main([str(setup / "recipe.yaml"), "--task", "search", "--explore_ret", "0", "--max_steps", "1",
          "--max_searches", "1", "--top_k", "1", "--search_chat", "false", "--output_dir", str(out)])
    (row,) = json.loads((out / "train_results.json").read_text())["log"]
    policy_tokens = sum(len(continuation_ids(tokenizer, t)) for t in turns) + 1  # and the answer's EOS
    assert row["completions/mean_length"] == policy_tokens
    assert row["retrieval_share"] == 1.0 and row["rewards/format/mean"] == pytest.approx(0.1)
    # trl's reward is the three terms' sum: correct - λ 0.1 x one search + 0.1 for the kept format
    assert row["reward"] == pytest.approx(row["rewards/correct/mean"] - 0.1 + 0.1)


def test_full_fine_tuning_leaves_a_whole_model_the_gate_loads(setup, tmp_path):
    out = tmp_path / "full"
    main([str(setup / "recipe.yaml"), "--output_dir", str(out), "--max_steps", "1", "--finetune", "full",
          "--micro_batch_size", "2"])  # two passes of two completions, one optimizer step
    assert json.loads((out / "train_results.json").read_text())["global_step"] == 1
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    model, tokenizer = load_causal_lm(str(out))
    assert "<RET>" in tokenizer.get_vocab() and model.get_input_embeddings().weight.shape[0] == len(tokenizer)


def test_plain_text_ret_is_marked_for_the_gate(setup, tmp_path):
    from inference.adapt_gate.ret_token import ret_signal
    from training.grpo_model import finish_folder

    tokenizer = load_tokenizer(str(setup / "model"))
    finish_folder(tmp_path, tokenizer, GrpoTaskConfig(ret_token="text"), str(setup / "model"), lora=True)
    signal = ret_signal(load_tokenizer(str(tmp_path)), "auto")
    assert signal is not None and signal.mode == "text"
    assert json.loads((tmp_path / "adaptive_rag.json").read_text())["base_model"] == str(setup / "model")
