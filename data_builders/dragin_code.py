"""The DRAGIN authors' few-shot exemplars and prompt templates, read from their own ``src/data.py``.

Their text is never stored in this project: ``python -m data_builders.download dragin-code`` fetches the file at a
pinned commit (``DRAGIN_COMMIT``) into the data folder, like a dataset, and this module parses it without running
it (Python's ``ast``): each dataset class's ``examplars`` list (a literal) and its three template lambdas
(``demo_input_template``, ``test_input_template``, ``output_template``: f-strings over their arguments).

:meth:`AuthorsPrompts.demo_cases` and :meth:`AuthorsPrompts.case` give the strings their ``BaseDataset.format``
builds: a demo's ``case`` (input template, a space unless it ends in white space, output template) and the test
question's ``case``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from adaptive_rag.plumbing.errors import ConfigError, DataError

DRAGIN_COMMIT = "4d71efcf6712bf82c4a5c7c81455af4efee20dcc"  # oneal2000/DRAGIN, the commit this project read
DRAGIN_RAW = f"https://raw.githubusercontent.com/oneal2000/DRAGIN/{DRAGIN_COMMIT}/src"
DATA_FILE = "data.py"
DEFAULT_FOLDER = "data/dragin-code"  # where `python -m data_builders.download dragin-code --out data/` puts it
# the dataset class of theirs that formats each of their four datasets
CLASSES = {"hotpotqa": "HotpotQA", "2wiki": "WikiMultiHopQA", "iirc": "IIRC", "strategyqa": "StrategyQA"}
TEMPLATES = ("demo_input_template", "test_input_template", "output_template")


@dataclass(frozen=True)
class AuthorsPrompts:
    """One dataset class of theirs: its exemplars and templates (``str.format`` strings over named fields)."""

    dataset_class: str
    examplars: tuple[dict, ...]
    demo_input: str  # fields: question
    test_input: str  # fields: question
    output: str  # fields: cot, answer

    def demo_cases(self, fewshot: int | None = None) -> list[str]:
        """The first ``fewshot`` exemplars as ``BaseDataset.format`` writes a demo's ``case`` (None: all)."""
        chosen = self.examplars if fewshot is None else self.examplars[:fewshot]
        if fewshot is not None and fewshot > len(self.examplars):
            raise ConfigError(f"{self.dataset_class} has {len(self.examplars)} exemplars; {fewshot} asked for")
        return [self._case(ex, self.demo_input, with_answer=True) for ex in chosen]

    def case(self, question: str) -> str:
        """The test question's ``case`` (its input template, no answer)."""
        return self.test_input.format(question=question)

    def _case(self, example: dict, template: str, with_answer: bool) -> str:
        query = template.format(question=example["question"])
        if with_answer:
            cot = example.get("cot")
            if cot is not None and not isinstance(cot, str):
                cot = "".join(cot)  # StrategyQA's chains are tuples of sentences
            query += ("" if query[-1] in "\n " else " ") + self.output.format(cot=cot, answer=example["answer"])
        return query


def _format_string(node: ast.AST, fields: list[str], where: str) -> str:
    """An f-string lambda body over its arguments as a ``str.format`` string with named fields."""
    if not isinstance(node, ast.JoinedStr):
        raise DataError(f"{where}: expected an f-string template, found {type(node).__name__}")
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(value.value.replace("{", "{{").replace("}", "}}"))
        elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name) \
                and value.value.id in fields and value.conversion == -1 and value.format_spec is None:
            parts.append("{" + value.value.id + "}")
        else:
            raise DataError(f"{where}: a template field this reader does not know ({ast.dump(value)[:80]})")
    return "".join(parts)


def _template(node: ast.AST, names: tuple[str, ...], where: str) -> str:
    """``lambda self, a, b: f'...{a}...{b}'`` as a format string over ``names`` (their arguments by position)."""
    if not isinstance(node, ast.Lambda):
        raise DataError(f"{where}: expected a lambda, found {type(node).__name__}")
    args = [a.arg for a in node.args.args][1:]  # after self
    if len(args) != len(names):
        raise DataError(f"{where}: expected {len(names)} arguments after self, found {args}")
    text = _format_string(node.body, args, where)
    for arg, name in zip(args, names):
        text = text.replace("{" + arg + "}", "{" + name + "}")
    return text


def parse_data_py(source: str, dataset_class: str, *, origin: str = DATA_FILE) -> AuthorsPrompts:
    """Their ``src/data.py`` text -> the exemplars and templates of ``dataset_class`` (never executed)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise DataError(f"{origin} is not Python source ({e.msg}, line {e.lineno})") from e
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == dataset_class), None)
    if cls is None:
        raise DataError(f"{origin} has no class {dataset_class}")
    found: dict[str, ast.AST] = {}
    for stmt in cls.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) \
            else []
        for target in targets:
            if isinstance(target, ast.Name) and stmt.value is not None:
                found[target.id] = stmt.value
    missing = [n for n in ("examplars", *TEMPLATES) if n not in found]
    if missing:
        raise DataError(f"{origin}: class {dataset_class} lacks {', '.join(missing)}")
    try:
        examplars = ast.literal_eval(found["examplars"])
    except ValueError as e:
        raise DataError(f"{origin}: {dataset_class}.examplars is not a literal list") from e
    if not isinstance(examplars, list) or not all(isinstance(e, dict) and "question" in e and "answer" in e
                                                  for e in examplars):
        raise DataError(f"{origin}: {dataset_class}.examplars must be a list of dicts with question and answer")
    where = f"{origin}: {dataset_class}"
    return AuthorsPrompts(
        dataset_class, tuple(examplars),
        _template(found["demo_input_template"], ("question",), f"{where}.demo_input_template"),
        _template(found["test_input_template"], ("question",), f"{where}.test_input_template"),
        _template(found["output_template"], ("cot", "answer"), f"{where}.output_template"))


def load_authors_prompts(folder: str | Path, dataset_kind: str) -> AuthorsPrompts:
    """The prompts of the authors' class for ``dataset_kind`` (hotpotqa, 2wiki, iirc, strategyqa) from the fetched
    ``data.py`` in ``folder``."""
    if dataset_kind not in CLASSES:
        raise ConfigError(f"the authors' prompts exist for {', '.join(CLASSES)}; got dataset {dataset_kind!r} "
                          "(set --demos to one of them)")
    path = Path(folder) / DATA_FILE
    if not path.is_file():
        raise ConfigError(f"the DRAGIN authors' prompts are not in {folder}: run `python -m data_builders.download "
                          f"dragin-code --out {Path(folder).parent}` (their src/data.py at commit "
                          f"{DRAGIN_COMMIT[:7]}), or point --authors_code at the folder that holds it")
    return parse_data_py(path.read_text(encoding="utf-8"), CLASSES[dataset_kind], origin=str(path))
