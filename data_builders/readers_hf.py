"""Questions from a Hugging Face hub dataset, for users with internet (``datasets`` is imported
lazily: nothing else in the project needs it, and offline machines cannot reach the hub)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import QAExample
from data_builders.source_files import (
    Loc,
    Parsed,
    answer_list,
    as_int,
    collect,
    json_list_string,
    require,
    require_str,
)


def _hf_answers(value: Any, loc: Loc, key: str) -> list[str]:
    """Answer columns come as a string, a list, a JSON-list string (PopQA), SQuAD's
    ``{"text": [...]}`` or TriviaQA's ``{"value", "aliases"}``."""
    if isinstance(value, dict) and "text" in value:
        value = value["text"]
    elif isinstance(value, dict) and "aliases" in value:
        value = [value.get("value") or "", *(value.get("aliases") or [])]
    if isinstance(value, str) and value.lstrip().startswith("["):
        return json_list_string(value, loc, key)
    return answer_list(value, loc, key)


def read_hf_qa(
    name: str,
    split: str,
    question_field: str = "question",
    answers_field: str = "answer",
    config: str | None = None,
    id_field: str | None = None,
    limit: int | None = None,
) -> list[QAExample]:
    """Questions from a Hugging Face hub dataset (needs the ``datasets`` package and internet)."""
    try:
        import datasets  # lazy: only users with hub access need it
    except ImportError as e:
        raise DataError("the 'datasets' package is not installed (pip install datasets)", source=name) from e
    try:
        rows = datasets.load_dataset(name, config, split=split)
    except Exception as e:  # hub failures arrive as ConnectionError, OSError, HTTP and not-found errors alike
        raise DataError(
            f"could not load split '{split}' from the Hugging Face hub ({type(e).__name__}: {e}); "
            "offline, read a local file with data_builders.readers.read_qa instead",
            source=name,
        ) from e
    where = f"{name}[{split}]"

    def parse() -> Iterator[Parsed]:
        for i, row in enumerate(rows):
            loc = Loc(where, record=i)
            metadata: dict[str, Any] = {"source": name}
            if row.get("s_pop") is not None:
                metadata["popularity"] = as_int(row["s_pop"], loc, "s_pop")
            qid = str(require(row, id_field, loc)) if id_field else str(row.get("id", f"{name}-{i}"))
            question = require_str(row, question_field, loc)
            answers = _hf_answers(require(row, answers_field, loc), loc, answers_field)
            yield Parsed(QAExample(qid, question, answers, metadata=metadata))

    return collect(parse(), where, limit)
