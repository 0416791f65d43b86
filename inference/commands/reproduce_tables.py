"""The tables ``python -m inference.commands.reproduce`` knows, each as the steps that make it.

* ``dragin-table2``: DRAGIN's Table 2 (Su et al., 2024) with Table 3's retrievals per question: each dataset x the
  six methods, one evaluation each, with the settings of the authors' row config
  (``inference/configs/dragin_reference/<model>_<dataset>.yaml``), over BM25 on DPR's Wikipedia passages.
* ``adapt-llm-popqa``: ADAPT-LLM's PopQA table (Labruna et al., 2024): NR-LLM, AR-LLM and ADAPT-LLM, three models
  trained on SQuAD by ``training/adapt_llm.py`` with the authors' recipe (``training/configs/adapt_llm_authors.yaml``)
  and evaluated on the authors' PopQA file.
* ``iter-retgen-hotpotqa``: Iter-RetGen's HotpotQA rows (Shao et al., 2023): one T=3 run
  (``inference/configs/iter_retgen_hotpotqa_contriever.yaml``), whose records hold T=1, 2 and 3.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from adaptive_rag.plumbing.errors import ConfigError
from inference.commands.reproduce_plan import (
    Options,
    Step,
    data_file,
    download_step,
    flags,
    report_step,
    shown_path,
)
from inference.dynamic_rag.dragin_settings import reference_config_for

REPO_CONFIGS = Path(__file__).resolve().parents[1] / "configs"
ADAPT_RECIPE = Path(__file__).resolve().parents[2] / "training" / "configs" / "adapt_llm_authors.yaml"

DRAGIN_DATASETS = {"2wiki": ("2wikimultihopqa", "dev.json"), "hotpotqa": ("hotpotqa", "hotpot_dev_distractor_v1.json"),
                   "iirc": ("iirc", "dev.json"), "strategyqa": ("strategyqa", "strategyqa_train.json")}
DRAGIN_METHODS = ("wo-rag", "sr-rag", "fl-rag", "fs-rag", "token-rag", "dragin")
# the authors' model configs and the prefix of their row configs' file names
DRAGIN_FAMILIES = {"Llama2-7b-chat": "llama2_7b_chat", "Llama2-13b-chat": "llama2_13b_chat",
                   "Vicuna-13b-v1.5": "vicuna_13b_v1_5"}
DRAGIN_INDEX = {"bm25-es": ["--kind", "bm25", "--bm25_scoring", "elasticsearch"], "bm25": ["--kind", "bm25"],
                "lucene": ["--kind", "lucene"]}
ITER_INDEX = {"contriever": ["--kind", "dense", "--encoder", "facebook/contriever-msmarco"],
              "minilm": ["--kind", "dense", "--encoder", "minilm"], "bm25": ["--kind", "bm25"]}
HOTPOT_DEV = "hotpot_dev_distractor_v1.json"
# paths a run's settings name that the reproduce command places itself: never a difference from the paper
PLACED = ("dataset", "index", "output_dir", "authors_code", "data_dir", "eval_dataset", "eval_index")


@dataclass(frozen=True)
class Table:
    name: str
    title: str
    paper_model: str  # the model the paper's numbers come from
    paper_questions: str  # how many questions the paper evaluates, in words
    paper_limit: int | None  # the same as a --limit (None: every question of the file)
    index_kinds: tuple[str, ...]  # the first is the paper's
    build: Callable[[Options], list[Step]]
    run_types: str  # the module whose CONFIG_TYPES the runs parse (checks --set)
    notes: tuple[str, ...] = ()  # what differs from the paper whatever the options

    @property
    def paper_index(self) -> str:
        return self.index_kinds[0]

    def steps(self, opts: Options) -> list[Step]:
        return [*self.build(opts), report_step(opts)]

    def check(self, opts: Options) -> None:
        """Options this table cannot take, in one line each, before anything runs."""
        if opts.index_kind is not None and opts.index_kind not in self.index_kinds:
            raise ConfigError(f"--index_kind {opts.index_kind}: {self.name} takes {', '.join(self.index_kinds)}")
        if self.name != "dragin-table2" and (opts.datasets or opts.methods):
            raise ConfigError(f"--datasets and --methods choose among dragin-table2's runs; {self.name} has one "
                              "dataset and its own rows")
        unknown = [d for d in opts.datasets or [] if d not in DRAGIN_DATASETS]
        if unknown:
            raise ConfigError(f"--datasets {','.join(unknown)}: not one of {', '.join(DRAGIN_DATASETS)}")
        unknown = [m for m in opts.methods or [] if m not in DRAGIN_METHODS]
        if unknown:
            raise ConfigError(f"--methods {','.join(unknown)}: not one of {', '.join(DRAGIN_METHODS)}")
        if opts.train_limit is not None and self.name != "adapt-llm-popqa":
            raise ConfigError("--train_limit is adapt-llm-popqa's (Algorithm 1's training questions)")
        if opts.sets:
            import importlib

            known = {f.name for cls in importlib.import_module(self.run_types).CONFIG_TYPES
                     for f in dataclasses.fields(cls)}
            bad = [k for k in opts.sets if k not in known]
            if bad:
                raise ConfigError(f"--set {', '.join(bad)}: no run of {self.name} has such a field (see python -m "
                                  f"{self.run_types} --help)")
            placed = [k for k in opts.sets if k in (*PLACED, "model", "base_model", "limit", "eval_limit", "method",
                                                    "mode")]
            if placed:
                raise ConfigError(f"--set {', '.join(placed)}: the reproduce command sets it (use --model, --limit, "
                                  "--output_dir; the methods and modes are the table's)")


def _sets(opts: Options) -> dict[str, str]:
    return dict(opts.sets)


# --- DRAGIN Table 2 ------------------------------------------------------------------------------------------------

def dragin_family(model: str | None) -> str:
    """The authors' model config a model's name points to (their row configs are per model)."""
    return reference_config_for(model or "meta-llama/Llama-2-7b-chat-hf")


def dragin_recipe(family: str, dataset: str) -> tuple[Path, dict]:
    path = REPO_CONFIGS / "dragin_reference" / f"{DRAGIN_FAMILIES[family]}_{dataset}.yaml"
    recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
    recipe.pop("sweep", None)
    return path, recipe


def dragin_steps(opts: Options) -> list[Step]:
    data, family = opts.out / "data", dragin_family(opts.model)
    datasets = opts.datasets or list(DRAGIN_DATASETS)
    kind = opts.index_kind or "bm25-es"
    index = opts.out / "index" / f"dpr-{kind}"
    steps = [download_step([*(DRAGIN_DATASETS[d][0] for d in datasets), "dpr-wiki", "dragin-code"], opts),
             Step("index", "retrieval_adapt.build_index",
                  ("--corpus", str(data_file(data, "dpr-wiki", "psgs_w100.tsv", key="corpus")), *DRAGIN_INDEX[kind],
                   "--output_dir", str(index)), "index", outputs=(str(index / "meta.json"),))]
    _, first = dragin_recipe(family, datasets[0])
    runs = opts.runs_dir(first["model"])
    for dataset in datasets:
        path, recipe = dragin_recipe(family, dataset)
        source, name = DRAGIN_DATASETS[dataset]
        for method in opts.methods or DRAGIN_METHODS:
            folder = runs / dataset / f"method={method}"
            settings = {"method": method, **recipe, "dataset": str(data_file(data, source, name)),
                        "index": str(index), "authors_code": str(data / "dragin-code"), "output_dir": str(folder),
                        **({"model": opts.model} if opts.model else {}),
                        **({"limit": opts.limit} if opts.limit else {}), **_sets(opts)}
            steps.append(Step(f"{dataset}/{method}", "inference.commands.evaluate", tuple(flags(settings)), "run",
                              outputs=(str(folder / "metrics.json"),), folder=str(folder)))
    return steps


# --- ADAPT-LLM on PopQA --------------------------------------------------------------------------------------------

ADAPT_MODES = (("nr", "NR-LLM"), ("ar", "AR-LLM"), ("adapt", "ADAPT-LLM"))


def adapt_recipe() -> dict:
    return yaml.safe_load(ADAPT_RECIPE.read_text(encoding="utf-8"))


def adapt_steps(opts: Options) -> list[Step]:
    data = opts.out / "data"
    runs = opts.runs_dir(adapt_recipe()["base_model"])
    steps = [download_step(["squad", "popqa-adapt-llm"], opts)]
    for mode, _label in ADAPT_MODES:
        folder = runs / mode
        settings = {"mode": mode, "data_dir": str(folder / "data"), "output_dir": str(folder / "model"),
                    "dataset": str(data_file(data, "squad", "train-v1.1.json")),
                    "eval_dataset": str(data_file(data, "popqa-adapt-llm", "popqa_test_test.json")),
                    **({"base_model": opts.model} if opts.model else {}),
                    **({"limit": opts.train_limit} if opts.train_limit else {}),
                    **({"eval_limit": opts.limit} if opts.limit else {}),
                    # the authors' 8-bit base and fp16 need CUDA (the job refuses them elsewhere)
                    **({} if opts.cuda else {"load_in_8bit": False, "precision": "auto"}), **_sets(opts)}
        steps.append(Step(f"train-{mode}", "training.adapt_llm", (shown_path(ADAPT_RECIPE), *flags(settings)),
                          "run", outputs=(str(folder / "model" / "eval" / "summary.json"),),
                          folder=str(folder / "model" / "eval")))
    return steps


# --- Iter-RetGen on HotpotQA ---------------------------------------------------------------------------------------

ITER_RECIPE = REPO_CONFIGS / "iter_retgen_hotpotqa_contriever.yaml"


def iter_retgen_steps(opts: Options) -> list[Step]:
    data = opts.out / "data"
    kind = opts.index_kind or "contriever"
    dev = data_file(data, "hotpotqa", HOTPOT_DEV)
    corpus = opts.out / "corpus" / "hotpotqa-dev-paragraphs.jsonl"
    index = opts.out / "index" / f"hotpotqa-{kind}"
    recipe = yaml.safe_load(ITER_RECIPE.read_text(encoding="utf-8"))
    folder = opts.runs_dir(recipe["model"]) / "iter-retgen"
    settings = {"dataset": str(dev), "index": str(index), "output_dir": str(folder),
                **({"model": opts.model} if opts.model else {}), **({"limit": opts.limit} if opts.limit else {}),
                **_sets(opts)}
    return [download_step(["hotpotqa"], opts),
            Step("corpus", "data_builders.corpus", (f"hotpotqa:{dev}", "--output_file", str(corpus)), "corpus",
                 outputs=(str(corpus),)),
            Step("index", "retrieval_adapt.build_index",
                 ("--corpus", str(corpus), *ITER_INDEX[kind], "--output_dir", str(index)), "index",
                 outputs=(str(index / "meta.json"),)),
            Step("iter-retgen", "inference.commands.evaluate", (shown_path(ITER_RECIPE), *flags(settings)), "run",
                 outputs=(str(folder / "metrics.json"),), folder=str(folder))]


TABLES: dict[str, Table] = {t.name: t for t in (
    Table("dragin-table2", "DRAGIN, Table 2 (EM, F1) and Table 3 (retrievals per question)",
          paper_model="meta-llama/Llama-2-7b-chat-hf (also Llama-2-13b-chat, Vicuna-13b-v1.5)",
          paper_questions="the first 1,000 questions of each dataset", paper_limit=1000,
          index_kinds=tuple(DRAGIN_INDEX), build=dragin_steps, run_types="inference.commands.evaluate",
          notes=("BM25 is bm25s scored as the authors' Elasticsearch 7 index scores (checked against Lucene, not "
                 "against an Elasticsearch server: docs/bm25_elasticsearch.md)",
                 "sampling as the checkpoint's generation_config.json says, seeded (the authors' runs were not)",
                 "sentences and real words are spaCy en_core_web_sm's only where it is installed (metrics.json "
                 "text_rules)")),
    Table("adapt-llm-popqa", "ADAPT-LLM, PopQA: NR-LLM / AR-LLM / ADAPT-LLM (accuracy, share retrieved)",
          paper_model="Llama-2-7B (the authors' code: meta-llama/Llama-2-7b-chat-hf)",
          paper_questions="the authors' PopQA file, all 3,567 questions; every SQuAD v1.1 training question",
          paper_limit=None, index_kinds=("contriever-file",), build=adapt_steps, run_types="training.adapt_llm",
          notes=("trained on SQuAD v1.1 only (the paper also trains on NQ)",
                 "Algorithm 1's data builder is the project's (the authors never published theirs)",
                 "the context passage is the one the authors' file ships (Contriever's top passage): no index is "
                 "built")),
    Table("iter-retgen-hotpotqa", "Iter-RetGen, HotpotQA: T = 1, 2, 3 (EM, F1, accuracy)",
          paper_model="text-davinci-003 (Llama-2 in the appendix)", paper_questions="the first 500 dev questions",
          paper_limit=500, index_kinds=tuple(ITER_INDEX), build=iter_retgen_steps,
          run_types="inference.commands.evaluate",
          notes=("accuracy here is a gold answer contained in the output, not the paper's text-davinci-003 judge "
                 "(Acc†)", "the corpus is HotpotQA dev's own paragraphs (distractor setting), not the October 2017 "
                 "Wikipedia dump", "the 3-shot demos are written for this project (the paper's are in its "
                 "appendix)")),
)}


def options_from(args: argparse.Namespace, *, cuda: bool) -> Options:
    """The parsed flags as :class:`Options`; an unknown table, dataset, method or index kind is a ConfigError."""
    if args.table not in TABLES:
        raise ConfigError(f"unknown table {args.table!r}; known: {', '.join(TABLES)} (--list shows their steps)")
    opts = Options(args.table, output_dir=args.output_dir, model=args.model, limit=args.limit,
                   datasets=args.datasets, methods=args.methods, index_kind=args.index_kind,
                   train_limit=args.train_limit, sets=dict(args.sets), mirrors=list(getattr(args, "mirror", [])),
                   cuda=cuda and not args.no_cuda)
    TABLES[opts.table].check(opts)
    return opts
