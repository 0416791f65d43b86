"""Re-rankers with stub models: input formatting, scores equal a direct computation, batching changes nothing."""

from __future__ import annotations

import pytest
import torch

from adaptive_rag.plumbing.records import Passage
from retrieval_adapt.rerankers import CrossEncoderReranker, LLMReranker, RerankItem, build_reranker

PASSAGES = [Passage("a", "Zorara", "Zorara is a city on the coast."), Passage("b", "Ann", "Ann Lee wrote books."),
            Passage("c", "", "Short.")]


@pytest.fixture(scope="module")
def bert_tokenizer():
    from transformers import AutoTokenizer

    from adaptive_rag.lm.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("minilm"))


def tiny_cross_encoder(vocab_size: int, num_labels: int):
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, num_labels=num_labels)
    return BertForSequenceClassification(cfg).eval()


@pytest.mark.parametrize("num_labels", [1, 2])
def test_cross_encoder_scores_y1_sep_question_pairs(bert_tokenizer, num_labels):
    model = tiny_cross_encoder(len(bert_tokenizer), num_labels)
    rr = CrossEncoderReranker(model, bert_tokenizer, batch_size=2)
    assert rr.query_text("Where?", "It is Zorara.") == "It is Zorara. [SEP] Where?"
    scores = rr.score("Where?", "It is Zorara.", PASSAGES)
    with torch.no_grad():
        batch = bert_tokenizer(["It is Zorara. [SEP] Where?"] * 3, [p.contents for p in PASSAGES], padding=True,
                               return_tensors="pt")
        logits = model(**batch).logits
    expected = logits[:, 0] if num_labels == 1 else torch.log_softmax(logits, -1)[:, 1]
    assert scores == pytest.approx(expected.tolist(), abs=1e-5)
    assert len(set(scores)) == 3


def test_cross_encoder_without_y1_and_batching(bert_tokenizer):
    model = tiny_cross_encoder(len(bert_tokenizer), 1)
    rr = CrossEncoderReranker(model, bert_tokenizer, use_y1=False, batch_size=1)
    assert rr.query_text("Where?", "y1") == "Where?"
    items = [RerankItem("Where?", "y", PASSAGES), RerankItem("Who?", "z", PASSAGES[:2])]
    one_by_one = rr.score_batch(items)
    rr.batch_size = 16
    assert [len(s) for s in one_by_one] == [3, 2]
    assert rr.score_batch(items) == [pytest.approx(s, abs=1e-5) for s in one_by_one]


def _manual_logprob(model, tokenizer, prompt: str, target: str) -> float:
    p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    t = tokenizer(target, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        log_p = torch.log_softmax(model(input_ids=torch.tensor([p + t])).logits[0].float(), -1)
    return float(sum(log_p[len(p) - 1 + i, tok] for i, tok in enumerate(t)))


def test_llm_answer_logprob_equals_direct_computation(tiny_model, smol_tokenizer):
    rr = LLMReranker(tiny_model, smol_tokenizer, batch_size=2)
    item = RerankItem("Where is X based?", "Draft y1.", PASSAGES, ["Zorara", "alias"])
    scores = rr.score(item.question, item.y1, item.passages, answers=item.answers)
    expected = [_manual_logprob(tiny_model, smol_tokenizer, rr.prompt(item, p), "Zorara") for p in PASSAGES]
    assert scores == pytest.approx(expected, abs=1e-4)  # left padding + position ids change nothing
    prompt = rr.prompt(item, PASSAGES[0])
    assert "Paragraph: Zorara: Zorara is a city" in prompt and "Draft answer: Draft y1." in prompt
    assert prompt.startswith("<|im_start|>system") and prompt.endswith("<|im_start|>assistant\n")


def test_llm_batching_and_plain_prompts(tiny_model, smol_tokenizer):
    rr = LLMReranker(tiny_model, smol_tokenizer, batch_size=1, use_chat_template=False, use_y1=False)
    items = [RerankItem("Q one?", "y1 one", PASSAGES, ["Ann Lee"]), RerankItem("Q two, longer?", "y", PASSAGES[:1],
                                                                              ["a much longer gold answer"])]
    assert "Draft answer" not in rr.prompt(items[0], PASSAGES[0]) and rr.prompt(items[0], PASSAGES[0]).endswith(
        "\nAnswer:")
    assert rr.target(items[0]) == " Ann Lee"
    one = rr.score_batch(items)
    rr.batch_size = 8
    assert rr.score_batch(items) == [pytest.approx(s, abs=1e-4) for s in one]


def test_llm_yes_logprob(tiny_model, smol_tokenizer):
    rr = LLMReranker(tiny_model, smol_tokenizer, mode="yes_logprob", batch_size=2)
    item = RerankItem("Where?", "y1", PASSAGES)  # no gold answer needed
    scores = rr.score(item.question, item.y1, item.passages)
    yes, no = (smol_tokenizer(w, add_special_tokens=False)["input_ids"][0] for w in ("Yes", "No"))
    ids = smol_tokenizer(rr.prompt(item, PASSAGES[1]), add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        last = torch.log_softmax(tiny_model(input_ids=torch.tensor([ids])).logits[0, -1], -1)
    assert scores[1] == pytest.approx(float(last[yes] - torch.logaddexp(last[yes], last[no])), abs=1e-4)
    assert all(s < 0 for s in scores)
    assert "Answer Yes or No." in rr.prompt(item, PASSAGES[0])


def test_llm_errors(tiny_model, smol_tokenizer):
    rr = LLMReranker(tiny_model, smol_tokenizer)
    with pytest.raises(ValueError, match="answer_logprob needs the gold answers"):
        rr.score("Where?", "y1", PASSAGES)
    with pytest.raises(ValueError, match="mode must be"):
        LLMReranker(tiny_model, smol_tokenizer, mode="ppl")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown re-ranker kind"):
        build_reranker("colbert", "x")  # type: ignore[arg-type]


def test_llm_reranker_prompts_start_with_bos_once_like_every_prompt(tiny_model):
    """A tokenizer that adds BOS to plain text (Llama-2): the re-ranker's prompts carry it once, as prompt_ids
    gives every other prompt; without it Llama-2 scores passages off its training distribution."""
    from conftest import bos_tokenizer

    tok = bos_tokenizer()
    seen = []

    class Recording(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = tiny_model

        def forward(self, input_ids, **kwargs):
            seen.append(input_ids)
            return self.inner(input_ids=input_ids, **kwargs)

    rr = LLMReranker(Recording(), tok, batch_size=4, use_chat_template=False)
    rr.score("Where is X based?", "Draft y1.", PASSAGES, answers=["Zorara"])
    [ids] = seen
    assert all(tok.bos_token_id in row.tolist() for row in ids)
    assert all(row.tolist().count(tok.bos_token_id) == 1 for row in ids)


@pytest.mark.parametrize("mode", ["answer_logprob", "yes_logprob"])
def test_llm_reranker_scores_the_answer_tokens_that_follow_the_prompt_on_sentencepiece(mode):
    """Llama-2's tokenizer given " Zorara" alone starts it with a dummy "▁" token: the scored target (and " Yes" /
    " No") must be the ids they have after "Answer:" / "Reply:" in the joint text, or every passage is scored on
    a token the model never writes there."""
    from conftest import tiny_llama
    from tokenizer_matrix import shared_tokenizer

    from adaptive_rag.lm.tokenization import continuation_ids

    tok = shared_tokenizer("sentencepiece")
    seen = []

    class Recording(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = tiny_llama(len(tok))

        def forward(self, input_ids, **kwargs):
            seen.append(input_ids)
            return self.inner(input_ids=input_ids, **kwargs)

    rr = LLMReranker(Recording(), tok, batch_size=4, use_chat_template=False, mode=mode)
    item = RerankItem("Where is X based?", "Draft y1.", PASSAGES, ["Zorara"])
    prompt = rr.prompt(item, PASSAGES[0])
    target = " Zorara" if mode == "answer_logprob" else " Yes"
    joint = tok(prompt + target, add_special_tokens=False)["input_ids"]
    assert joint[-len(continuation_ids(tok, target)):] == continuation_ids(tok, target)
    assert tok(target, add_special_tokens=False)["input_ids"] != continuation_ids(tok, target)  # the trap
    if mode == "yes_logprob":
        assert rr._yes_no_ids()[0] == continuation_ids(tok, " Yes")[0]
    scores = rr.score(item.question, item.y1, PASSAGES, answers=item.answers)
    assert len(scores) == len(PASSAGES) and all(s == s for s in scores)
    if mode == "answer_logprob":  # every row the model read ends with the answer as it follows "Answer:"
        assert all(row.tolist()[-len(continuation_ids(tok, target)):] == continuation_ids(tok, target)
                   for row in seen[0])
