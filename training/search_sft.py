"""The search policy's supervised warm start: Algorithm 1's labels written in Search-R1's protocol, LoRA-trained.

    python training/search_sft.py training/configs/search_sft_demo_cpu.yaml
    python training/search_sft.py bench/experiments/knowing_search_sft.yaml --world_seed 0 \\
        --base_model runs/knowing/seed0/model --data_dir runs/knowing/seed0/claims/search_sft/data \\
        --output_dir runs/knowing/seed0/claims/search_sft/model

Then the policy is the evaluate command's ``search-r1`` method (``--method search-r1 --model OUTPUT_DIR``) and the
starting point of the multi-turn GRPO job (``training/grpo.py ... --task search --init_adapter OUTPUT_DIR``).

Arguments: ``[CONFIG.yaml] [--field value ...]`` over ``BaseModelConfig`` (the model asked closed-book and
fine-tuned), ``AdaptDataConfig`` (Algorithm 1's questions, judge and passage cut: ``data_builders/adapt_llm.py``),
``AdaptTrainConfig`` (the LoRA recipe: ``training/adapt_llm_config.py``; ``ret_token: text``, since the policy writes
tags, not ``<RET>``) and :class:`SearchSftConfig`.

Stages, each resumable: (1) Algorithm 1 into ``data_dir`` (the closed-book pass; ``closed_book.jsonl`` resumes),
(2) its labels as trajectories (:mod:`training.search_warmstart`) into ``data_dir/search_dataset``, (3) LoRA SFT into
``output_dir`` (the ADAPT-LLM trainer: checkpoints, resume, adapter check), with ``search_sft.json`` counting what was
trained on.
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from adaptive_rag.lm.base_model import BaseModelConfig
from adaptive_rag.plumbing.cli import run_cli
from adaptive_rag.plumbing.config import parse_config
from adaptive_rag.plumbing.errors import ConfigError
from data_builders.adapt_llm import AdaptDataConfig, load_source, save_dataset
from inference.commands.eval_data import check_index_given, load_eval_retriever
from retrieval_adapt.corpus_store import load_meta
from training.adapt_llm import build_data
from training.adapt_llm import check_inputs as check_adapt_inputs
from training.adapt_llm_config import AdaptEvalConfig, AdaptTrainConfig


@dataclass
class SearchSftConfig:
    # The prompt as the user turn of the model's chat template: as the GRPO search task's search_chat and the
    # search-r1 method build it (a model without a template gets the plain text either way)
    search_chat: bool = True
    # The <information> block of a search: the gold passage alone ("gold"), or what the environment returns for the
    # question ("retrieved": the index's information_top_k passages, the gold one at its rank or in place of the
    # last), so the policy learns to read the answer among the passages evaluation shows it
    information: str = "gold"
    index: str | None = None  # "retrieved": an index folder; null: BM25 over the embedded (or knowing) world
    information_top_k: int = 3  # "retrieved": passages per search (the search-r1 method's top_k)

    def __post_init__(self) -> None:
        if self.information not in ("gold", "retrieved"):
            raise ValueError(f"information must be 'gold' or 'retrieved', got '{self.information}'")
        if self.information_top_k < 1:
            raise ValueError(f"information_top_k must be >= 1, got {self.information_top_k}")


CONFIG_TYPES = (BaseModelConfig, AdaptDataConfig, AdaptTrainConfig, SearchSftConfig)


def parse(argv: list[str]) -> tuple[BaseModelConfig, AdaptDataConfig, AdaptTrainConfig, SearchSftConfig]:
    return parse_config(CONFIG_TYPES, argv, prog="training/search_sft.py")


def check_inputs(model_cfg: BaseModelConfig, data_cfg: AdaptDataConfig, train_cfg: AdaptTrainConfig,
                 search_cfg: SearchSftConfig | None = None) -> None:
    """Everything checked before a model loads, each mistake in one line: ADAPT-LLM's checks (the model's name, the
    questions, the folders, the machine), the two settings the warm start fixes, and the index."""
    if search_cfg is not None and search_cfg.information == "retrieved":
        # before Algorithm 1's closed-book pass, not after it: a QA file needs an index folder, and the folder must
        # be a finished index
        check_index_given(search_cfg.index, data_cfg.dataset, needs_retrieval=True)
        if search_cfg.index is not None:
            load_meta(search_cfg.index)
    if data_cfg.mode != "adapt":
        raise ConfigError(f"mode {data_cfg.mode}: the warm start is written from Algorithm 1's labels; set mode adapt")
    if train_cfg.ret_token != "text":
        raise ConfigError("the search policy writes tags, not <RET>: set ret_token text (nothing is added to the "
                          "tokenizer)")
    check_adapt_inputs(model_cfg, data_cfg, train_cfg, AdaptEvalConfig(evaluate=False))


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    model_cfg, data_cfg, train_cfg, search_cfg = parse(list(sys.argv[1:] if argv is None else argv))
    check_inputs(model_cfg, data_cfg, train_cfg, search_cfg)
    # torch, trl and peft load after the arguments are checked
    from accelerate import PartialState

    from adaptive_rag.lm.models import load_tokenizer
    from inference.search_agent.loop import SearchSettings
    from training.lora_sft import train_adapt
    from training.search_warmstart import labels_of, search_dataset

    state = PartialState()
    known, splits = labels_of(build_data(model_cfg, data_cfg, state))
    tokenizer = load_tokenizer(model_cfg.base_model)
    settings = SearchSettings(chat=search_cfg.search_chat, max_passage_words=data_cfg.max_passage_words)
    examples = load_source(data_cfg)
    information = None
    if search_cfg.information == "retrieved":
        from training.search_warmstart import retrieved_information

        retriever = load_eval_retriever(search_cfg.index, data_cfg.dataset, world_seed=data_cfg.world_seed)
        searched = [ex for ex in examples if ex.id not in known and ex.gold_passages]
        hits = retriever.search([ex.question for ex in searched], search_cfg.information_top_k) if searched else []
        information = {ex.id: retrieved_information(ex, row, data_cfg.max_passage_words)
                       for ex, row in zip(searched, hits)}
    dsd = search_dataset(tokenizer, examples, known, splits, settings, information)
    if state.is_main_process:
        save_dataset(dsd, Path(data_cfg.data_dir) / "search_dataset")
    counts = {name: {"instances": len(ds), "searched": sum(k == "search_retrieve" for k in ds["kind"])}
              for name, ds in dsd.items()}
    state.print(f"warm-start trajectories: {counts}")
    metrics = train_adapt(data_cfg, train_cfg, dsd, extra_configs=(search_cfg,), model=model_cfg)
    if state.is_main_process:
        summary = {"protocol": "search-r1", "splits": counts, "train_loss": metrics.get("train_loss"),
                   "adapter": metrics.get("adapter")}
        (Path(train_cfg.output_dir) / "search_sft.json").write_text(json.dumps(summary, indent=2) + "\n")
        print(f"trained: loss {metrics.get('train_loss', float('nan')):.4f} -> {train_cfg.output_dir}\n"
              f"evaluate: python -m inference.commands.evaluate --method search-r1 --model {train_cfg.output_dir} "
              f"--dataset ...")


def cli() -> int:
    return run_cli(main)


if __name__ == "__main__":
    sys.exit(cli())
