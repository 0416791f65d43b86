"""Every repository path README names exists, or an earlier README command builds it: ``data/NAME/...`` comes
from an earlier ``data_builders.download`` of NAME into ``data``, ``runs/...`` from an earlier command that writes
there. The paths are read from README when the test runs, so it follows README as it changes."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_PATH = ROOT / "README.md"
# a relative path with at least one slash (globs allowed), inside code spans and fenced blocks
PATH = re.compile(r"(?<![\w./~-])((?:[\w.*-]+/)+[\w.*-]*)")
# the flags (and YAML keys) that name what a command writes, old spellings included
OUTPUT = r"--out|--output_dir|--output_file|--data_dir|-o|--output|--json"
OUTPUT_FLAGS = re.compile(rf"(?:{OUTPUT})[\s=]+([\w./-]+)")
YAML_OUTPUTS = re.compile(r"^(?:out|output_dir|data_dir):\s*([\w./-]+)", flags=re.M)
# what `training/adapt_llm.py` runs without arguments (its DEMO_CONFIG)
DEFAULT_YAML = {"training/adapt_llm.py": "training/configs/adapt_llm_demo_cpu.yaml"}
DOWNLOAD = re.compile(r"data_builders\.download ((?:[\w-]+ )+)--out(?:put_dir)? (\S+)")


def _code(text: str) -> list[tuple[int, str]]:
    """(position, text) of every code span and fenced block."""
    spans = [(m.start(), m.group(1)) for m in re.finditer(r"```\w*\n(.*?)```", text, flags=re.S)]
    outside = re.sub(r"```\w*\n.*?```", lambda m: " " * len(m.group(0)), text, flags=re.S)
    spans += [(m.start(), m.group(1)) for m in re.finditer(r"`([^`]+)`", outside)]
    return sorted(spans)


def readme_paths(text: str) -> list[tuple[int, str]]:
    top = {p.name for p in ROOT.iterdir()} | {"runs", "data"}
    found = []
    for pos, code in _code(text):
        for m in PATH.finditer(code):
            path = m.group(1).rstrip(".")
            target = re.search(rf"(?:{OUTPUT}|output_dir:|out:)[\s=]+$", code[:m.start()])
            if path.split("/")[0] in top and "..." not in path and not target:  # a target is built right there
                found.append((pos + m.start(), path))
    return found


def built_before(text: str, pos: int, path: str) -> bool:
    earlier = text[:pos]
    if path.startswith("data/"):
        name = path.split("/")[1]
        return any(out.rstrip("/") == "data" and (name in names.split() or "all" in names.split())
                   for names, out in DOWNLOAD.findall(earlier)) or path.rstrip("/") == "data"
    outputs = [o.rstrip("/") for o in OUTPUT_FLAGS.findall(earlier) + YAML_OUTPUTS.findall(earlier)]
    named = set(re.findall(r"[\w/.-]+\.ya?ml", earlier)) | {y for s, y in DEFAULT_YAML.items() if s in earlier}
    for yaml_path in named:  # the folders a recipe README ran writes (its output fields)
        if (ROOT / yaml_path).is_file():
            outputs += YAML_OUTPUTS.findall((ROOT / yaml_path).read_text(encoding="utf-8"))
    parts = path.rstrip("/").split("/")
    prefixes = {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}
    # runs/<folder>/...: the folder itself is what a command names; a bare runs/x/ mention is a folder name too
    return any(o in prefixes or o.startswith(path.rstrip("/") + "/") for o in outputs)


def missing_paths(text: str) -> list[str]:
    missing = []
    for pos, path in readme_paths(text):
        if path.startswith(("runs/", "data/")):
            # a forward reference is fine when the text says so ("... that the commands under X build")
            announced = bool(re.search(r"\bbuilds?\b", text[pos:pos + 300])) and built_before(text, len(text), path)
            if not built_before(text, pos, path) and not announced:
                missing.append(f"{path} (nothing earlier in README builds it)")
        elif not (any(ROOT.glob(path)) if "*" in path or "<" in path else (ROOT / path).exists()):
            missing.append(path)
    return sorted(set(missing))


def test_every_path_readme_names_exists_or_is_built_earlier():
    text = README_PATH.read_text(encoding="utf-8")
    assert len(readme_paths(text)) > 20  # the reader finds README's paths at all
    assert missing_paths(text) == []


def test_the_check_catches_a_missing_file_and_a_path_used_before_it_is_built():
    text = ("`inference/no_such_module.py` and `docs/papers.md`\n```bash\n"
            "python -m x --index data/hotpotqa/dev.json\n"
            "python -m data_builders.download hotpotqa --out data\n"
            "python -m y data/hotpotqa/dev.json data/squad/dev.json --out runs/a/b\n"
            "python -m z runs/a/b/c.json runs/q/r/s.json\n```\n")
    assert missing_paths(text) == [
        "data/hotpotqa/dev.json (nothing earlier in README builds it)",
        "data/squad/dev.json (nothing earlier in README builds it)",
        "inference/no_such_module.py",
        "runs/q/r/s.json (nothing earlier in README builds it)",
    ]


def linked_pages(text: str, base: str = "") -> set[str]:
    """The docs pages a text names: in code spans (`docs/x.md`) and as Markdown links ([..](docs/x.md)); ``base``
    is the linking page's folder (a page in docs/ links its neighbours as x.md)."""
    named = set(re.findall(r"`(docs/[\w.-]+\.md)`", text))
    for target in re.findall(r"\]\(([\w./-]+\.md)(?:#[\w-]*)?\)", text):
        path = (Path(base) / target).as_posix() if base else target
        named.add(re.sub(r"^docs/\.\./", "", path))
    return named


def test_readme_stands_alone():
    """A user's clone has no development data folder beside it and no design notes outside the repository."""
    text = README_PATH.read_text(encoding="utf-8")
    assert "../shared" not in text and "SPEC.md" not in text and "shared/data" not in text
    pages = linked_pages(text)
    missing = sorted(doc for doc in pages if not (ROOT / doc).is_file())
    assert missing == []
    assert {"docs/data.md", "docs/papers.md", "docs/install.md", "docs/reproduce.md"} <= pages


def test_readme_links_every_docs_page():
    """Every page of docs/ is reachable from README's table of pages."""
    pages = {f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    assert sorted(pages - linked_pages(README_PATH.read_text(encoding="utf-8"))) == []


def test_docs_links_resolve():
    for doc in sorted((ROOT / "docs").glob("*.md")):
        links = linked_pages(doc.read_text(encoding="utf-8"), base="docs")
        missing = sorted(p for p in links if p.endswith(".md") and not (ROOT / p).is_file())
        assert missing == [], (doc.name, missing)


def test_docs_name_only_files_that_exist():
    for doc in sorted((ROOT / "docs").glob("*.md")):
        text = doc.read_text(encoding="utf-8")
        missing = [p for p in missing_paths(text) if not p.startswith(("runs/", "data/"))]
        assert missing == [], (doc.name, missing)
