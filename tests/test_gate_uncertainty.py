"""The uncertainty diagnostic (``bench/experiments/gate_uncertainty.py``): its two scores by hand, where an answer
ends, the table it builds, the re-answer on an untied model with a Llama-2-style SentencePiece tokenizer and an added
``<RET>`` (the scores are those of the tokens it wrote, with ``<RET>`` banned), and its mistakes as one line."""

from __future__ import annotations

import math

import pytest
import torch
from bench_modules import bench_module
from tokenizer_matrix import make_tokenizer

from data_builders.adapt_llm_prompts import RET_TOKEN, parametric_prompt

unc = bench_module("experiments/gate_uncertainty")


def test_answer_scores_by_hand():
    scores = unc.answer_scores([0.9, 0.4, 0.8], [0.1, 1.2, 0.3], 100)
    assert scores["1 − min p"] == pytest.approx(0.6) and scores["max entropy"] == pytest.approx(1.2)
    # an empty answer: as unsure as can be by both, so a threshold on either retrieves for it
    assert unc.answer_scores([], [], 100) == {"1 − min p": 1.0, "max entropy": pytest.approx(math.log(100))}


@pytest.mark.parametrize("texts,n", [
    (["Paris", "Paris.", "Paris.\n\n", "Paris.\n\nThe"], 2),  # the blank line ends it
    (["Par", "Paris", "Paris ###", "Paris ### Note"], 2),  # so does the Alpaca marker
    (["\n\n", "\n\nParis", "\n\nParis."], 3),  # leading blank lines are not an end (response_text strips them)
    (["###"], 0),  # the marker first: the answer part is empty, as response_text has it
    (["\n", "\n###"], 0),  # so it is after a lone newline
    (["Herman", "Herman Melville"], 2),
])
def test_answer_length_cuts_where_response_text_does(texts, n):
    assert unc.answer_length(texts) == n


def _gate(rows):
    return {f"q{i}": {"score": s, "retrieved": float(r), "acc": float(a if r else m), "memory": float(m),
                      "ar": float(a)} for i, (s, r, m, a) in enumerate(rows)}


def test_scored_swaps_the_decision_score_and_keeps_only_answered_questions():
    gate = _gate([(0.9, 1, 0, 1), (0.1, 0, 1, 0)])
    assert unc.scored(gate, {}, "p(<RET>)") is gate
    swapped = unc.scored(gate, {"q1": {"1 − min p": 0.7}}, "1 − min p")
    assert list(swapped) == ["q1"] and swapped["q1"]["score"] == 0.7 and swapped["q1"]["memory"] == 1.0


def test_report_reads_each_score_as_the_decision():
    # p(<RET>) ranks the two unknown facts (q0, q3) first and last; 1 − min p ranks them first and second
    gate = _gate([(0.9, 1, 0, 1), (0.6, 1, 1, 0), (0.3, 0, 1, 0), (0.1, 0, 0, 1)])
    answers = {f"q{i}": {"1 − min p": u, "max entropy": e}
               for i, (u, e) in enumerate([(0.8, 2.0), (0.2, 0.5), (0.1, 1.0), (0.7, 1.5)])}
    labels = {"q0": "unknown", "q1": "known", "q2": "known", "q3": "unknown"}
    ar = {f"q{i}": {"acc": a} for i, a in enumerate([1, 0, 0, 1])}
    lines = unc.report({"rl": gate}, {"rl": gate}, {"rl": answers}, {"rl": answers}, ar, labels, 0.7)
    rows = {line.split(" | ")[1]: [c.strip(" |") for c in line.split(" | ")[2:]] for line in lines[2:]}
    assert rows["p(<RET>)"][0].startswith("0.500 [")
    assert rows["1 − min p"][0].startswith("1.000 [") and rows["max entropy"][0].startswith("1.000 [")
    # retrieving for q0 and q3 only (share 0.5) answers all four right: AR's on the unknown, memory's on the known
    assert rows["1 − min p"][1] == "1.000 (share 0.500)"
    # the tuning half (here the same rows) chooses "retrieve above q1's 0.2": its share and accuracy there beside it
    assert rows["1 − min p"][2] == "0.2000 (0.500, 1.000)"
    assert rows["1 − min p"][3].startswith("0.500 [") and rows["1 − min p"][4].startswith("1.000 [")
    assert rows["1 − min p"][5].startswith("+0.500 [")


def _untied_sentencepiece_model(folder, boosted: str):
    """A tiny untied Llama with a Llama-2-style SentencePiece tokenizer and an added ``<RET>``, whose greedy choice is
    always ``boosted`` (one shared positive direction in every embedding, read by that token's head row alone)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = make_tokenizer("sentencepiece")
    tokenizer.add_special_tokens({"additional_special_tokens": [RET_TOKEN]})
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False, bos_token_id=1,
                      eos_token_id=2, pad_token_id=0, max_position_embeddings=512)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.model.embed_tokens.weight[:, 0] = 1.0
        model.lm_head.weight[tokenizer.convert_tokens_to_ids(boosted), 0] = 10.0
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


def test_reanswer_scores_the_tokens_it_wrote_with_ret_banned(tmp_path):
    model, tokenizer = _untied_sentencepiece_model(tmp_path, RET_TOKEN)  # unbanned, every greedy token is <RET>
    ret = tokenizer.convert_tokens_to_ids(RET_TOKEN)
    questions = {"a": "Where was Town1 founded?", "b": "Who wrote Ünïcode Tales, in 1901?"}
    out = unc.reanswer(str(tmp_path), questions, "paper", batch_size=2, max_new_tokens=6)
    for qid, question in questions.items():
        row = out[qid]
        assert row["tokens"] and ret not in row["tokens"]
        prompt = tokenizer(parametric_prompt(question, "paper"))["input_ids"]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + row["tokens"]])).logits[0, len(prompt) - 1:-1].float()
        assert (logits.argmax(-1) == ret).all()
        logits[:, ret] = -math.inf
        logp = logits.log_softmax(-1)
        chosen = logp.gather(-1, torch.tensor(row["tokens"])[:, None]).squeeze(-1).exp()
        entropy = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)
        assert row["1 − min p"] == pytest.approx(1 - chosen.min().item(), abs=1e-4)
        assert row["max entropy"] == pytest.approx(entropy.max().item(), abs=1e-4)
        assert row["answer"] == " ".join(tokenizer.decode(row["tokens"], skip_special_tokens=True).split())


def test_reanswer_that_ends_at_once_is_an_empty_answer_as_unsure_as_can_be(tmp_path):
    _, tokenizer = _untied_sentencepiece_model(tmp_path, "</s>")  # Llama-2's EOS: every greedy token ends it
    assert tokenizer.eos_token == "</s>"
    row = unc.reanswer(str(tmp_path), {"a": "Where was Town1 founded?"}, "paper", max_new_tokens=4)["a"]
    assert row["answer"] == "" and row["tokens"] == []
    assert row["1 − min p"] == 1.0 and row["max entropy"] == pytest.approx(math.log(len(tokenizer)))


def test_mistakes_end_in_one_line(tmp_path, capsys):
    def err_of(argv):
        assert unc.main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and "Traceback" not in err
        return err

    ok = tmp_path / "eval"
    ok.mkdir()
    (ok / "config.yaml").write_text("method: nr\n")
    out = ["--out", str(tmp_path / "u.md")]
    assert "expected NAME=MODEL,GATE,MEMORY,AR" in err_of(["--gate", f"rl={ok},{ok}", "--ar", str(ok), *out])
    assert "is not a model folder" in err_of(["--gate", f"rl={tmp_path}/none,{ok},{ok},{ok}", "--ar", str(ok), *out])
    assert "is not an evaluation folder" in err_of(
        ["--gate", f"rl={tmp_path},{tmp_path},{ok},{ok}", "--ar", str(ok), *out])
    assert err_of(["--gate", f"rl={tmp_path},{ok},{ok},{ok}", "--tune", f"sup={ok},{ok},{ok}", "--ar", str(ok),
                   *out]) == "error: --tune sup: no --gate sup to apply it to"
    assert err_of(["--gate", f"rl={tmp_path},{ok},{ok},{ok}", "--ar", str(tmp_path), *out]).startswith("error: --ar ")


def _memory_folder(folder, rows):
    """An evaluation folder of the gate answering from memory: (id, question, output, answered_by) rows."""
    import json

    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("method: adapt-llm\ndataset: knowing-adapt\ngate_prompt_variant: plain\n"
                                        "gate_max_new_tokens: 7\n")
    (folder / "predictions.jsonl").write_text("".join(json.dumps(
        {"id": i, "question": q, "answers": ["x"], "output": out, "policy": "adapt_llm", "retrieved": False,
         "answered_by": by}) + "\n" for i, q, out, by in rows))
    return folder


def test_reanswers_are_cached_with_what_they_answered_and_a_stale_cache_is_refused(tmp_path, monkeypatch):
    memory = _memory_folder(tmp_path / "memory", [("a", "Q a?", "Paris", "parametric"),
                                                  ("b", "Q b?", "Rome", "parametric"),
                                                  ("c", "Q c?", "Oslo", "closed_book")])
    calls = []

    def fake(model_dir, questions, variant, batch_size, max_new_tokens):
        calls.append((variant, max_new_tokens))
        return {i: {"id": i, "answer": {"a": "Paris", "b": "Milan", "c": "Bergen"}[i], "1 − min p": 0.5,
                    "max entropy": 1.0} for i in questions}

    monkeypatch.setattr(unc, "reanswer", fake)
    model = tmp_path / "model"
    model.mkdir()
    cache = tmp_path / "u" / "rl-eval.jsonl"
    answers = unc.load_or_answer(cache, str(model), memory, 4)
    assert calls == [("plain", 7)]  # the gate's recorded prompt and budget
    assert unc.load_or_answer(cache, str(model), memory, 4) == answers and len(calls) == 1  # read back
    # one of the two answered by the parametric prompt agrees; the NR prompt's (parametric answer <RET>) does not
    assert unc.agreement(answers, memory) == ("1 of 3 (1 of 2 answered by the parametric prompt, 0 of 1 by the NR "
                                              "prompt after a <RET>)")
    other = tmp_path / "other_model"
    other.mkdir()
    with pytest.raises(ValueError, match="cached for another model"):
        unc.load_or_answer(cache, str(other), memory, 4)
