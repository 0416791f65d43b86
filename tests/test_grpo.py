"""GRPO on the retrieval decision: the reward's bookkeeping (hand-computed), the gate rollout with retrieval, the
format term, the exploration rows, the config's refusals, and the tokenizer cases where <RET>'s ids matter."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from bench_modules import bench_module
from conftest import tiny_llama
from tokenizer_matrix import make_tokenizer

from adaptive_rag.lm.generation import Generation
from adaptive_rag.lm.tokenization import prompt_ids
from data_builders.adapt_llm_prompts import RET_TOKEN, context_prompt, parametric_prompt
from inference.adapt_gate.ret_token import text_piece_ids
from training import grpo_rollout
from training.grpo_config import GrpoTaskConfig, GrpoTrainConfig
from training.grpo_rewards import reward_functions, total_reward
from training.grpo_rollout import GateRollout, forced_rows
from training.lora_sft import add_ret_token


def test_reward_is_correct_minus_lambda_per_retrieval_plus_format():
    funcs = reward_functions("contains", True, penalty=0.3, format_reward=0.1)
    logged = {}
    fields = dict(answer=["Paris", "the city of Paris.", None, "Lyon"], answers=[["paris"], ["Paris"], ["Paris"],
                                                                                 ["Paris"]],
                  retrievals=[0, 1, 2, 1], well_formed=[True, True, False, False],
                  log_metric=lambda name, value: logged.setdefault(name, value))
    # 1 - 0 + 0.1 | 1 - 0.3 + 0.1 | 0 - 0.6 + 0 | 0 - 0.3 + 0
    assert total_reward(funcs, **fields) == pytest.approx([1.1, 0.8, -0.6, -0.3])
    assert [f.__name__ for f in funcs] == ["correct", "retrieval_cost", "format"]  # trl logs each under its name
    assert logged == {"retrieval_share": 0.75, "retrievals": 1.0}
    exact = reward_functions("exact_match", True, penalty=0.0, format_reward=0.0)
    assert total_reward(exact, **{**fields, "log_metric": None}) == [1.0, 0.0, 0.0, 0.0]


def test_forced_rows_are_the_first_of_each_group():
    assert forced_rows(8, 4, 0.25) == {0, 4}
    assert forced_rows(8, 4, 0.5) == {0, 1, 4, 5}
    assert forced_rows(6, 3, 0.0) == set()


@pytest.mark.parametrize("kw,match", [
    ({"retrieval_penalty": -1}, "retrieval_penalty and format_reward must be >= 0"),
    ({"explore_ret": 1.0}, r"explore_ret must be in \[0, 1\)"),
    ({"task": "agent"}, "task must be one of gate, search"),
    ({"context_ban_ret": True, "ret_token": "text"}, "context_ban_ret needs ret_token: special"),
])
def test_task_config_refuses(kw, match):
    with pytest.raises(ValueError, match=match):
        GrpoTaskConfig(**kw)


@pytest.mark.parametrize("kw,match", [
    ({"num_generations": 1}, "num_generations must be >= 2"),
    ({"finetune": "full", "init_adapter": "x"}, "init_adapter continues a LoRA adapter"),
    ({"beta": -0.1}, "beta must be >= 0"),
    ({"micro_batch_size": 3}, r"micro_batch_size must divide questions_per_step x num_generations \(32\)"),
])
def test_train_config_refuses(kw, match):
    with pytest.raises(ValueError, match=match):
        GrpoTrainConfig(**kw)


@pytest.fixture()
def ret_tokenizer():
    tokenizer = make_tokenizer("bpe")
    add_ret_token(tokenizer)
    return tokenizer


def trainer_for(model, group: int = 4):
    return SimpleNamespace(model=model, accelerator=SimpleNamespace(unwrap_model=lambda m: m),
                           num_generations=group, state=SimpleNamespace(global_step=0))


@pytest.fixture()
def context_answers(monkeypatch):
    """The context prompt's answer is the environment's: a stub that answers every prompt "Paris". Gives the prompts
    it saw and the tokens each call banned."""
    seen: list[str] = []

    def answer(model, tokenizer, prompts, **kwargs):
        seen.extend(prompts)
        bans.append(kwargs.get("banned_tokens", ()))
        return [Generation(" Paris\n\n### Note", 2, {}) for _ in prompts]

    bans: list[tuple[str, ...]] = []
    monkeypatch.setattr(grpo_rollout, "generate_texts", answer)
    return seen, bans


def test_outcomes_of_each_kind_of_decision(ret_tokenizer, fake_retriever, context_answers):
    tok = ret_tokenizer
    rollout = GateRollout(tok, fake_retriever, GrpoTaskConfig(top_k=1), GrpoTrainConfig())
    eos, ret = tok.eos_token_id, tok.convert_tokens_to_ids(RET_TOKEN)
    lyon = tok(" Lyon", add_special_tokens=False)["input_ids"]
    completions = [[ret, eos], lyon + [eos], [ret] + lyon + [eos], lyon, [eos]]
    ended = ["eos", "eos", "eos", "length", "eos"]
    got = rollout.outcomes(tiny_llama(len(tok)), ["Q0?", "Q1?", "Q2?", "Q3?", "Q4?"], completions, ended, {0})
    # <RET> alone retrieves with the question and is well formed; <RET> with more text retrieves but is not
    assert got["retrievals"] == [1, 0, 1, 0, 0]
    assert got["well_formed"] == [True, True, False, False, False]  # truncated (length) and empty are not
    assert got["answer"] == ["Paris", "Lyon", "Paris", "Lyon", ""]
    assert got["forced"] == [True, False, False, False, False]
    assert fake_retriever.queries == ["Q0?", "Q2?"]
    assert context_answers[0] == [context_prompt("Q0?", ["Doc 0 About Q0?."], "paper", 40),
                                  context_prompt("Q2?", ["Doc 0 About Q2?."], "paper", 40)]
    assert context_answers[1] == [()]  # <RET> may answer the context prompt unless context_ban_ret says otherwise


def test_context_ban_ret_bans_ret_from_the_environments_answer(ret_tokenizer, fake_retriever, context_answers):
    tok = ret_tokenizer
    rollout = GateRollout(tok, fake_retriever, GrpoTaskConfig(context_ban_ret=True), GrpoTrainConfig())
    ret = tok.convert_tokens_to_ids(RET_TOKEN)
    rollout.outcomes(tiny_llama(len(tok)), ["Q0?"], [[ret, tok.eos_token_id]], ["eos"], set())
    assert context_answers[1] == [(RET_TOKEN,)]


def test_the_rollout_returns_what_trl_reads(ret_tokenizer, fake_retriever, context_answers):
    tok = ret_tokenizer
    task = GrpoTaskConfig(explore_ret=0.5)
    rollout = GateRollout(tok, fake_retriever, task, GrpoTrainConfig(max_new_tokens=4, num_generations=2))
    prompts = ["Who founded Osk?"] * 2 + ["Where is Lima?"] * 2
    out = rollout(prompts, trainer_for(tiny_llama(len(tok)), group=2))
    assert out["prompt_ids"][0] == prompt_ids(tok, parametric_prompt("Who founded Osk?"))
    ret, eos = tok.convert_tokens_to_ids(RET_TOKEN), tok.eos_token_id
    # rows 0 and 2 open their groups: set to <RET> + EOS, log-probabilities unknown (NaN: trl corrects nothing)
    assert out["completion_ids"][0] == out["completion_ids"][2] == [ret, eos]
    assert all(math.isnan(x) for x in out["logprobs"][0])
    for ids, lps in zip(out["completion_ids"], out["logprobs"]):
        assert len(ids) == len(lps) and 1 <= len(ids) <= 4
    assert out["retrievals"][0] == out["retrievals"][2] == 1 and out["forced"] == [True, False, True, False]
    assert fake_retriever.queries[:2] == ["Who founded Osk?", "Where is Lima?"]
    assert "env_mask" not in out  # the whole decision is the policy's


@pytest.mark.parametrize("family", ["bpe_bos", "sentencepiece"])
def test_plain_text_ret_is_forced_and_read_with_the_pieces_the_gate_reads(family, fake_retriever, context_answers):
    """ret_token text on a BOS tokenizer and on Llama-2-style SentencePiece: the forced decision is the pieces
    "<RET>" has after the parametric prompt (the threshold rule's pieces), it reads back as a retrieval, and the
    prompt carries BOS once."""
    tok = make_tokenizer(family)
    rollout = GateRollout(tok, fake_retriever, GrpoTaskConfig(ret_token="text", explore_ret=0.5),
                          GrpoTrainConfig(max_new_tokens=3, num_generations=2))
    out = rollout(["Who founded Osk?"] * 2, trainer_for(tiny_llama(len(tok)), group=2))
    assert out["completion_ids"][0] == text_piece_ids(tok) + [tok.eos_token_id]
    assert rollout.decision_text(out["completion_ids"][0]) .strip() == RET_TOKEN
    assert out["retrievals"][0] == 1 and out["well_formed"][0]
    ids = out["prompt_ids"][0]
    assert ids[0] == tok.bos_token_id and ids.count(tok.bos_token_id) == 1


def test_a_vllm_turn_is_cut_after_its_closing_tag(smol_tokenizer):
    """trl's vLLM engine has no stop strings: the turn ends where decode_until would have ended it."""
    from adaptive_rag.lm.tokenization import continuation_ids
    from training.grpo_vllm import cut_at_stop, vllm_decoder

    tok = smol_tokenizer
    turn = continuation_ids(tok, " <search> Osk </search>")
    more = continuation_ids(tok, " and then")
    got = cut_at_stop(turn + more, [-1.0] * (len(turn) + len(more)), tok, ("</search>", "</answer>"))
    assert got.ids == turn and got.reason == "stop" and got.stop_text == "</search>" and len(got.logprobs) == len(turn)
    eos = tok.eos_token_id
    assert cut_at_stop(more + [eos] + more, [0.0] * 5, tok, ("</search>",)).ids[-1] == eos
    assert cut_at_stop(more, [0.0] * len(more), tok, ("</search>",)).reason == "length"

    class FakeVLLM:
        def generate(self, prompts, images, num_generations):
            return prompts, [turn + more for _ in prompts], [[[-0.5]] * len(turn + more) for _ in prompts], None

    decode = vllm_decoder(SimpleNamespace(vllm_generation=FakeVLLM()))
    (out,) = decode(None, tok, [[1, 2]], max_new_tokens=64, stop_texts=("</search>",))
    assert out.ids == turn and out.logprobs == [-0.5] * len(turn)


RECIPES = ["training/configs/grpo_demo_cpu.yaml", "training/configs/grpo_search_cpu.yaml",
           "training/configs/grpo_search_qwen7b_vllm.yaml", "bench/experiments/grpo_knowing_gate.yaml",
           "bench/experiments/grpo_knowing_search.yaml"]


@pytest.mark.parametrize("recipe", RECIPES)
def test_every_grpo_recipe_parses(recipe):
    from pathlib import Path

    from training.grpo import parse

    root = Path(__file__).resolve().parents[1]
    assert sorted(str(p.relative_to(root)) for p in root.glob("*/**/grpo_*.yaml")) == sorted(RECIPES)
    _, task, train = parse([str(root / recipe)])
    assert train.num_generations >= 2 and task.task in ("gate", "search")


@pytest.mark.parametrize("recipe,n", [("training/configs/grpo_demo_cpu.yaml", 256),
                                      ("training/configs/grpo_search_cpu.yaml", 128)])
def test_the_cpu_recipes_select_their_questions(recipe, n):
    from pathlib import Path

    from training.grpo import parse
    from training.grpo_job import training_questions

    _, task, _ = parse([str(Path(__file__).resolve().parents[1] / recipe)])
    questions = training_questions(task)
    assert len(questions) == n and len({q.id for q in questions}) == n


def test_lambda_sweep_commands_and_figure(tmp_path):
    import json
    import sys

    from bench_modules import bench_module

    sweep = bench_module("experiments/grpo_lambda_sweep")
    cmds = sweep.commands("r.yaml", [0.0, 0.05], tmp_path, "knowing-adapt", "--index i", "--index i")
    assert cmds[0] == [sys.executable, "training/grpo.py", "r.yaml", "--retrieval_penalty", "0", "--output_dir",
                       str(tmp_path / "lambda_0"), "--index", "i"]
    assert cmds[3][-6:] == ["--output_dir", str(tmp_path / "lambda_0.05" / "eval"), "--show_progress", "false",
                            "--index", "i"]
    for lam, acc, share in ((0.0, 0.6, 1.0), (0.05, 0.65, 0.55)):
        (tmp_path / f"lambda_{lam:g}" / "eval").mkdir(parents=True)
        (tmp_path / f"lambda_{lam:g}" / "eval" / "metrics.json").write_text(
            json.dumps({"acc": acc, "retrieval_share": share}))
    rows = sweep.collect(tmp_path, [0.0, 0.05, 0.2])  # λ 0.2 has not finished: left out
    assert rows == [{"lambda": 0.0, "acc": 0.6, "retrieval_share": 1.0},
                    {"lambda": 0.05, "acc": 0.65, "retrieval_share": 0.55}]
    sweep.plot(rows, tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000
    assert sweep.main(["r.yaml", "--lambdas", "-1", "--output_dir", str(tmp_path)]) == 2


@pytest.mark.parametrize("argv,message", [
    (["--index", "/nonexistent/index"], "error: --index /nonexistent/index: no such index folder"),
    (["--init_adapter", "/nonexistent/adapter"], "error: --init_adapter /nonexistent/adapter: not an adapter folder"),
    (["--lambda", "0.1"], "error: "),
    (["--num_generations", "1"], "error: num_generations must be >= 2"),
    (["--dataset", "world-three-hop"], "error: "),
])
def test_mistakes_end_in_one_line_before_a_model_loads(argv, message, capsys):
    from adaptive_rag.plumbing.cli import run_cli
    from training.grpo import main

    assert run_cli(main, argv=argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(message) and "\n" not in err and "Traceback" not in err


def test_arms_table_pairs_every_arm_with_each_reference_and_builds_the_oracle():
    from bench_modules import bench_module

    arms_module = bench_module("experiments/grpo_arms")

    def arm(acc, retrieved):
        return {f"q{i}": {"acc": float(a), "retrieved": float(r), "score": float(r)}
                for i, (a, r) in enumerate(zip(acc, retrieved))}

    arms = {"nr": arm([1, 0, 0, 0], [0] * 4), "ar": arm([0, 1, 1, 0], [1] * 4),
            "ar_base": arm([0, 1, 0, 0], [1] * 4), "rl": arm([1, 1, 0, 0], [0, 1, 1, 0])}
    labels = {"q0": "known", "q1": "unknown", "q2": "unknown", "q3": "known"}
    lines = arms_module.table(arms, labels)
    assert lines[0] == "4 questions every arm answered"
    assert lines[2].endswith("| − AR, paired | − AR (knowing model), paired | − supervised, paired |")
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in lines[4:]}
    # the RL arm: 2 of 4 right, retrieves on the two unknown questions (AUROC 1), 0.25 above AR (knowing model)
    assert rows["rl"][0].startswith("0.500 [") and rows["rl"][1].startswith("0.500 [")
    assert rows["rl"][2].startswith("1.000 [") and rows["rl"][3].startswith("0.000 [")
    assert rows["rl"][4].startswith("0.250 [") and rows["rl"][5].strip(" |") == "-"
    # the oracle: AR's answer on the unknown questions, NR's elsewhere
    assert rows["oracle"][0].startswith("0.750 [") and rows["oracle"][1].startswith("0.500 [")
    assert "AR (knowing model)" not in arms_module.table({k: arms[k] for k in ("nr", "ar", "rl")}, labels)[2]


def test_arms_table_adds_a_named_reference_and_counts_the_queries_searched():
    from bench_modules import bench_module

    arms_module = bench_module("experiments/grpo_arms")

    def arm(acc, searches, same):
        return {f"q{i}": {"acc": float(a), "retrieved": float(n > 0), "score": float(n > 0), "searches": float(n),
                          "question_queries": float(m)} for i, (a, n, m) in enumerate(zip(acc, searches, same))}

    arms = {"ar": arm([1, 1, 0, 0], [1] * 4, [1] * 4), "warm": arm([1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 0, 0]),
            "rl": arm([1, 1, 1, 0], [2, 1, 0, 0], [1, 0, 0, 0])}
    lines = arms_module.table(arms, {}, ("warm",))
    assert lines[2].endswith("| − AR, paired | − supervised, paired | − warm, paired |")
    rl = [c.strip(" |") for c in next(line for line in lines if line.startswith("| rl |")).split(" | ")]
    assert rl[-2] == "-" and rl[-1].startswith("0.500 [")  # no supervised arm; 3 of 4 against 1 of 4
    # rl: 3 searches over 4 questions, 1 of them the question itself; NR-like arms without searches are left out
    assert arms_module.query_lines({**arms, "nr": arm([0] * 4, [0] * 4, [0] * 4)}) == [
        "| arm | searches per question | queries that are the question |", "|---|---|---|",
        "| ar | 1.000 | 1.000 (4 of 4) |", "| warm | 0.500 | 1.000 (2 of 2) |", "| rl | 0.750 | 0.333 (1 of 3) |"]


def test_arms_refuses_a_reference_that_is_not_an_arm(tmp_path, capsys):
    from bench_modules import bench_module

    arms_module = bench_module("experiments/grpo_arms")
    (tmp_path / "config.yaml").write_text("method: ar\n")
    assert arms_module.main(["--arm", f"ar={tmp_path}", "--ref", "warm"]) == 2
    assert capsys.readouterr().err.strip() == "error: --ref warm: not one of the arms (ar)"


def _gate(rows):
    """Question id -> score, retrieved, acc (the gate's), memory, ar, from (score, retrieved, memory, ar) tuples."""
    return {f"q{i}": {"score": s, "retrieved": float(r), "acc": float(a if r else m), "memory": float(m),
                      "ar": float(a)}
            for i, (s, r, m, a) in enumerate(rows)}


# four questions, p(<RET>) 0.9 / 0.6 / 0.3 / 0.1; the gate retrieves for the first two; its own answers
GATE = _gate([(0.9, 1, 0, 1), (0.6, 1, 1, 0), (0.3, 0, 1, 0), (0.1, 0, 0, 1)])


def test_operating_curve_redecides_each_threshold_from_the_gates_own_answers():
    ops = bench_module("experiments/gate_operating")
    # always: AR's 1,0,0,1; > 0.1: AR, AR, AR, memory; > 0.3: two each; > 0.6: AR then memory; never: memory's 0,1,1,0
    assert ops.curve(GATE) == [(-1.0, 1.0, 0.5), (0.1, 0.75, 0.25), (0.3, 0.5, 0.5), (0.6, 0.25, 0.75),
                               (0.9, 0.0, 0.5)]
    assert ops.choose_threshold(ops.curve(GATE), 0.7) == 0.6
    assert ops.choose_threshold(ops.curve(GATE), 0.2) == 0.9
    assert ops.choose_threshold([(0.1, 0.6, 0.5), (0.4, 0.3, 0.5)], 0.7) == 0.4  # a tie: the higher threshold
    assert ops.mismatches(GATE) == 0
    assert ops.mismatches({**GATE, "q0": {**GATE["q0"], "acc": 0.0}}) == 1


def test_operating_report_splits_decisions_and_applies_the_tuning_threshold():
    ops = bench_module("experiments/gate_operating")
    ar = {f"q{i}": {"acc": a} for i, a in enumerate([1, 1, 0, 1])}
    nr = {f"q{i}": {"acc": a} for i, a in enumerate([0, 0, 1, 0])}
    labels = {"q0": "unknown", "q1": "unknown", "q2": "known", "q3": "unknown"}
    tune = _gate([(0.8, 1, 0, 1), (0.5, 0, 1, 0), (0.2, 0, 1, 1), (0.05, 0, 0, 0)])  # best share <= 0.7: > 0.5
    lines, _ = ops.report({"rl": GATE}, {"rl": tune}, ar, nr, labels, 0.7)
    # retrieved q0, q1: the gate 0.5, AR 1.0, NR 0.0, both unknown; from memory q2, q3: the gate 0.5, AR 0.5, NR 0.5
    assert "| rl | retrieved | 2 | 0.500 | 1.000 | 0.000 | 1.000 |" in lines
    assert "| rl | from memory | 2 | 0.500 | 0.500 | 0.500 | 0.500 |" in lines
    assert "Recorded answers scored unlike the gate's own answer for its decision: rl 0 of 4" in lines
    # the tuning half picks 0.5 (share 0.25, accuracy 0.75); here it retrieves for q0 and q1 as the greedy gate does
    row = next(line for line in lines if line.startswith("| rl | 0.5000 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2:4] == ["0.250", "0.750"]
    assert cells[4].startswith("0.500 [") and cells[5].startswith("0.500 [")
    assert cells[6].startswith("-0.250 [") and cells[7].startswith("+0.000 [")
    with pytest.raises(ValueError, match="no --gate sup"):
        ops.report({"rl": GATE}, {"sup": tune}, ar, nr, labels, 0.7)


def test_operating_refuses_a_gate_without_its_three_folders(tmp_path, capsys):
    ops = bench_module("experiments/gate_operating")
    assert ops.main(["--gate", f"rl={tmp_path},{tmp_path}", "--ar", str(tmp_path), "--nr", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --gate rl=") and "expected NAME=GATE,MEMORY,AR" in err and "\n" not in err.strip()
    (tmp_path / "config.yaml").write_text("method: nr\n")
    assert ops.main(["--gate", f"rl={tmp_path},{tmp_path},{tmp_path}", "--ar", str(tmp_path / "none"),
                     "--nr", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: --ar ")
