"""The DRAGIN authors' own loop (oneal2000/DRAGIN ``src/main.py`` and ``src/eval.py``), run unedited from the fetched
copy, and the engine beside it: the two sides of ``bench/agreement_dragin.py``, each in its own process.

``python bench/agreement_authors.py authors --code DIR --config CONFIG.json --index INDEX --trace OUT.jsonl``
imports their modules from ``DIR`` (their own ``sys.path``: ``from data import ...``, ``from generate import *``) and
calls their ``main()`` on ``CONFIG.json``; then their ``eval.regenerate_answer`` on every prediction, as their
``eval.py`` does. Their files are never edited: the least adaptation a small non-Llama model on a machine without
Elasticsearch needs is applied by monkeypatching at import time, each one named in :data:`ADAPTATIONS` (and in the
trace's first line):

* ``retriever``: their ``BM25`` class keeps its own ``retrieve`` (the 64-token left cut of the query, decoded back;
  the top-k taken in hit order; empty documents where there are fewer hits), but the BEIR/Elasticsearch search it
  wraps is replaced by :class:`IndexSearch` over the project's index (``build_index --bm25_scoring
  elasticsearch``: Elasticsearch's BM25 computed by the project). BEIR is stubbed when not installed.
* ``model load``: eager attention (their ``output_attentions`` needs it) and float32.
* ``word marker``: SmolLM2's config says ``llama``, so their generator takes Llama-2's "▁" for the word marker;
  it is set to the tokenizer's own (``tokenize(' ')[0]``: "Ġ"), what their code does for every other model type.
* ``newline id``: the constant 13 (Llama-2's newline) in ``generate_attn`` and ``keep_real_words`` is replaced by
  the tokenizer's newline id, in the functions' code objects (their source is untouched).
* ``spaCy``: where ``en_core_web_sm`` is not installed, ``spacy.load`` returns :func:`standin_pipeline` (spaCy's
  rule-based sentencizer and a stand-in tagger that calls every non-stopword word with a letter or digit a NOUN).
  The engine side gets the same stand-in (``engine`` below), so both split and pick "real words" alike; where
  ``en_core_web_sm`` is installed both sides use it.
* ``eval model``: ``regenerate_answer`` runs on the loop's model (float32, eager) instead of a second load.

What is observed (never changed): per question its rounds (``generate`` calls), every retrieval (round, the answer's
kept length in tokens, the query before and after their cut, the document ids), generated tokens, seconds, the loop's
prediction and the regenerated text.

``python bench/agreement_authors.py engine [--standin] -- EVALUATE ARGS`` runs ``python -m
inference.commands.evaluate`` with the same spaCy stand-in when ``--standin``.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import json
import os
import runpy
import signal
import sys
import time
import types
from pathlib import Path

SPACY_MODEL = "en_core_web_sm"
STANDIN_NAME = "stand-in (spaCy sentencizer + non-stopword words tagged NOUN)"
ADAPTATIONS = {
    "retriever": "their BM25 class's Elasticsearch search replaced by an adapter over the project's BM25 index "
                 "(elasticsearch scoring); their retrieve() with its 64-token left cut runs as written",
    "model load": "eager attention and float32 at from_pretrained",
    "word marker": "space token set to the tokenizer's own ('Ġ'), not Llama-2's '▁' (SmolLM2's model_type is llama)",
    "newline id": "the constant 13 (Llama-2's newline) in generate_attn and keep_real_words replaced by the "
                  "tokenizer's newline id",
    "eval model": "eval.py's regenerate_answer on the loop's model (float32, eager), not a second load",
}
SPACY_ADAPTATION = f"spacy.load('{SPACY_MODEL}') (not installed) returns the {STANDIN_NAME}, on both sides"


# -- spaCy ----------------------------------------------------------------------------------------------------------
def spacy_model_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec(SPACY_MODEL) is not None


def standin_pipeline():
    """spaCy's blank English pipeline with its rule-based sentencizer, and a stand-in for the tagger: a token with a
    letter or digit that is not on spaCy's stopword list is tagged NOUN (a "real word" of theirs), any other X."""
    import spacy
    from spacy.language import Language

    if not Language.has_factory("agreement_standin_tagger"):
        @Language.component("agreement_standin_tagger")
        def _tag(doc):
            for token in doc:
                token.pos_ = "NOUN" if any(c.isalnum() for c in token.text) and not token.is_stop else "X"
            return doc

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("agreement_standin_tagger")
    return nlp


def install_spacy_standin() -> bool:
    """Make ``spacy.load('en_core_web_sm')`` give the stand-in when the model is not installed; True if it did."""
    if spacy_model_installed():
        return False
    import spacy

    original = spacy.load

    def load(name, *args, **kwargs):
        return standin_pipeline() if str(name) == SPACY_MODEL else original(name, *args, **kwargs)

    spacy.load = load
    return True


# -- the retriever adapter ------------------------------------------------------------------------------------------
class IndexSearch:
    """Where their ``BM25`` held BEIR's ``EvaluateRetrieval(BM25Search(...))``: ``retrieve(corpus, queries, ...)``
    -> ``{qid: {doc_id: (score, text)}}`` in rank order, a query without hits left out (as their Elasticsearch
    results leave it). ``text`` is the passage body without its title (BEIR's ``txt`` field). Every call is logged:
    the query as searched (after their cut) and the ids."""

    def __init__(self, retriever, depth: int = 10):
        self.retriever, self.depth = retriever, depth
        self.log: list[dict] = []

    def retrieve(self, corpus, queries: dict, **kwargs) -> dict:
        qids = list(queries)
        found = self.retriever.search([queries[q] for q in qids], self.depth) if qids else []
        out = {}
        for qid, hits in zip(qids, found):
            self.log.append({"query": queries[qid], "doc_ids": [h.passage.id for h in hits]})
            if hits:
                out[qid] = {h.passage.id: (h.score, h.passage.text) for h in hits}
        return out


def stub_missing_modules() -> list[str]:
    """Empty stand-ins for what their ``retriever.py`` imports for Elasticsearch and SGPT when not installed (the
    adapter replaces what used them)."""
    stubbed = []
    names = {"beir": [], "beir.datasets": [], "beir.datasets.data_loader": ["GenericDataLoader"],
             "beir.retrieval": [], "beir.retrieval.evaluation": ["EvaluateRetrieval"], "beir.retrieval.search": [],
             "beir.retrieval.search.lexical": ["BM25Search"],
             "beir.retrieval.search.lexical.elastic_search": ["ElasticSearch"], "faiss": [], "pandas": []}
    for name, attrs in names.items():
        try:
            importlib.import_module(name)
            continue
        except ImportError:
            pass
        module = types.ModuleType(name)
        for attr in attrs:
            setattr(module, attr, type(attr, (), {"__init__": lambda self, *a, **k: None}))
        sys.modules[name] = module
        stubbed.append(name)
    return stubbed


def replace_int_constant(func, old: int, new: int) -> int:
    """Replace the integer constant ``old`` by ``new`` in ``func``'s code object (not its nested functions'); returns
    how many constants changed."""
    code = func.__code__
    consts = tuple(new if type(c) is int and c == old else c for c in code.co_consts)
    changed = sum(1 for a, b in zip(code.co_consts, consts) if a is not b)
    func.__code__ = code.replace(co_consts=consts)
    return changed


def kept_tokens(tokenizer, text: str) -> int:
    """The answer kept so far, in tokens as it follows the prompt (the engine's retrieval ``position``)."""
    from adaptive_rag.lm.tokenization import continuation_ids

    text = text.strip()
    return len(continuation_ids(tokenizer, " " + text)) if text else 0


# -- their loop, observed -------------------------------------------------------------------------------------------
class Observer:
    def __init__(self):
        self.current: dict | None = None
        self.records: list[dict] = []
        self.generator = None
        self.search: IndexSearch | None = None
        self.finished = None  # called with (record, prediction) when a question's loop ends
        self.model = None
        self.counter_before: dict = {}


def run_authors(code: str, config_path: str, index: str, trace: str) -> None:
    sys.path.insert(0, str(Path(code).resolve()))
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from adaptive_rag.plumbing.retriever import Retriever  # noqa: F401  (the project's side of the adapter)
    from retrieval_adapt.loading import load_retriever

    config = json.loads(Path(config_path).read_text())
    adaptations = dict(ADAPTATIONS)
    if install_spacy_standin():
        adaptations["spaCy"] = SPACY_ADAPTATION
    stubbed = stub_missing_modules()
    if stubbed:
        adaptations["stubs"] = "not installed, imported empty: " + ", ".join(stubbed)
    if config["method"] == "fix-length-retrieval" and "fix_length" in config:
        adaptations["fix_length"] = (f"fix_length {config['fix_length']} in the config (their FL-RAG configs lack "
                                     "it; FixLengthRAG reads it)")
    tokenizer = AutoTokenizer.from_pretrained(config["model_name_or_path"])
    newline = tokenizer.encode("\n", add_special_tokens=False)[-1]
    marker = tokenizer.tokenize(" ")[0]

    original_load = AutoModelForCausalLM.from_pretrained.__func__

    def eager_float32(cls, path, *args, **kwargs):
        kwargs["attn_implementation"] = "eager"
        kwargs["dtype"] = torch.float32
        return original_load(cls, path, *args, **kwargs)

    AutoModelForCausalLM.from_pretrained = classmethod(eager_float32)

    obs = Observer()
    retriever_mod = importlib.import_module("retriever")
    search = obs.search = IndexSearch(load_retriever(index)) if config.get("retriever") else None

    def adapter_init(self, tokenizer=None, index_name=None, engine="elasticsearch", **kwargs):
        self.tokenizer = tokenizer
        self.max_ret_topk = 1000
        self.retriever = search

    retriever_mod.BM25.__init__ = adapter_init
    generate = importlib.import_module("generate")
    if replace_int_constant(generate.BasicGenerator.generate_attn, 13, newline) != 1 \
            or replace_int_constant(generate.AttnWeightRAG.keep_real_words, 13, newline) != 1:
        raise SystemExit("their generate.py is not the one this harness adapts (the newline id 13 was not found "
                         "once in generate_attn and keep_real_words)")

    generator_init = generate.BasicGenerator.__init__

    def init(self, path):
        generator_init(self, path)
        self.space_token = marker
        model_generate = self.model.generate

        def counted(*args, **kwargs):
            out = model_generate(*args, **kwargs)
            seqs = out.sequences if hasattr(out, "sequences") else out
            if obs.current is not None:
                obs.current["generated_tokens"] += int(seqs.shape[1] - kwargs["input_ids"].shape[1])
            return out

        self.model.generate = counted
        obs.generator = self

    generate.BasicGenerator.__init__ = init
    for name in ("generate", "generate_attn"):
        _count_rounds(generate.BasicGenerator, name, obs)
    original_retrieve = generate.BasicRAG.retrieve

    def retrieve(self, query, topk=1, max_query_length=64):
        caller = sys._getframe(1).f_locals  # the loop's own text so far (observed only)
        kept = " ".join(s.strip() for s in (caller.get("text", ""), caller.get("ptext", "") or "") if s.strip()) \
            if "ptext" in caller else caller.get("text", "")
        before = len(search.log)
        docs = original_retrieve(self, query, topk=topk, max_query_length=max_query_length)
        logged = search.log[before:] or [{"query": "", "doc_ids": []}]
        obs.current["retrievals"].append({
            "round": obs.current["rounds"], "position": kept_tokens(self.generator.tokenizer, kept),
            "query_raw": query, "query": logged[-1]["query"], "doc_ids": logged[-1]["doc_ids"][:topk]})
        return docs

    generate.BasicRAG.retrieve = retrieve
    for cls in (generate.BasicRAG, generate.SingleRAG, generate.FixLengthRAG, generate.TokenRAG,
                generate.AttnWeightRAG):
        _observe_inference(cls, obs)

    # their eval.py's first step (regenerate_answer) on each prediction as it comes (the same greedy call eval.py
    # makes afterwards, on the loop's model), so that the trace grows question by question
    data_mod = importlib.import_module("data")
    eval_mod = importlib.import_module("eval")
    data = data_mod.HotpotQA(config["data_path"])
    data.format(fewshot=config["fewshot"])
    by_question = {row["question"]: row for row in (data.dataset[i] for i in range(len(data.dataset)))}
    out = open(trace, "w")
    out.write(json.dumps({"adaptations": adaptations, "newline_id": newline, "word_marker": marker,
                          "torch_threads": torch.get_num_threads()}) + "\n")
    out.flush()

    def finished(record: dict, prediction: str) -> None:
        row = by_question[record["question"]]
        gen = obs.generator
        start = time.perf_counter()
        with torch.no_grad():
            final = eval_mod.regenerate_answer(prediction, gen.tokenizer, gen.model, row["case"], row["demo"])
        record["seconds_eval"] = time.perf_counter() - start
        record["seconds"] += record["seconds_eval"]
        answer = data.get_real_prediction(final)
        record.update(id=row["qid"], output=prediction, final=final, answer=answer,
                      em=float(data.exact_match_score(answer, row["answer"])["correct"]),
                      f1=float(data.f1_score(answer, row["answer"])["f1"]),
                      counter={k: v - obs.counter_before.get(k, 0) for k, v in vars(obs.model.counter).items()})
        out.write(json.dumps(record) + "\n")
        out.flush()

    obs.finished = finished
    main = importlib.import_module("main")
    sys.argv = ["main.py", "-c", config_path]
    main.main()
    out.close()


def _count_rounds(cls, name: str, obs: Observer) -> None:
    original = getattr(cls, name)

    def wrapped(self, *args, **kwargs):
        if obs.current is not None:
            obs.current["rounds"] += 1
        start = time.perf_counter()
        out = original(self, *args, **kwargs)
        if obs.current is not None:  # progress in the log
            print(f"question {len(obs.records)} round {obs.current['rounds']} ({name}): "
                  f"{time.perf_counter() - start:.1f} s, {len(obs.current['retrievals'])} retrievals so far",
                  file=sys.stderr, flush=True)
        return out

    setattr(cls, name, wrapped)


def _observe_inference(cls, obs: Observer) -> None:
    original = cls.__dict__["inference"]

    def inference(self, question, demo, case):
        obs.model, obs.counter_before = self, dict(vars(self.counter))
        obs.current = {"question": question, "rounds": 0, "retrievals": [], "generated_tokens": 0}
        start = time.perf_counter()
        text = original(self, question, demo, case)
        obs.current["seconds"] = obs.current["seconds_loop"] = time.perf_counter() - start
        if obs.finished is not None:
            obs.finished(obs.current, text.strip())  # main.py writes pred.strip()
        obs.records.append(obs.current)
        obs.current = None
        return text

    cls.inference = inference


def run_engine(standin: bool, args: list[str]) -> None:
    if standin:
        install_spacy_standin()
    sys.argv = ["python -m inference.commands.evaluate", *args]
    runpy.run_module("inference.commands.evaluate", run_name="__main__", alter_sys=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="side", required=True)
    a = sub.add_parser("authors")
    a.add_argument("--code", required=True)
    a.add_argument("--config", required=True)
    a.add_argument("--index", required=True)
    a.add_argument("--trace", required=True)
    e = sub.add_parser("engine")
    e.add_argument("--standin", action="store_true")
    e.add_argument("rest", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID` prints where a long run is
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.side == "authors":
        run_authors(args.code, args.config, args.index, args.trace)
    else:
        run_engine(args.standin, [a for a in args.rest if a != "--"])


if __name__ == "__main__":
    main()
