"""The commands README.md and docs/*.md show, read as a user copies them: the lines of ```bash blocks and the inline
code spans that start a command (``python -m ...``, ``python bench/x.py``, ``arag-...``, ``accelerate launch``,
``torchrun``, ``bash x.sh``, ``make x``). Each resolves to the program it runs, and the program's own parser (caught
as its ``main()`` calls it, before anything else runs) says whether it accepts the flags shown."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import re
import shlex
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
# README, the docs pages, and the READMEs beside recipes and configs (accelerate_configs/, bench/experiments/, ...)
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted(p for p in [*ROOT.glob("*/README.md"), *ROOT.glob("*/*/README.md")]
                if not {"runs", "data", ".venv"} & set(p.relative_to(ROOT).parts))]
# the project's own top-level folders: a module under them must exist; anything else (torch, pytest) is not ours
PROJECT = ("adaptive_rag", "data_builders", "retrieval_adapt", "inference", "training", "bench")
# programs run by a launcher: everything up to the program is the launcher's own options
LAUNCHERS = (("python", "-m", "torch.distributed.run"), ("torchrun",), ("accelerate", "launch"))
STARTS = re.compile(r"^(?:python3? (?:-m \S+|\S+\.py)|arag-[\w-]+|accelerate launch|torchrun|bash \S+\.sh|make [\w-]+)")
# a value standing for the user's own (DIR, PATH/x.jsonl, <seed>, NAME..., M): never checked against choices
PLACEHOLDER = re.compile(r"[A-Z]{1,}[A-Z_]*\b|<|…|\.\.\.|\||\$")


@dataclass
class Shown:
    """One command as a document shows it."""

    doc: str
    text: str
    words: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return f"{self.doc}: {self.text}"


def _fenced(text: str) -> list[str]:
    return re.findall(r"```(?:bash|sh|shell)\n(.*?)```", text, flags=re.S)


def _inline(text: str) -> list[str]:
    outside = re.sub(r"```\w*\n.*?```", "", text, flags=re.S)
    return [" ".join(s.split()) for s in re.findall(r"`([^`]+)`", outside) if STARTS.match(" ".join(s.split()))]


def _indented(text: str) -> list[str]:
    """Commands in indented code blocks (four spaces, after a blank line or another such line): only lines that
    start a command, so an indented list item in prose is never read as one."""
    outside = re.sub(r"```\w*\n.*?```", "", text, flags=re.S)
    found, previous = [], ""
    for line in outside.splitlines():
        code = line[4:] if line.startswith("    ") and (not previous.strip() or previous.startswith("    ")) else None
        if code is not None and STARTS.match(code.strip()):
            found.append(code.strip())
        previous = line
    return found


def _split(line: str) -> list[list[str]]:
    """The commands of one shell line: its words, comments dropped, split at ``&&``, ``;`` and ``||``."""
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # an unclosed quote: not a command a user could paste
        return [[line]]
    commands, current = [], []
    for word in words:
        if word in ("&&", ";", "||"):
            commands.append(current)
            current = []
        else:
            current.append(word)
    return [c for c in [*commands, current] if c]


def shown_commands(doc: Path) -> list[Shown]:
    return shown_in(doc.read_text(encoding="utf-8"), str(doc.relative_to(ROOT)))


def shown_in(text: str, name: str) -> list[Shown]:
    found = []
    for block in _fenced(text):
        block = block.replace("\\\n", " ")
        variables = dict(re.findall(r'^(\w+)="([^"]*)"\s*$', block, flags=re.M))
        for line in block.splitlines():
            if not line.strip() or re.match(r"^\w+=", line.strip()):
                continue
            for var, value in variables.items():  # ARGS="..." then `cmd $ARGS`: the shell's expansion
                line = line.replace(f"${{{var}}}", value).replace(f"${var}", value)
            found += [Shown(name, " ".join(words), words) for words in _split(line)]
    for span in [*_inline(text), *_indented(text)]:
        found += [Shown(name, " ".join(words), words) for words in _split(span)]
    return found


def all_shown() -> list[Shown]:
    return [c for doc in DOCS for c in shown_commands(doc)]


@cache
def console_scripts() -> dict[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {name: target.split(":")[0] for name, target in data["project"]["scripts"].items()}


@dataclass
class Program:
    """What a shown command runs: a module (``kind`` module), a script path, a shell script, a make target, or
    something outside the project (``kind`` other), with the arguments given to it."""

    kind: str
    name: str
    args: list[str]


def _after_launcher(words: list[str]) -> list[str] | None:
    for launcher in LAUNCHERS:
        if tuple(words[:len(launcher)]) == launcher:
            rest = words[len(launcher):]
            for i, word in enumerate(rest):  # the launcher's options end at the program
                if word == "-m" and i + 1 < len(rest):
                    return ["python", "-m", *rest[i + 1:]]
                if word.endswith(".py"):
                    return ["python", *rest[i:]]
            return []  # a launcher shown alone (`accelerate launch`): nothing to check
    return None


def resolve(words: list[str]) -> Program:
    launched = _after_launcher(words)
    if launched is not None:
        if not launched:
            return Program("other", " ".join(words), [])
        words = launched
    head = words[0]
    if head in ("python", "python3") and len(words) > 2 and words[1] == "-m":
        return Program("module", words[2], words[3:])
    if head in ("python", "python3") and len(words) > 1 and words[1].endswith(".py"):
        return Program("script", words[1], words[2:])
    if head.startswith("arag-"):
        module = console_scripts().get(head)
        return Program("module", module, words[1:]) if module else Program("missing", head, words[1:])
    if head == "bash" and len(words) > 1:
        return Program("shell", words[1], words[2:])
    if head == "make" and len(words) > 1:
        return Program("make", words[1], words[2:])
    return Program("other", head, words[1:])


def is_ours(module: str) -> bool:
    return module.split(".")[0] in PROJECT


def module_file(module: str) -> Path | None:
    spec = importlib.util.find_spec(module) if is_ours(module) else None
    return Path(spec.origin) if spec and spec.origin else None


class _Caught(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        super().__init__(parser.prog)
        self.parser = parser


def _load(program: Program):
    if program.kind == "module":
        return importlib.import_module(program.name)
    path = ROOT / program.name
    sys.path.insert(0, str(path.parent))  # as `python path/x.py` has it: the script's folder first
    try:
        spec = importlib.util.spec_from_file_location(f"doc_script_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))


def takes_options(source: str) -> bool:
    return bool(re.search(r"ArgumentParser\b|parse_config\(|config_parser\(|\.parse_(?:known_)?args\(", source))


def catch_parser(program: Program, first_args: list[str]) -> argparse.ArgumentParser:
    """The parser ``program``'s ``main()`` parses with: its first parse is stopped and the parser kept, so nothing
    the program would do after parsing runs. ``first_args`` (a recipe the command names) reach main as given."""
    module = _load(program)
    original = argparse.ArgumentParser.parse_known_args

    def stop(self, args=None, namespace=None):
        raise _Caught(self)

    argparse.ArgumentParser.parse_known_args = stop
    saved_argv = sys.argv
    sys.argv = [program.name, *first_args]
    try:
        if inspect.signature(module.main).parameters:
            module.main(list(first_args))
        else:
            module.main()
    except _Caught as caught:
        return caught.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original
        sys.argv = saved_argv
    raise AssertionError(f"{program.name}: main() returned without parsing its arguments")


@cache
def parser_of(kind: str, name: str, first: tuple[str, ...]) -> argparse.ArgumentParser:
    return catch_parser(Program(kind, name, []), list(first))


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in parser._actions for s in a.option_strings}


def _subparser(parser: argparse.ArgumentParser, args: list[str]) -> tuple[argparse.ArgumentParser, list[str]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for i, word in enumerate(args):
        for sub in subs:
            if word in sub.choices:
                return sub.choices[word], args[i + 1:]
    return parser, args


def flag_problems(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """Flags ``parser`` does not know, and values outside a flag's choices (placeholders aside)."""
    parser, args = _subparser(parser, args)
    known = _options(parser)
    problems = []
    for i, word in enumerate(args):
        if not word.startswith("-") or word in ("-", "--") or re.fullmatch(r"-\d[\d.]*", word):
            continue
        flag, eq, value = word.partition("=")
        action = known.get(flag)
        if action is None:
            problems.append(f"{flag} is not an option of {parser.prog}")
            continue
        if not eq:
            value = args[i + 1] if i + 1 < len(args) and not args[i + 1].startswith("--") else None
        choices = getattr(action, "choices", None)
        if choices and value is not None and not PLACEHOLDER.search(value) and value not in map(str, choices):
            problems.append(f"{flag} {value}: not one of {', '.join(map(str, choices))}")
    return problems


def makefile_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(encoding="utf-8"), flags=re.M))


def check(shown: Shown) -> list[str]:
    """What is wrong with one shown command: a program that does not exist, or flags its parser refuses."""
    program = resolve(shown.words)
    if program.kind == "missing":
        return [f"{program.name} is no console script of pyproject.toml [project.scripts]"]
    if program.kind == "shell":
        return [] if (ROOT / program.name).is_file() else [f"{program.name} does not exist"]
    if program.kind == "make":
        return [] if program.name in makefile_targets() else [f"the Makefile has no target {program.name}"]
    if program.kind == "other" or (program.kind == "module" and not is_ours(program.name)):
        return []
    if program.kind == "module":
        path = module_file(program.name)
        if path is None:
            return [f"missing module {program.name}"]
    else:
        path = ROOT / program.name
        if not path.is_file():
            return [f"missing script {program.name}"]
    flags = [a for a in program.args if a.startswith("-") and a not in ("-", "--")]
    if not takes_options(path.read_text(encoding="utf-8")):
        return [f"{program.name} takes no options, shown with {' '.join(flags)}"] if flags else []
    if not flags:
        return []
    first = tuple(program.args[:1]) if program.args and program.args[0].endswith((".yaml", ".yml")) \
        and (ROOT / program.args[0]).is_file() else ()
    try:
        parser = parser_of(program.kind, program.name, first)
    except Exception as err:  # a program whose main() fails before it parses: named, not a crash of the check
        return [f"{program.name}: its parser could not be read ({type(err).__name__}: {err})"]
    return flag_problems(parser, program.args)
