"""The layers only point down (README: Layout). A module may import its own layer or a lower one, never a higher one,
and project imports sit at the top of the file: the graph one reads is the graph that runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("adaptive_rag", "inference", "data_builders", "retrieval_adapt", "training")

# The layers are the top-level folders, lowest first (README: Layout). Inside a folder, its sub-packages have an
# order of their own: a sub-package imports those before it, never one after it.
LAYERS = {
    "adaptive_rag": 0,  # foundation: plumbing (records, config, metrics, logs, cards), the model side (lm)
    "data_builders": 1,  # readers, the embedded world, corpora, Algorithm 1's data
    "retrieval_adapt": 2,  # indexes, encoders, re-rankers, the distillation loss and loop
    "inference": 3,  # the engine and its plug-ins, Iter-RetGen, the gate, the commands over them
    "training": 4,  # jobs: training, and the builders and commands that run a model over a retriever
}
SUB_ORDER = {
    "adaptive_rag": ("plumbing", "lm"),
    "inference": ("dynamic_rag", "iter_retgen", "adapt_gate", "search_agent", "commands"),
}
NAMES = {0: "foundation", 1: "data", 2: "retrieval", 3: "inference", 4: "jobs"}
# Lazy imports of project modules that are allowed, and why.
LAZY_OK: dict[tuple[str, str], str] = {
    ("retrieval_adapt.build_index", "retrieval_adapt.dense"): "torch + faiss, for --kind dense only",
    ("retrieval_adapt.build_index", "retrieval_adapt.encoders"): "torch, for --kind dense only",
    ("retrieval_adapt.loading", "retrieval_adapt.dense"): "torch + faiss; a BM25 index needs neither",
    # torch loads where a model runs, not when a config, a check or --help is read
    ("adaptive_rag.lm.generation", "adaptive_rag.lm.decoder"): "torch, only when text is generated",
    ("adaptive_rag.lm.generation", "adaptive_rag.lm.models"): "torch + transformers, only to load a model by name",
    ("inference.commands.eval_checks", "adaptive_rag.lm.models"): "torch + transformers: checks run before any load",
    ("inference.commands.eval_checks", "retrieval_adapt.dense"): "torch + faiss, for a dense index's query encoder",
    ("training.grpo", "training.grpo_job"): "torch + trl + peft: after the arguments parse and are checked",
    # arag-reproduce --list and --dry_run print the steps without torch; the report reads the runs with it
    ("inference.commands.reproduce_report", "inference.commands.report"): "torch, only when a report is written",
    ("inference.commands.reproduce_report", "inference.adapt_gate.gate"): "torch, only for the ADAPT-LLM table",
    ("inference.commands.reproduce_report", "inference.adapt_gate.gate_eval"): "torch, only for the ADAPT-LLM table",
    ("inference.commands.reproduce_report", "inference.commands.eval_folder"): "torch, only for the ADAPT-LLM table",
    ("training.adapt_llm", "training.adapt_llm_eval"): "torch: after the arguments parse and are checked",
    ("training.adapt_llm", "training.lora_sft"): "torch + trl + peft: after the arguments parse and are checked",
    ("training.search_sft", "adaptive_rag.lm.models"): "torch + transformers: after the arguments are checked",
    ("training.search_sft", "inference.search_agent.loop"): "torch: after the arguments parse and are checked",
    ("training.search_sft", "training.lora_sft"): "torch + trl + peft: after the arguments parse and are checked",
    ("training.search_sft", "training.search_warmstart"): "torch (the gate's passage format): after the checks",
    # the report renders recorded runs: no torch, and matplotlib only when figures are drawn
    ("inference.commands.report", "inference.commands.knobs"): "torch (method registry), only for sweep summaries",
    ("inference.commands.report", "inference.commands.popularity_threshold"): "torch, only for gate popularity rows",
    ("inference.commands.report", "inference.commands"): "matplotlib (report_figures), only when figures are drawn",
    ("inference.commands.report", "inference.commands.report_figures"): "matplotlib, only when figures are drawn",
}


def layer(module: str) -> int:
    return LAYERS[module.split(".")[0]]


def sub_rank(module: str) -> int | None:
    """The sub-package's place in its folder's order (None: a folder without one, or a module at its top)."""
    parts = module.split(".")
    order = SUB_ORDER.get(parts[0], ())
    return order.index(parts[1]) if len(parts) > 1 and parts[1] in order else None


def modules() -> list[tuple[str, Path]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            out.append((name, path))
    return out


def project_imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at top level) for each import of a project module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = {id(n) for n in tree.body}
    # imports guarded by `if TYPE_CHECKING:` or `try:` at the top level count as top level
    for node in tree.body:
        if isinstance(node, (ast.If, ast.Try)):
            top |= {id(n) for n in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            names = [n for n in names if _is_module(n)] or [node.module]
        else:
            continue
        for name in names:
            if name.split(".")[0] in PACKAGES:
                found.append((name, node.lineno, id(node) in top))
    return found


def _is_module(name: str) -> bool:
    p = ROOT / Path(*name.split("."))
    return p.with_suffix(".py").is_file() or (p / "__init__.py").is_file()


def test_no_module_imports_a_higher_layer():
    upward = []
    for name, path in modules():
        for target, line, _ in project_imports(path):
            if layer(target) > layer(name):
                upward.append(f"{path.relative_to(ROOT)}:{line}: {name} ({NAMES[layer(name)]}) imports {target} "
                              f"({NAMES[layer(target)]})")
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)


def test_project_imports_sit_at_the_top():
    lazy = []
    for name, path in modules():
        for target, line, at_top in project_imports(path):
            if not at_top and (name, target) not in LAZY_OK:
                lazy.append(f"{path.relative_to(ROOT)}:{line}: {target}")
    assert not lazy, "project imports inside functions (move them to the top):\n" + "\n".join(lazy)


def test_sub_packages_only_point_down_their_folders_order():
    upward = []
    for name, path in modules():
        for target, line, _ in project_imports(path):
            mine, theirs = sub_rank(name), sub_rank(target)
            if layer(name) == layer(target) and mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{path.relative_to(ROOT)}:{line}: {name} imports {target}")
    assert not upward, "imports that point up inside a folder:\n" + "\n".join(upward)


def import_cycles() -> list[list[str]]:
    """Cycles among modules (top-level and lazy imports alike), each as the list of modules around it."""
    graph: dict[str, set[str]] = {}
    for name, path in modules():
        graph[name] = {t for t, _, _ in project_imports(path) if t != name and t in dict(modules())}
    cycles, state = [], {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return cycles


def test_no_module_import_cycle():
    cycles = import_cycles()
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_foundation_imports_nothing_else_in_the_project():
    for name, path in modules():
        if layer(name) == 0:
            assert all(layer(t) == 0 for t, _, _ in project_imports(path)), name


def test_the_walk_sees_an_upward_import(tmp_path):
    """The check can fail: an import of the engine from the foundation is reported."""
    src = tmp_path / "m.py"
    src.write_text("from inference.dynamic_rag.engine import DynamicRAGEngine\n")
    (target, _, at_top), = project_imports(src)
    assert target == "inference.dynamic_rag.engine" and at_top
    assert layer(target) > layer("adaptive_rag.plumbing.metrics")


@pytest.mark.parametrize("module,expected", [("adaptive_rag.plumbing.config", 0), ("data_builders.readers", 1),
                                             ("training.distill_set", 4), ("inference.dynamic_rag.engine", 3),
                                             ("training.lora_sft", 4)])
def test_layer_table(module, expected):
    assert layer(module) == expected


def test_the_cycle_walk_sees_a_cycle(monkeypatch, tmp_path):
    """The check can fail: two modules that import each other are reported."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("from data_builders.b import x\n")
    b.write_text("from data_builders.a import y\n")
    monkeypatch.setattr(__import__(__name__), "modules", lambda: [("data_builders.a", a), ("data_builders.b", b)])
    monkeypatch.setattr(__import__(__name__), "_is_module", lambda name: True)
    assert import_cycles() == [["data_builders.a", "data_builders.b", "data_builders.a"]]
