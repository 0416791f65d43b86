"""docs/papers.md's tables for ADAPT-LLM and Iter-RetGen stay true: every `key: value` switch they name is a field of
one of the project's configs that accepts that value, and every file they name exists."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest
import yaml

from adaptive_rag.lm.base_model import BaseModelConfig
from adaptive_rag.plumbing.config import check_yaml_values
from data_builders.adapt_llm import AdaptDataConfig
from data_builders.question_loader import QuestionsConfig
from inference.adapt_gate.gate_eval import GateMethodConfig
from inference.iter_retgen.loop import IterRetGenConfig
from retrieval_adapt.distill_config import DistillConfig
from training.adapt_llm_config import AdaptEvalConfig, AdaptTrainConfig
from training.distill_set import RetrievalAdaptDataConfig

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = (BaseModelConfig, AdaptDataConfig, AdaptTrainConfig, AdaptEvalConfig, GateMethodConfig, QuestionsConfig,
           RetrievalAdaptDataConfig, DistillConfig, IterRetGenConfig)
SECTIONS = ("## Iter-RetGen", "## ADAPT-LLM")


def _section(text: str, head: str) -> str:
    start = text.index(head)
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else None]


def _table_cells() -> list[str]:
    text = (ROOT / "docs" / "papers.md").read_text(encoding="utf-8")
    cells = []
    for head in SECTIONS:
        rows = [line for line in _section(text, head).splitlines() if line.startswith("|")]
        assert len(rows) > 3, f"{head}: no table"
        cells += [cell for row in rows for cell in row.strip("|").split("|")]
    return cells


def _switches() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2).strip()) for cell in _table_cells()
            for m in re.finditer(r"`([a-z_0-9]+): ([^`]+)`", cell)]


def _fields() -> dict[str, list[type]]:
    out: dict[str, list[type]] = {}
    for cls in CONFIGS:
        for f in dataclasses.fields(cls):
            out.setdefault(f.name, []).append(cls)
    return out


def test_the_tables_name_switches():
    names = {name for name, _ in _switches()}
    assert {"ret_token", "keep_adapter", "gate_context_source", "candidate_query", "teacher_distribution"} <= names


@pytest.mark.parametrize(("name", "value"), _switches())
def test_every_switch_named_exists_and_takes_its_value(name, value):
    fields = _fields()
    assert name in fields, f"docs/papers.md names `{name}`, which no config has"
    parsed = yaml.safe_load(f"{name}: {value}")
    owners = [cls for cls in fields[name]
              if not _refuses(cls, name, parsed)]
    assert owners, f"`{name}: {value}` is not a value {fields[name][0].__name__}.{name} accepts"


def _refuses(cls: type, name: str, data: dict) -> bool:
    try:
        check_yaml_values((cls,), data, "docs/papers.md")
    except Exception:
        return True
    hint = typing.get_type_hints(cls)[name]
    choices = [a for a in typing.get_args(hint) if isinstance(a, str)]
    return bool(choices) and isinstance(data[name], str) and data[name] not in choices


def test_every_file_named_exists():
    paths = {m.group(1) for cell in _table_cells() for m in re.finditer(r"`([\w/.-]+\.(?:yaml|py))`", cell)}
    assert paths
    for path in paths:
        found = (ROOT / path).is_file() or any(ROOT.glob(f"**/{path}"))
        assert found, f"docs/papers.md names {path}, which does not exist"
