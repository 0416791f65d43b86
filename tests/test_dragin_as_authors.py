"""DRAGIN as its authors ran it (oneal2000/DRAGIN ``src/data.py``, ``src/eval.py``, ``src/generate.py``): the parts
of the ``reference`` profile that read their files or follow their loops, each on a fixture shaped like theirs."""

from __future__ import annotations

import json

import pytest
import torch

from adaptive_rag.plumbing.dragin_eval import score_dragin
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage
from data_builders.readers import read_qa


def _two_wiki(tmp_path, aliases_lines):
    dev = [{"_id": "a1", "question": "Where was the director of Film X born?", "answer": "New York City",
            "answer_id": "Q60", "type": "compositional"},
           {"_id": "a2", "question": "Who is older?", "answer": "Ann", "answer_id": "Q9"},
           {"_id": "a3", "question": "Is it?", "answer": "yes"}]
    (tmp_path / "dev.json").write_text(json.dumps(dev))
    if aliases_lines is not None:
        (tmp_path / "id_aliases.json").write_text("\n".join(aliases_lines) + "\n")
    return tmp_path / "dev.json"


def test_2wiki_golds_are_the_answer_and_its_id_aliases(tmp_path):
    path = _two_wiki(tmp_path, [json.dumps({"Q_id": "Q60", "aliases": ["NYC", "New York", "New York City"]}),
                                json.dumps({"Q_id": "Q5", "aliases": ["nobody"]})])
    a1, a2, a3 = read_qa(path, "2wikimultihopqa")
    assert a1.answers == ["New York City", "NYC", "New York"] and a1.metadata["answer_id"] == "Q60"
    assert a2.answers == ["Ann"] and a2.metadata["answer_id"] == "Q9"  # an id without aliases keeps its answer
    assert a3.answers == ["yes"] and "answer_id" not in a3.metadata
    # the authors' eval.py: "NYC" is exact under the aliases, and was 0 without them
    assert score_dragin("So the answer is NYC.", a1.answers, "2wiki")["em"] == 1.0
    assert score_dragin("So the answer is NYC.", ["New York City"], "2wiki")["em"] == 0.0


def test_2wiki_without_the_aliases_file_keeps_the_answer(tmp_path):
    a1, *_ = read_qa(_two_wiki(tmp_path, None), "2wikimultihopqa")
    assert a1.answers == ["New York City"]


def test_a_malformed_aliases_line_names_the_file_and_line(tmp_path):
    path = _two_wiki(tmp_path, [json.dumps({"Q_id": "Q60", "aliases": ["NYC"]}), json.dumps({"Q_id": 60})])
    with pytest.raises(DataError, match="id_aliases.json"):
        read_qa(path, "2wikimultihopqa")


# A file shaped like their src/data.py (classes, literal exemplars, template lambdas), written for these tests.
FAKE_DATA_PY = '''
from typing import Dict, List

class BaseDataset:
    def format(self, fewshot: int = 0):
        pass

class HotpotQA(BaseDataset):
    examplars: List[Dict] = [
        {
            'question': "Who wrote Book A?",
            'cot': "Book A was written by Ann. Ann is a poet.",
            'answer': "Ann.",
        },
        {
            'question': "Where is Town B?",
            'cot': ("Town B lies on River C. ", "River C is in Land D."),
            'answer': "Land D",
        },
    ]
    demo_input_template = lambda self, ques: f'Question: {ques}\\nAnswer:'
    test_input_template = lambda self, ques: f'Answer by steps.\\nQuestion: {ques}\\nAnswer:'
    output_template = lambda self, cot, ans: f'{cot} So the answer is {ans}.'

class WikiMultiHopQA(BaseDataset):
    examplars: List[Dict] = [{'question': "Q?", 'cot': "C.", 'answer': "A"}]
    demo_input_template = test_input_template = lambda self, ques: f'Question: {ques}\\nAnswer:'
    output_template = lambda self, cot, ans: f'{cot} So the answer is {ans}.'
'''
DEMOS = ("Question: Who wrote Book A?\nAnswer: Book A was written by Ann. Ann is a poet. So the answer is Ann..\n"
         "Question: Where is Town B?\nAnswer: Town B lies on River C. River C is in Land D. So the answer is Land D.\n")
CASE = "Answer by steps.\nQuestion: Who founded X?\nAnswer:"


@pytest.fixture()
def authors_code(tmp_path):
    folder = tmp_path / "dragin-code"
    folder.mkdir()
    (folder / "data.py").write_text(FAKE_DATA_PY)
    return folder


def _builder(authors_code, loop, demos="hotpotqa"):
    from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig

    cfg = PromptConfig(prompt_style="paper", prompt_source="authors", authors_code=str(authors_code), demos=demos,
                       authors_loop=loop)
    return PromptBuilder(None, cfg)


DOC = [Passage("p1", "Title X", "X was founded.")]  # their retriever returns the text alone: no title


@pytest.mark.parametrize("loop, docs, prior, expected", [
    # AttnWeightRAG: demos, then the non-empty parts joined by one space
    ("attn", [], "", DEMOS + CASE),
    ("attn", [], " Osk founded it. ", DEMOS + CASE + " Osk founded it."),
    ("attn", DOC, " Osk", DEMOS + "Context:\n[1] X was founded.\nAnswer in the same format as before.\n" + CASE
     + " Osk"),
    # FixLengthRAG: case + " " + text (a trailing space before the first round), its typo'd context line
    ("fixed", DOC, "", DEMOS + "Context:\n[1] X was founded.\nAnswer in t he same format as before.\n" + CASE + " "),
    # TokenRAG without documents, and SingleRAG / BasicRAG
    ("token", [], "", DEMOS + CASE + " "),
    ("single", DOC, "", DEMOS + "Context:\n[1] X was founded.\nAnswer in the same format as before.\n" + CASE),
])
def test_the_authors_prompt_as_each_of_their_loops_writes_it(authors_code, loop, docs, prior, expected):
    prompt = _builder(authors_code, loop).build("Who founded X?", docs, prior)
    assert prompt.text == expected
    start, end = prompt.question_span
    assert prompt.text[start:end] == "Who founded X?"
    assert prompt.text[prompt.prior_start:] == prior.strip()


def test_the_authors_templates_and_exemplars_are_parsed_never_run(authors_code):
    from data_builders.dragin_code import load_authors_prompts, parse_data_py

    two_wiki = load_authors_prompts(authors_code, "2wiki")  # a chained assignment of two templates
    assert two_wiki.case("Why?") == "Question: Why?\nAnswer:"
    assert two_wiki.demo_cases() == ["Question: Q?\nAnswer: C. So the answer is A."]
    with pytest.raises(DataError, match="no class IIRC"):
        parse_data_py(FAKE_DATA_PY, "IIRC")
    with pytest.raises(DataError, match="not Python source"):
        parse_data_py("class HotpotQA(:\n", "HotpotQA")
    with pytest.raises(DataError, match="template field"):
        parse_data_py(FAKE_DATA_PY.replace("{ques}\\nAnswer:'\n    test", "{ques.upper()}\\nAnswer:'\n    test"),
                      "HotpotQA")
    side_effect = FAKE_DATA_PY.replace("'answer': \"Ann.\",", "'answer': __import__('os').getcwd(),")
    with pytest.raises(DataError, match="not a literal"):
        parse_data_py(side_effect, "HotpotQA")


def test_without_the_fetched_file_one_line_names_the_download_command(tmp_path):
    from adaptive_rag.plumbing.errors import ConfigError

    with pytest.raises(ConfigError, match="python -m data_builders.download dragin-code"):
        _builder(tmp_path / "nowhere", "attn")
    with pytest.raises(ConfigError, match="exist for hotpotqa"):
        _builder(tmp_path, "attn", demos="world")


def test_the_download_command_fetches_their_code_pinned(tmp_path):
    """From a folder mirror: the bytes pinned for the commit are accepted, others refused."""
    from data_builders.download import download
    from data_builders.download_sources import SOURCES

    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for remote in SOURCES["dragin-code"].files:
        (mirror / remote.save_as).write_text("not their file")
    with pytest.raises(DataError):
        download(["dragin-code"], tmp_path / "data", show_progress=False, mirrors=[str(mirror)])
    assert all(r.sha256 and r.size for r in SOURCES["dragin-code"].files)


def test_token_rag_windows_are_the_authors_off_by_one():
    """logprobs[tid:tr+1], then tid = tr + 1: a window runs one token into the next sentence, and every sentence
    after the first starts one token late."""
    from inference.dynamic_rag.triggers.token_rag import sentence_windows

    starts = [0, 0, 0, 3, 3, 3, 3, 7]  # sentences [0, 3), [3, 7), [7, 8)
    assert sentence_windows(starts) == [(0, 3, 0, 3), (3, 7, 4, 7), (7, 8, 8, 7)]  # the last window is empty


def test_token_rag_query_drops_the_unsure_tokens_text_and_keeps_the_spaces():
    from inference.dynamic_rag.queries.token_rag import TokenRagQuery
    from inference.dynamic_rag.round_view import Event, RoundView

    pieces = [" Ada", " built", " Ro", "me", ".", " Then"]
    view = RoundView("q", pieces, [1.0] * 6, [0.0] * 6, [], [], [])
    assert TokenRagQuery().form(view, Event(0, 0.5, 0, hits=[[2, 3]]), None) == "Ada built ."


@pytest.mark.parametrize("method, loop", [("dragin", "attn"), ("fl-rag", "fixed"), ("fs-rag", "fixed"),
                                          ("token-rag", "token"), ("sr-rag", "single"), ("wo-rag", "single")])
def test_the_reference_profile_runs_rounds_to_eos_or_the_budget(method, loop):
    """Under reference no round stops at the answer sentence or a new "Question:" line (RIND then judges what follows
    the answer too), and the authors' prompt is joined as that method's loop of theirs joins it."""
    from inference.dynamic_rag.dragin_settings import resolve_run
    from inference.dynamic_rag.engine import EngineConfig
    from inference.dynamic_rag.methods import MethodConfig
    from inference.dynamic_rag.prompts import PromptConfig

    ref = MethodConfig(method=method, dragin_profile="reference").resolved("hotpotqa", model="llama-2-7b-chat")
    prompt, engine = resolve_run(ref, PromptConfig(prompt_style="paper"), EngineConfig(), "hotpotqa")
    assert (engine.stop_after_answer, prompt.stop_at_question, prompt.authors_loop) == (False, False, loop)
    assert (engine.max_new_tokens, prompt.num_demos) == (100, 8)
    paper, _ = resolve_run(MethodConfig(method=method), PromptConfig(prompt_style="paper"), EngineConfig(), "hotpotqa")
    assert paper.stop_at_question is True
    if method in ("fl-rag", "fs-rag", "token-rag"):
        assert ref.round_budget == "per_round"  # FixLengthRAG and TokenRAG give every round the full budget


@pytest.mark.parametrize("family", ["bpe", "sentencepiece"])
def test_the_reference_cuts_the_query_to_its_last_generator_tokens(family):
    """Their BM25 class: left truncation to max_query_length tokens of the generator's tokenizer, decoded back; the
    paper profile cuts words. FS-RAG's query is the last sentence, "Its port opened!" (" Its", " port", " opened",
    "!" on both families)."""
    from tokenizer_matrix import shared_tokenizer

    from inference.dynamic_rag.methods import MethodConfig
    from inference.dynamic_rag.queries import form_query
    from inference.dynamic_rag.round_view import Event, RoundView

    tok = shared_tokenizer(family)
    view = RoundView("q?", [" The city was founded in 1970. Its port opened!"], [1.0], [1.0], [], [], [])
    ref = MethodConfig(method="fs-rag", dragin_profile="reference", query_max_words=2)
    paper = MethodConfig(method="fs-rag", query_max_words=2)
    assert (ref.query_cut, paper.query_cut) == ("tokens", "words")
    last_two = tok("Its port opened!", add_special_tokens=False)["input_ids"][-2:]
    assert form_query(view, Event(0, 1.0, 1), ref, tok) == tok.decode(last_two)  # " opened!" / "opened!", as theirs
    assert tok.decode(last_two).strip() == "opened!"
    assert form_query(view, Event(0, 1.0, 1), paper, tok) == "port opened!"


@pytest.fixture(scope="module")
def tagging_pipeline():
    """A spaCy pipeline shaped like en_core_web_sm for what the reference reads of it (sentences, POS tags): a
    sentencizer and a tagger by lexicon, built offline."""
    import spacy
    from spacy.language import Language

    tags = {"made": "VERB", "films": "NOUN", "Osk": "PROPN", "two": "NUM", "first": "ADJ", "famously": "ADV",
            "the": "DET", "He": "PRON", "Kelmora": "PROPN", "in": "ADP", "founded": "VERB", "1970": "NUM"}

    @Language.component("lexicon_tagger_for_tests")
    def tag(doc):
        for token in doc:
            token.pos_ = tags.get(token.text, "PUNCT" if not token.text.isalnum() else "X")
        return doc

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("lexicon_tagger_for_tests")
    return nlp


def test_the_authors_text_rules_read_sentences_and_real_words_from_the_pipeline(tagging_pipeline):
    from inference.dynamic_rag.signals import qfs_query_reference
    from inference.dynamic_rag.text_units import TextRules, contains_real_word

    rules = TextRules(tagging_pipeline)
    assert rules.name == "en_core_web_sm"
    text = " Osk famously made two films. He founded Kelmora in 1970."
    assert [text[a:b] for a, b in rules.split(text)] == ["Osk famously made two films.", "He founded Kelmora in 1970."]
    real = rules.real_words("Osk famously made two films.")
    assert real == {"Osk", "made", "two", "films"}  # kept by POS: "made", "two" are spaCy stopwords, kept here
    assert contains_real_word("films.", real) and not contains_real_word("famously", real)
    # QFS: candidates are the words holding a real word, by the rows' weight
    pieces = [" Osk", " famously", " made", " two", " films", "."]
    rows = [[torch.tensor([0.1, 0.5, 0.2, 0.15, 0.05, 0.0])]]
    assert qfs_query_reference(rows, [5], pieces, [True] * 6, {5}, 2, real) == "made two"
    assert qfs_query_reference(rows, [5], pieces, [True] * 6, {5}, 2) == "Osk famously"  # the stopword list's


def test_rind_content_under_the_authors_rules_is_their_real_words(tagging_pipeline):
    from inference.dynamic_rag.methods import MethodConfig
    from inference.dynamic_rag.round_view import RoundView
    from inference.dynamic_rag.signals import round_word_signals
    from inference.dynamic_rag.text_units import TextRules

    pieces = [" Osk", " famously", " made", " two", " films", "."]
    cfg = MethodConfig(method="dragin", rind_attention="paper", rind_normalisation="paper")
    rows = [torch.full((len(pieces) + j + 1,), 1.0 / (len(pieces) + j + 1)) for j in range(len(pieces))]
    authors = RoundView("q", list(pieces), [0.5] * 6, [1.0] * 6, rows, ["x"] * 6, [True] * 6,
                        rules=TextRules(tagging_pipeline))
    project = RoundView("q", list(pieces), [0.5] * 6, [1.0] * 6, rows, ["x"] * 6, [True] * 6)
    assert [w.content for w in round_word_signals(authors, cfg)] == [True, False, True, True, True]
    assert [w.content for w in round_word_signals(project, cfg)] == [True, True, False, False, True]


def test_without_en_core_web_sm_the_reference_warns_once_and_records_the_rules(monkeypatch):
    import inference.dynamic_rag.text_units as tu

    monkeypatch.setattr(tu, "spacy_pipeline", lambda: None)
    with pytest.warns(UserWarning, match="en_core_web_sm"):
        assert tu.text_rules("authors").name == "rules"
    assert tu.text_rules("rules") is tu.PROJECT_RULES


ROW_CONFIGS = sorted((__import__("pathlib").Path(__file__).parents[1] / "inference/configs/dragin_reference").glob(
    "*.yaml"))


def test_one_config_per_row_the_authors_ran():
    assert len(ROW_CONFIGS) == 12  # Llama2-7b-chat, Llama2-13b-chat, Vicuna-13b-v1.5 x the four datasets


@pytest.mark.parametrize("path", ROW_CONFIGS, ids=[p.stem for p in ROW_CONFIGS])
def test_each_row_config_sets_the_authors_settings_for_six_methods(path):
    import dataclasses

    from inference.commands import evaluate as evaluation
    from inference.commands.sweep import expand, load_recipe, settings_from
    from inference.dynamic_rag.dragin_settings import TABLE
    from inference.dynamic_rag.methods import MethodConfig

    types = evaluation.CONFIG_TYPES
    recipe, grid = load_recipe(path)
    known = {f.name for cls in types for f in dataclasses.fields(cls)}
    assert set(recipe) <= known
    points = expand(settings_from(types, recipe, [], "sweep"), grid, types)
    assert sorted(p.values["method"] for p in points) == sorted(
        ["wo-rag", "sr-rag", "fl-rag", "fs-rag", "token-rag", "dragin"])
    for key, value in {"dragin_profile": "reference", "prompt_source": "authors", "sampling": "checkpoint",
                       "attention_pass": "authors", "prompt_style": "paper", "top_k": 3}.items():
        assert recipe[key] == value, key
    assert recipe["reference_config"] in TABLE and "bm25-es" in recipe["index"]
    method = MethodConfig(method="dragin", dragin_profile="reference", reference_config=recipe["reference_config"])
    kind = {"2wiki": "2wiki", "hotpotqa": "hotpotqa", "iirc": "iirc", "strategyqa": "strategyqa"}[path.stem.rsplit(
        "_", 1)[1]]
    assert method.resolved(recipe["dataset"]).theta == TABLE[recipe["reference_config"]][kind].theta


def test_the_report_prints_the_papers_numbers_beside_a_reference_run():
    from inference.commands.report import paper_cells

    run = {"dragin_profile": "reference", "reference_config": "Llama2-7b-chat", "method": "dragin",
           "dataset": "data/hotpotqa/hotpot_dev_distractor_v1.json", "demos": "hotpotqa"}
    assert paper_cells(run) == {"paper_em": 0.232, "paper_f1": 0.334, "paper_retrievals": 3.0}
    assert paper_cells({**run, "method": "flare"}) == {}  # jzbjyb's FLARE is not their FLARE row (token-rag)
    assert paper_cells({**run, "dragin_profile": "paper"}) == {}
    assert paper_cells({**run, "reference_config": "Vicuna-13b-v1.5"}) == {}  # not known to the project: no cell


def test_qfs_reads_to_the_end_of_a_hit_word_that_runs_past_its_sentence():
    """A newline opens the word after it, so a hit word can run past the sentence it started in: the reference's QFS
    pass must cover it (a run over HotpotQA indexed past the pass's end)."""
    from inference.dynamic_rag.queries.qfs import qfs_text_end
    from inference.dynamic_rag.round_view import Event, RoundView

    view = RoundView("q", [" Osk", " left", ".", "\n", "Then", " he"], [1.0] * 6, [1.0] * 6, [], [], [])
    assert view.sentence_end(3) == 4  # the newline ends its sentence; "\nThen" is one word
    assert qfs_text_end(view, Event(3, 1.0, 0, hits=[[3, 4]])) == 5
    assert qfs_text_end(view, Event(0, 1.0, 0, hits=[[0]])) == view.sentence_end(0)


def test_the_forced_answer_prompt_is_eval_pys(authors_code):
    """eval.py's regenerate_answer prompts with demos + case + " " + the loop's stripped prediction + " So the answer
    is " (its trailing space kept: the model goes on after it)."""
    from conftest import FakeRetriever
    from test_tokenizer_paths import known_model
    from tokenizer_matrix import shared_tokenizer

    from adaptive_rag.plumbing.records import QAExample
    from inference.dynamic_rag.engine import DynamicRAGEngine, EngineConfig
    from inference.dynamic_rag.methods import MethodConfig
    from inference.dynamic_rag.prompts import PromptBuilder, PromptConfig

    class Recording(PromptBuilder):
        texts: list[str] = []

        def build(self, *args, **kw):
            prompt = super().build(*args, **kw)
            self.texts.append(prompt.text)
            return prompt

    tok = shared_tokenizer("bpe")
    prompts = Recording(tok, PromptConfig(prompt_style="paper", prompt_source="authors",
                                          authors_code=str(authors_code), demos="hotpotqa"))
    method = MethodConfig(method="dragin", dragin_profile="reference", theta=1e9)  # never retrieves
    engine = DynamicRAGEngine(known_model(tok), tok, FakeRetriever(), prompts, method,
                              EngineConfig(batch_size=1, max_new_tokens=20))
    engine.run([QAExample("q", "Who founded X?", ["Osk"])], show_progress=False)
    round_text = "The city was founded in 1970. Its port opened!<|im_end|>"  # 14 tokens: two rounds pass 20
    assert prompts.texts[0] == DEMOS + CASE
    assert prompts.texts[-1] == DEMOS + CASE + " " + round_text + " " + round_text + " So the answer is "
