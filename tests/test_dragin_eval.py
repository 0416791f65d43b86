"""DRAGIN's evaluation as the authors' eval.py runs it: the cut, the first case-sensitive marker, each dataset's
rule, and the engine's forced answer and per-round budget on a scripted model."""

from __future__ import annotations

import pytest
from scripted_lm import scripted_llama

from adaptive_rag.plumbing import dragin_eval as de
from adaptive_rag.plumbing.records import PredictionRecord, QAExample
from adaptive_rag.plumbing.scoring import summarise
from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
from inference.dynamic_rag.methods import MethodConfig
from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig

SCRIPT = " Osk founded Kelmora. Then he left:"


@pytest.mark.parametrize("output, kind, expected", [
    # the first marker wins, and the rest of the output stays in the answer (one trailing "." dropped)
    ("So the answer is Osk. Then the answer is Bo.", "hotpotqa", "Osk. Then the answer is Bo"),
    ("So the answer is Paris..</s>", "hotpotqa", "Paris."),  # "</s>", then one "." (once each, in that order)
    ("The answer is Paris.", "hotpotqa", ""),  # case-sensitive: no marker
    ("The answer is Paris.", "2wiki", "The answer is Paris."),  # 2Wiki keeps an output without a marker
    ("So the answer is Paris.\n", "iirc", "Paris"),  # IIRC also drops a newline, then the full stop
    ("So the answer is Yes, it is.", "strategyqa", "yes"),
    ("So the answer is maybe.", "strategyqa", "no"),  # anything not starting with "yes"
    ("It is.", "strategyqa", ""),
])
def test_dragin_answer_per_dataset(output, kind, expected):
    assert de.dragin_answer(output, kind) == expected


def test_cut_and_regeneration_text():
    assert de.cut_output("A. So the answer is B.\nQuestion: next?") == "A. So the answer is B.\n"
    assert de.cut_output("Question: x") == "Question: x"  # the first cut ignores a split word at the start
    assert de.cut_output("Question: x", keep_leading=False) == ""
    assert de.needs_regeneration(" Osk left.\nNote: the answer is Bo")  # the marker after "Note:" is cut away
    assert not de.needs_regeneration(" So the answer is Bo.")
    prefix = de.regeneration_prefix(" Osk left. Note: ignore")
    assert prefix == " Osk left.  So the answer is "  # eval.py: cot += " So the answer is "
    assert de.finish_regenerated(prefix, " Bo.\nQuestion: more") == " Osk left.  So the answer is Bo.\n"
    assert de.dataset_kind("runs/data/2wikimultihopqa_dev.jsonl") == "2wiki" and de.dataset_kind("x", None) is None


def test_scoring_with_dragin_extraction_differs_from_the_projects():
    rec = PredictionRecord("q", "Who?", ["Bo"], "So the answer is Osk. Then the answer is Bo.", [], 1, 1, 0.1)
    project = summarise([rec])
    dragin = summarise([rec], extraction="dragin", dataset_kind="hotpotqa")
    assert project["em"] == 1.0 and project["answer_extraction"] == "project"  # the last marker: "Bo"
    # the first marker: "Osk. Then the answer is Bo" -> normalised "osk then answer is bo": F1 2·(1/5)·1/(1/5+1)
    assert dragin["em"] == 0.0 and dragin["f1"] == pytest.approx(1 / 3) and dragin["answer_extraction"] == "dragin"
    yes_no = PredictionRecord("q", "Is it?", ["True"], "So the answer is Yes.", [], 1, 1, 0.1)
    assert summarise([yes_no], extraction="dragin")["yes_no_em"] == 1.0  # yes/no golds: StrategyQA's rule


def _run(tokenizer, method, retriever, max_new_tokens=30):
    prompts = PromptBuilder(tokenizer, PromptConfig(prompt_style="paper", num_demos=1))
    engine = DynamicRAGEngine(scripted_llama(tokenizer, SCRIPT), tokenizer, retriever, prompts, method,
                              EngineConfig(batch_size=2, max_new_tokens=max_new_tokens))
    budgets = []

    def start(st, _start=engine._start_round):  # remembers each round's token budget
        seq = _start(st)
        budgets.append(seq.max_new_tokens)
        return seq

    engine._start_round = start
    [record] = engine.run([QAExample("q", "Who founded Kelmora?", ["Osk"])], show_progress=False)
    return record, budgets


def test_reference_profile_forces_an_answer_with_20_more_tokens(smol_tokenizer, fake_retriever):
    paper, _ = _run(smol_tokenizer, MethodConfig(method="wo-rag"), fake_retriever)
    ref, budgets = _run(smol_tokenizer, MethodConfig(method="wo-rag", dragin_profile="reference"), fake_retriever)
    assert "the answer is" not in paper.output and paper.generated_tokens == 30
    # the script never says "the answer is": eval.py appends " So the answer is" and generates 20 tokens after it
    assert ref.output.startswith(paper.output + " So the answer is ") and budgets == [30, 20]
    assert ref.generated_tokens == 50 and ref.llm_forward_passes > paper.llm_forward_passes


def test_reference_rounds_each_get_the_full_budget(smol_tokenizer, fake_retriever):
    method = dict(method="dragin", theta=0.0, answer_extraction="project")
    _, paper = _run(smol_tokenizer, MethodConfig(**method, max_rounds=3), fake_retriever)
    assert paper == sorted(paper, reverse=True) and paper[0] == 30 and paper[-1] < 30  # shrinks with the answer
    record, ref = _run(smol_tokenizer, MethodConfig(**method, dragin_profile="reference"), fake_retriever)
    assert set(ref) == {30}  # every round may write the full length ...
    # ... and no round starts once the answer is longer than it, long before the retrieval cap (20)
    assert 1 <= len(record.retrievals) < 20
    assert len(smol_tokenizer.encode(record.output, add_special_tokens=False)) > 30
