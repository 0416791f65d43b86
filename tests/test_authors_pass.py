"""The authors' attention pass (DRAGIN's generate_attn): one batched forward over each round's generated text alone,
only the last layer's weights computed, equal to an eager forward of each text by itself."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import FakeRetriever, tiny_llama
from scripted_lm import scripted_llama

from adaptive_rag.lm.decoder import BatchDecoder
from adaptive_rag.plumbing.records import QAExample
from inference.dynamic_rag.authors_pass import authors_token_attention, last_layer_attention
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig
from inference.dynamic_rag.signals import group_words


def _eager(model, ids):
    eager = copy.deepcopy(model)
    eager.set_attn_implementation("eager")
    with torch.no_grad():
        return eager(torch.tensor([ids]), output_attentions=True).attentions[-1][0].float()


def test_batched_pass_equals_each_texts_own_eager_forward(smol_tokenizer):
    model = tiny_llama(len(smol_tokenizer))
    texts = [[5, 17, 300, 42, 9, 77], [8, 1000, 3]]  # different lengths: one is left-padded
    decoder = BatchDecoder(model, smol_tokenizer, reduce="none")
    for got, ids in zip(last_layer_attention(decoder, texts), texts):
        assert got.shape == (4, len(ids), len(ids))
        assert torch.allclose(got, _eager(model, ids), atol=1e-5)
    # the reference's reduction: per head the max over query rows (diagonal included), then the mean over heads;
    # the first token attends to itself alone: 1 in every head
    w = torch.tensor([[[1.0, 0.0], [0.25, 0.75]], [[1.0, 0.0], [0.5, 0.5]]])
    assert authors_token_attention(w, "reference").tolist() == pytest.approx([1.0, 0.625])
    assert authors_token_attention(w, "paper").tolist() == pytest.approx([0.375, 0.0])  # later rows only


def test_a_pass_over_one_token_reads_its_row(smol_tokenizer):
    """A round that wrote its stop token alone (special_text keep) is judged over one token: the pass takes the
    all-rows path, not a decode step's (which kept no rows and ended the reference run on HotpotQA)."""
    model = tiny_llama(len(smol_tokenizer))
    decoder = BatchDecoder(model, smol_tokenizer, reduce="none")
    [alone] = last_layer_attention(decoder, [[2]])
    assert alone.shape == (4, 1, 1) and torch.allclose(alone, torch.ones(4, 1, 1))
    one, two = last_layer_attention(decoder, [[2], [5, 17]])  # beside a longer one: left-padded
    assert torch.allclose(one, torch.ones(4, 1, 1)) and torch.allclose(two, _eager(model, [5, 17]), atol=1e-5)


def test_engine_reads_the_authors_pass_when_asked(smol_tokenizer):
    model = scripted_llama(smol_tokenizer, " Osk founded Kelmora. Then he left:")
    words = {}
    for source in ("in_flight", "authors"):
        method = MethodConfig(method="dragin", dragin_profile="reference", theta=100.0, attention_pass=source,
                              rind_normalisation="paper", answer_extraction="project")
        engine = DynamicRAGEngine(model, smol_tokenizer, FakeRetriever(),
                                  PromptBuilder(smol_tokenizer, PromptConfig(prompt_style="paper", num_demos=1)),
                                  method, EngineConfig(batch_size=2, max_new_tokens=12, keep_signals=True))
        [record] = engine.run([QAExample("q", "Who founded Kelmora?", ["Osk"])], show_progress=False)
        words[source] = [w["attention"] for w in record.signals[0]["words"]]
    ids = smol_tokenizer(" Osk founded Kelmora. Then he left: O", add_special_tokens=False)["input_ids"][:12]
    per_token = authors_token_attention(_eager(model, ids), "reference")
    pieces = [smol_tokenizer.decode([i]) for i in ids]
    expected = [float(per_token[idx].sum()) for idx in group_words(pieces)]
    assert words["authors"] == pytest.approx(expected, abs=1e-4)
    assert words["authors"][0] > 1.0  # the round's first word holds position 0 of the pass: the sink
    assert words["in_flight"] != pytest.approx(expected, abs=1e-2)  # rows over the whole prompt differ


def test_qfs_reads_the_authors_pass_by_hand():
    # question + text pass: "Who" "Ġfounded" "ĠKel" "mora" "?" then the round " Osk founded": hit word = round token 0
    from inference.dynamic_rag.authors_pass import QfsPass
    from inference.dynamic_rag.queries.qfs import _reference
    from inference.dynamic_rag.round_view import Event, RoundView

    pieces = ["<s>", "Who", " founded", " Kel", "mora", "?", " Osk", " founded"]
    weights = torch.zeros(8, 8)
    weights[5, :6] = torch.tensor([0.5, 0.0, 0.1, 0.2, 0.1, 0.1])  # the row before the hit (position 6)
    view = RoundView("Who founded Kelmora?", [" Osk", " founded"], [0.5, 0.5], [1.0, 1.0], [], ["x"] * 3,
                     [True] * 3)
    view.authors_qfs = QfsPass(pieces, weights, offset=6, bos=1)
    event = Event(token=0, score=2.0, keep=0, hits=[[0]])
    # normalised over positions 0..5, the BOS's 0.5 kept as keep_real_words keeps it: "Kelmora?" (punctuation
    # attached) 0.4, founded 0.1; the BOS never joins the query
    row = weights[5, :6].tolist()
    assert sum(row[3:6]) / sum(row) == pytest.approx(0.4) and row[2] / sum(row) == pytest.approx(0.1)
    assert _reference(view, event, top_n=1) == "Kelmora?"
    assert _reference(view, event, top_n=2) == "founded Kelmora?"  # text order; the hit word "Osk" never joins


@pytest.mark.parametrize("word_text, expected", [
    # the round's own ids after question + answer so far
    ("pieces", "Who founded Kelmora? Osk founded Kelmora."),
    # keep_real_words' text as written: question + " " + text + " " + ptext + " " + the sentence's raw words, all
    # encoded again (text and ptext are empty in the first round)
    ("tokens", "Who founded Kelmora?   Osk founded Kelmora."),
])
def test_engine_runs_the_qfs_pass_over_question_and_text(smol_tokenizer, monkeypatch, word_text, expected):
    import inference.dynamic_rag.engine as engine_module

    seen = []
    real = engine_module.last_layer_attention

    def recording(decoder, batch_ids):
        seen.append([list(ids) for ids in batch_ids])
        return real(decoder, batch_ids)

    monkeypatch.setattr(engine_module, "last_layer_attention", recording)
    model = scripted_llama(smol_tokenizer, " Osk founded Kelmora. Then he left:")
    method = MethodConfig(method="dragin", dragin_profile="reference", theta=0.0, attention_pass="authors",
                          answer_extraction="project", max_rounds=1, word_text=word_text)
    engine = DynamicRAGEngine(model, smol_tokenizer, FakeRetriever(),
                              PromptBuilder(smol_tokenizer, PromptConfig(prompt_style="paper", num_demos=1)),
                              method, EngineConfig(batch_size=2, max_new_tokens=12))
    [record] = engine.run([QAExample("q", "Who founded Kelmora?", ["Osk"])], show_progress=False)
    assert len(record.retrievals) == 1
    texts = [smol_tokenizer.decode(ids) for batch in seen for ids in batch]
    qfs_inputs = [t for t in texts if t.startswith("Who founded Kelmora?")]
    assert qfs_inputs == [expected]  # no demos, no documents: up to the sentence end
    query = record.retrievals[0].query
    assert query and set(query.split()) <= {"Who", "founded", "Kelmora?", "Kelmora."}
    with pytest.raises(ValueError, match="qfs_attention reference"):
        MethodConfig(method="dragin", dragin_profile="paper", attention_pass="authors")
