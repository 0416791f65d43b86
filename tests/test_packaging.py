"""What a user's install gets: one faiss build, bounded versions of the libraries whose internals the code uses,
the tested versions inside those bounds, and the licence and citation files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; the checks are the same on any version

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def _reqs(items: list[str]) -> dict[str, Requirement]:
    return {Requirement(r).name.lower(): Requirement(r) for r in items}


def test_exactly_one_faiss_build_per_extra():
    base = _reqs(PROJECT["dependencies"])
    extras = {name: _reqs(items) for name, items in PROJECT["optional-dependencies"].items()}
    assert not any(name.startswith("faiss") for name in base)  # else the gpu extra would add a second `faiss`
    assert [n for n in extras["cpu"] if n.startswith("faiss")] == ["faiss-cpu"]
    assert [n for n in extras["gpu"] if n.startswith("faiss")] == ["faiss-gpu-cu12"]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    import shutil
    import subprocess

    if shutil.which("make"):  # what `make setup` would run here (this machine has no NVIDIA driver)
        dry = subprocess.run(["make", "-n", "setup", "PYTHON=python"], cwd=ROOT, capture_output=True, text=True)
        installs = [line for line in dry.stdout.splitlines() if "pip install -e" in line]
        assert installs == ['python -m pip install -e ".[dev,cpu]"'] or shutil.which("nvidia-smi"), installs
    assert "--extra-index-url $(TORCH_CPU_INDEX)" in makefile and "download.pytorch.org/whl/cpu" in makefile


def test_touched_libraries_are_bounded_and_the_tested_versions_fit():
    base = _reqs(PROJECT["dependencies"])
    for name in ("transformers", "trl", "peft"):
        assert any(spec.operator == "<" for spec in base[name].specifier), name
    pins = {}
    for line in (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.lower()] = version
    for name, req in base.items():
        if name in pins:
            assert req.specifier.contains(pins[name], prereleases=True), (name, pins[name], str(req.specifier))
    assert {"transformers", "trl", "peft", "torch", "faiss-cpu"} <= set(pins)


def test_licence_citation_version_and_changelog():
    assert "MIT License" in (ROOT / "LICENSE").read_text(encoding="utf-8")
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert citation["version"] == PROJECT["version"] and citation["license"] == "MIT"
    titles = " ".join(r["title"] for r in citation["references"])
    assert all(word in titles for word in ("DRAGIN", "Iterative Retrieval-Generation Synergy", "When to Retrieve"))
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## {re.escape(PROJECT['version'])} ", changelog, flags=re.M)
