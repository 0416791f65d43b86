"""Question sets that need the known/unknown distinction, and a corpus with near-duplicate distractors.

Written by the knowing-model build into ``sets/`` as canonical QA JSONL; the evaluation names them
``knowing-<set>`` (:data:`KNOWING_SETS`). Every set comes in an evaluation half (``knowing-<set>``) and a tuning
half (``knowing-<set>-tune``), split by the subject entity (docs/knowing_world.md).
"""

from __future__ import annotations

import os
import random
from dataclasses import replace
from pathlib import Path

from adaptive_rag.plumbing.errors import ConfigError
from adaptive_rag.plumbing.question_set import KNOWING_SETS
from adaptive_rag.plumbing.records import Passage, QAExample
from data_builders.knowing_world import KnowingWorld, replay_split
from data_builders.readers import write_passages_jsonl, write_qa_jsonl
from data_builders.world_entities import Entity
from data_builders.world_passages import render
from data_builders.world_questions import bridge, comparison

KNOWING_DIR_ENV = "ADAPTIVE_RAG_KNOWING_DIR"


def knowing_dir(seed: int) -> Path:
    """Where the knowing-model build of world ``seed`` lives: ``$ADAPTIVE_RAG_KNOWING_DIR`` (a folder holding
    ``seed<N>/``) or ``runs/knowing/seed<N>``."""
    return Path(os.environ.get(KNOWING_DIR_ENV, "runs/knowing")) / f"seed{seed}"


def set_path(name: str, seed: int) -> Path:
    return knowing_dir(seed) / "sets" / f"{name.removeprefix('knowing-')}.jsonl"


def is_knowing(name: str) -> bool:
    return name in KNOWING_SETS


def require_set(name: str, seed: int) -> Path:
    """The file of a knowing set, or a one-line error saying how to build it."""
    path = set_path(name, seed)
    if not path.is_file():
        raise ConfigError(f"dataset {name} is written by the knowing-model build, and {path} does not exist: run "
                          f"`python -m training.knowing_model --output_dir {knowing_dir(seed)} --seed {seed}` (or set "
                          f"{KNOWING_DIR_ENV} to the folder holding seed{seed}/)")
    return path


def _tagged(ex: QAExample, **meta) -> QAExample:
    return replace(ex, metadata={**ex.metadata, **meta})


def near_duplicates(kw: KnowingWorld, per_entity: int = 2) -> list[Passage]:
    """For each trained entity, passages on a namesake (its name plus one word) with another same-kind entity's
    facts: BM25 ranks them beside the true passage, so retrieving can mislead on a fact the model knows."""
    rng = random.Random(f"knowing:{kw.world.config.seed}:duplicates")
    core = [e for e in kw.world.entities if e.core]
    out = []
    for ent in core:
        if ent.pid not in kw.trained_pids:
            continue
        others = [e for e in core if e.kind == ent.kind and e.pid != ent.pid] or [ent]
        words = ("Jr.", "II") if ent.kind == "person" else ("II", "Nova")
        for word in words[:per_entity]:
            twin = Entity(f"knowing-p-dup-{len(out):05d}", ent.kind, f"{ent.name} {word}", rng.choice(others).attrs,
                          core=False)
            out.append(Passage(id=twin.pid, title=twin.name, text=render(twin, rng)))
    return out


def write_sets(kw: KnowingWorld, facts: list[dict], common: list[dict], out: Path,
               n_common: int | None = None) -> dict[str, int]:
    """Every set (both halves) and ``corpus.jsonl`` into ``out``; ``facts`` and ``common`` are the build's labels
    (facts.jsonl, common_knowledge.jsonl). Returns the number of questions per file."""
    out.mkdir(parents=True, exist_ok=True)
    seed = kw.world.config.seed
    rng = random.Random(f"knowing:{seed}:sets")
    by_key = {r["key"]: r for r in facts}
    passages = {p.id: p for p in kw.world.passages}
    core = [e for e in kw.world.entities if e.core]
    group = {r["pid"]: r["group"] for r in facts}
    sets: dict[str, list[QAExample]] = {name: [] for name in KNOWING_SETS}

    def add(name: str, ex: QAExample, pid: str) -> None:
        sets[f"knowing-{name}{'' if group[pid] == 'eval' else '-tune'}"].append(ex)

    single: dict[str, list[QAExample]] = {"known": [], "unknown": [], "trained": [], "untrained": []}
    for i, r in enumerate(facts):
        if r["design"] not in ("trained", "untrained"):
            continue
        ex = QAExample(id=f"knowing-q-single-{i:05d}", question=r["question"], answers=r["answers"],
                       gold_passages=[passages[r["pid"]]],
                       metadata={"source": "knowing", "hop_type": "single", "kind": "fictional", "entity": r["entity"],
                                 "relation": r["relation"], "label": r["label"], "design": r["design"]})
        add(f"single-{r['label']}", ex, r["pid"])
        single[r["design"]].append(ex)
    _adapt_mix(single, sets, group, facts, common, rng, seed, n_common)

    hops = {"known": "k", "unknown": "u"}
    for ex in bridge(core, passages, 100_000, rng):
        subject = next(e for e in core if e.name == ex.metadata["entity"])
        mid = next(e for e in core if e.name == ex.metadata["intermediate"])
        hop1, hop2 = (by_key.get(f"{e.pid}|{r}") for e, r in zip((subject, mid), ex.metadata["relations"]))
        if hop1 is None or hop2 is None:  # a build that labelled a sample of the facts
            continue
        first, second = hop1["label"], hop2["label"]
        order = hops[first] + hops[second]
        tagged = _tagged(replace(ex, id=ex.id.replace("world-q", "knowing-q")), hops=order,
                         unknown_hop_answer=None if order == "kk" else
                         (ex.answers[0] if second == "unknown" else mid.name))
        if order in ("ku", "uk"):
            add(f"bridge-{order}", tagged, subject.pid)
        sets.setdefault("_bridges", []).append(tagged)
    bridges = sets.pop("_bridges", [])
    mixed = [b for b in bridges if b.metadata["hops"] != "uu"]
    all_unknown = [b for b in bridges if b.metadata["hops"] == "uu"]
    rng.shuffle(all_unknown)
    n_unknown = max(10, *(sum(b.metadata["hops"] == h for b in bridges) for h in ("ku", "uk")))
    for ex in sorted(mixed + all_unknown[:n_unknown], key=lambda e: e.id):
        add("bridge", ex, next(e.pid for e in core if e.name == ex.metadata["entity"]))
    for ex in comparison(core, passages, 200, rng):
        a, b = (next(e for e in core if e.name == n) for n in ex.metadata["entities"])
        attr = ex.metadata["attribute"]
        if not all(f"{e.pid}|{attr}" in by_key for e in (a, b)):
            continue
        known = sum(by_key[f"{e.pid}|{attr}"]["label"] == "known" for e in (a, b))
        add("comparison", _tagged(replace(ex, id=ex.id.replace("world-q", "knowing-q")), n_known=known), a.pid)
    counts = {}
    for name, examples in sets.items():
        write_qa_jsonl(examples, out / f"{name.removeprefix('knowing-')}.jsonl")
        counts[name] = len(examples)
    corpus = kw.world.passages + near_duplicates(kw)
    write_passages_jsonl(corpus, out / "corpus.jsonl")
    counts["corpus_passages"] = len(corpus)
    return counts


def _adapt_mix(single: dict[str, list[QAExample]], sets: dict[str, list[QAExample]], group: dict[str, str],
               facts: list[dict], common: list[dict], rng: random.Random, seed: int,
               n_common: int | None = None) -> None:
    """ADAPT-LLM's sets: per half, every trained open fact, as many untrained ones, and that half's common
    knowledge (the replayed half tunes, the other evaluates), each with the knowing model's label."""
    pid_of = {r["entity"]: r["pid"] for r in facts}
    untrained = list(single["untrained"])
    rng.shuffle(untrained)
    for half, suffix in (("eval", ""), ("tune", "-tune")):
        trained = [ex for ex in single["trained"] if group[pid_of[ex.metadata["entity"]]] == half]
        others = [ex for ex in untrained if group[pid_of[ex.metadata["entity"]]] == half][:len(trained)]
        sets[f"knowing-adapt{suffix}"] += sorted(trained + others, key=lambda e: e.id)
    replayed, held = replay_split(seed, n_common)
    known_common = {r["id"]: "known" if r["knowing_correct"] else "unknown" for r in common}
    for suffix, examples in (("-tune", replayed), ("", held)):
        sets[f"knowing-adapt{suffix}"] += [_tagged(ex, label=known_common.get(ex.id, "unknown"))
                                          for ex in examples]
