"""The embedded world as ADAPT-LLM's default source: the question sets ``world-adapt-train`` and
``world-adapt-heldout`` (a split for evaluation) and seeded training samples. Fictional single-hop questions (a
small model cannot know them) and common-knowledge questions (it may) are split separately, so both sides keep the
mix."""

from __future__ import annotations

import random

from adaptive_rag.plumbing.records import QAExample
from data_builders.world import WorldConfig, build_world


def _group_key(ex: QAExample) -> str:
    # Paraphrases of one fact (same entity and relation) stay on one side of the split.
    meta = ex.metadata
    return f"{meta['entity']}|{meta['relation']}" if "entity" in meta and "relation" in meta else ex.id


def world_split(world_seed: int = 0, heldout_fraction: float = 0.2,
                split_seed: int = 0) -> tuple[list[QAExample], list[QAExample]]:
    """(train, held-out) questions of the embedded world: fictional single-hop + common knowledge, each kind
    split separately. Deterministic for the seeds."""
    world = build_world(WorldConfig(seed=world_seed))
    train: list[QAExample] = []
    heldout: list[QAExample] = []
    for name, examples in (("single", world.single_hop), ("common", world.common_knowledge)):
        groups = sorted({_group_key(ex) for ex in examples})
        random.Random(f"adapt-heldout:{split_seed}:{name}").shuffle(groups)
        held = set(groups[:round(len(groups) * heldout_fraction)])
        for ex in examples:
            (heldout if _group_key(ex) in held else train).append(ex)
    return train, heldout


def world_sample(train: list[QAExample], seed: int = 0, limit: int | None = None,
                 common_fraction: float | None = None) -> list[QAExample]:
    """A seeded sample of ``limit`` of the world's training questions (``train``, :func:`world_split`'s first part;
    all by default), with ``common_fraction`` of them common-knowledge when set (as far as there are enough of each
    kind)."""
    examples = list(train)
    rng = random.Random(f"adapt-source:{seed}")
    rng.shuffle(examples)
    total = limit or len(examples)
    if common_fraction is None:
        return examples[:total]
    common = [ex for ex in examples if ex.metadata.get("kind") == "common"]
    other = [ex for ex in examples if ex.metadata.get("kind") != "common"]
    n_common = min(len(common), round(total * common_fraction))
    picked = common[:n_common] + other[:total - n_common]
    rng.shuffle(picked)
    return picked
