"""Plumbing shared by the dataset readers: locations for error messages, JSON/JSONL/TSV loading,
stable passage ids and field checks.

Every reader reports bad input as a :class:`DataError` that names the file, the line (JSONL, TSV:
1-based) or record index (JSON arrays), and the field.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.records import Passage, QAExample

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Loc:
    """Where a record came from: ``line`` for line-based files, ``record`` for JSON arrays."""

    path: str
    line: int | None = None
    record: int | str | None = None

    @property
    def source(self) -> str:
        return f"{self.path}, line {self.line}" if self.line is not None else self.path

    def error(self, message: str, field: str | None = None) -> DataError:
        return DataError(message, source=self.source, record=self.record, field=field)

    def sub(self, record: int | str) -> Loc:
        """A nested record (a SQuAD question inside an article, a paragraph inside a question)."""
        inner = record if self.record is None else f"{self.record}/{record}"
        return Loc(self.path, self.line, inner)


Record = tuple[Loc, Any]


@dataclass
class Parsed:
    """One question as a format parser sees it. ``example`` is None when the record is skipped on
    purpose (``skip_reason`` says why); its ``paragraphs`` (all it ships, gold or not) still count."""

    example: QAExample | None
    paragraphs: list[Passage] = field(default_factory=list)
    skip_reason: str | None = None


def existing_file(path: str | Path) -> Path:
    p = Path(path)
    if not p.is_file():
        raise DataError("no such file" if not p.exists() else "not a file", source=str(p))
    return p


def _read_text(path: Path) -> str:
    data = path.read_bytes()
    try:
        # utf-8-sig: tolerate a byte-order mark, which some Windows-edited files carry.
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataError(f"not UTF-8 ({e.reason} at byte {e.start})", source=f"{path}, line {line}") from e


def iter_jsonl(path: str | Path) -> Iterator[Record]:
    """Yield ``(Loc(line=n), object)`` for each non-blank line (n is 1-based). Read a line at a time, so a corpus
    of millions of passages streams (data_builders.passage_stream)."""
    p = existing_file(path)
    offset = 0
    with p.open("rb") as f:
        # binary lines split on "\n" only: text mode would also split on "\r", and str.splitlines() on U+2028
        for n, raw in enumerate(f, start=1):
            try:
                # utf-8-sig on the first line: tolerate a byte-order mark, which some Windows-edited files carry
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"not UTF-8 ({e.reason} at byte {offset + e.start})", source=f"{p}, line {n}") from e
            offset += len(raw)
            if not line.strip():
                continue
            try:
                yield Loc(str(p), line=n), json.loads(line)
            except json.JSONDecodeError as e:
                raise DataError(f"malformed JSON ({e.msg}, column {e.colno})", source=f"{p}, line {n}") from e


def load_json_records(path: str | Path) -> list[Record]:
    """Records of a ``.json`` or ``.jsonl`` file, whatever the extension says.

    A JSON array gives one record per element (``Loc.record`` = index); a JSON object gives one
    record; JSON Lines (several shipped ``.json`` files are JSONL) give one record per line.
    """
    p = existing_file(path)
    if p.suffix == ".jsonl":
        return list(iter_jsonl(p))
    text = _read_text(p)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data":  # a second top-level value: JSON Lines
            return list(iter_jsonl(p))
        raise DataError(f"malformed JSON ({e.msg}, line {e.lineno} column {e.colno})", source=str(p)) from e
    if isinstance(data, list):
        return [(Loc(str(p), record=i), obj) for i, obj in enumerate(data)]
    return [(Loc(str(p)), data)]


def _not_utf8(p: Path) -> DataError:
    """The error for a file that failed to decode, naming the first bad line (found by a second, binary pass:
    the text pass decodes in blocks and cannot tell the line)."""
    with p.open("rb") as f:
        for n, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as e:
                return DataError(f"not UTF-8 ({e.reason} at byte {e.start} of the line)", source=f"{p}, line {n}")
    return DataError("not UTF-8", source=str(p))


def iter_tsv(path: str | Path, header: bool = True) -> Iterator[tuple[Loc, list[str], list[str] | None]]:
    """Yield ``(loc, row, header)`` for each data row of a tab-separated file; ``loc.line`` is the row's line.

    Uses ``csv`` quoting, as DPR wrote ``psgs_w100.tsv``: a field may be quoted to hold tabs, with its inner
    quotes doubled (``"Aaron ( or ; ""Ahärôn"")"``). A record is one line in every format read here, so a quote
    that opens a field and does not close on its line (which ``csv`` would let run on, swallowing the lines
    after it into one field) is an error naming the line where that record starts.
    """
    p = existing_file(path)
    try:
        yield from _tsv_rows(p, header)
    except UnicodeDecodeError:
        raise _not_utf8(p) from None


def _tsv_rows(p: Path, header: bool) -> Iterator[tuple[Loc, list[str], list[str] | None]]:
    names: list[str] | None = None
    with p.open(encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t")
        while True:
            start = reader.line_num + 1
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as e:  # e.g. a run-on quoted field past csv's field size limit
                raise DataError(f"not a tab-separated record ({e}); a stray quote (\") at the start of a field?",
                                source=f"{p}, line {start}") from e
            # a quote left open runs on over the next lines, or (on the last line) keeps the line's end
            if reader.line_num > start or (row and ("\n" in row[-1] or "\r" in row[-1])):
                end = f" and runs on to line {reader.line_num}" if reader.line_num > start else ""
                raise DataError(f"a field opens a quote (\") that does not close on its line{end}; quote the whole "
                                "field and double the quotes inside it, or remove the stray quote",
                                source=f"{p}, line {start}")
            if header and names is None:
                names = row
                continue
            if not any(cell.strip() for cell in row):
                continue
            yield Loc(str(p), line=start), row, names
    if header and names is None:
        raise DataError("empty file, expected a header row", source=str(p))


# Tokens in a file or folder name that identify a dataset, for ``metadata["source"]`` of formats
# that do not say which dataset they hold (plain question/answer files, IRCoT processed data).
_DATASET_TOKENS = {
    "hotpot": "hotpotqa",
    "hotpotqa": "hotpotqa",
    "2wiki": "2wikimultihopqa",
    "2wikimultihop": "2wikimultihopqa",
    "2wikimultihopqa": "2wikimultihopqa",
    "musique": "musique",
    "bamboogle": "bamboogle",
    "nq": "nq",
    "trivia": "triviaqa",
    "triviaqa": "triviaqa",
    "popqa": "popqa",
    "strategyqa": "strategyqa",
    "squad": "squad",
    "iirc": "iirc",
}


def dataset_name(path: str | Path) -> str:
    """The dataset a file holds, from the nearest file/folder name with a known dataset token
    (``triviaqa/topics.dpr.trivia.dev.txt`` -> ``triviaqa``); else the file's stem."""
    p = Path(path)
    for part in reversed(p.parts):
        for token in re.split(r"[^0-9a-z]+", part.lower()):
            if token in _DATASET_TOKENS:
                return _DATASET_TOKENS[token]
    return p.stem


def norm_ws(s: str) -> str:
    """Collapse runs of whitespace; the dedup and id key of a passage uses this form."""
    return " ".join(s.split())


def passage_id(title: str, text: str) -> str:
    """Stable id from content: the same paragraph shipped by several questions or files gets the
    same id, so gold passages of questions match the pooled corpus."""
    key = f"{norm_ws(title)}\n{norm_ws(text)}".encode()
    return "h" + hashlib.sha1(key).hexdigest()[:16]


def make_passage(title: str, text: str) -> Passage:
    return Passage(id=passage_id(title, text), title=title, text=text)


def require(obj: Any, key: str, loc: Loc) -> Any:
    if not isinstance(obj, dict):
        raise loc.error(f"expected an object, got {type(obj).__name__}")
    if key not in obj:
        raise loc.error("missing", field=key)
    return obj[key]


def require_str(obj: Any, key: str, loc: Loc, nonempty: bool = True) -> str:
    value = require(obj, key, loc)
    if not isinstance(value, str):
        raise loc.error(f"expected a string, got {type(value).__name__}", field=key)
    if nonempty and not value.strip():
        raise loc.error("empty", field=key)
    return value


def require_list(obj: Any, key: str, loc: Loc) -> list[Any]:
    value = require(obj, key, loc)
    if not isinstance(value, list):
        raise loc.error(f"expected a list, got {type(value).__name__}", field=key)
    return value


def answer_list(value: Any, loc: Loc, key: str) -> list[str]:
    """Gold answers from a string or a list of strings; blanks dropped, order kept, duplicates removed.
    No answer left is an error: a question without a gold answer cannot be scored."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
        raise loc.error("expected a string or a list of strings", field=key)
    answers = list(dict.fromkeys(a.strip() for a in value if a.strip()))
    if not answers:
        raise loc.error("no non-empty answer", field=key)
    return answers


def json_list_string(value: Any, loc: Loc, key: str) -> list[str]:
    """PopQA stores answer aliases as a JSON-encoded list inside a string."""
    if isinstance(value, list):
        return answer_list(value, loc, key)
    if not isinstance(value, str):
        raise loc.error(f"expected a JSON list string, got {type(value).__name__}", field=key)
    try:
        return answer_list(json.loads(value), loc, key)
    except json.JSONDecodeError as e:
        raise loc.error(f"malformed JSON list string ({e.msg})", field=key) from e


def as_int(value: Any, loc: Loc, key: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError) as e:
        raise loc.error(f"expected an integer, got {value!r}", field=key) from e


def collect(parsed: Iterable[Parsed], source: str, limit: int | None = None) -> list[QAExample]:
    """Keep the examples, count and log the records skipped on purpose, stop after ``limit`` kept."""
    examples: list[QAExample] = []
    skipped: Counter[str] = Counter()
    for item in parsed:
        if limit is not None and len(examples) >= limit:
            break
        if item.example is None:
            skipped[item.skip_reason or "unspecified"] += 1
        else:
            examples.append(item.example)
    for reason, n in skipped.items():
        logger.warning("%s: skipped %d records (%s)", source, n, reason)
    if not examples and (limit is None or limit > 0):
        # an empty input is a mistake (a wrong file, a failed export), never a run over zero questions
        why = "; ".join(f"{n} records skipped: {reason}" for reason, n in skipped.items()) or "it holds no records"
        raise DataError(f"no questions ({why})", source=source)
    return examples


def dedup_by_id(items: Iterable[tuple[Loc, Passage]], source: str) -> list[Passage]:
    """Distinct passages in first-seen order. Empty texts are dropped with a logged count; one id
    naming two different passages is an error (ids must be unique in a corpus)."""
    seen: dict[str, tuple[Loc, Passage]] = {}
    empty = repeats = 0
    for loc, p in items:
        if not p.text.strip():
            empty += 1
            continue
        if p.id in seen:
            first_loc, first = seen[p.id]
            if (norm_ws(first.title), norm_ws(first.text)) != (norm_ws(p.title), norm_ws(p.text)):
                raise loc.error(f"id '{p.id}' already names a different passage ({first_loc.source})", field="id")
            repeats += 1
            continue
        seen[p.id] = (loc, p)
    if empty:
        logger.warning("%s: skipped %d passages with empty text", source, empty)
    if repeats:
        logger.info("%s: %d repeated passages merged", source, repeats)
    if not seen:
        why = f"all {empty} have empty text" if empty else "it holds no records"
        raise DataError(f"no passages ({why})", source=source)
    return [p for _, p in seen.values()]
