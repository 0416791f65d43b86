"""Every command is a console script (pyproject.toml) and ``python -m MODULE``; no module edits ``sys.path``."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
PACKAGES = ("adaptive_rag", "data_builders", "retrieval_adapt", "inference", "training")


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_each_console_script_names_a_cli_that_its_module_runs_as_main(name):
    module_name, func = SCRIPTS[name].split(":")
    module = importlib.import_module(module_name)
    assert callable(getattr(module, func))
    source = Path(module.__file__).read_text(encoding="utf-8")
    assert f'if __name__ == "__main__":\n    sys.exit({func}())' in source  # python -m runs the same function


def test_every_command_module_is_a_console_script():
    with_main = set()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if '__name__ == "__main__"' in path.read_text(encoding="utf-8"):
                with_main.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    with_main.discard("adaptive_rag.lm.cpu_dtype")  # a diagnostic print, not a command
    assert with_main == {target.split(":")[0] for target in SCRIPTS.values()}


def test_no_module_edits_sys_path():
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                    raise AssertionError(f"{path.relative_to(ROOT)}:{node.lineno} touches sys.path")
