"""The embedded offline world: the project's default corpus and questions for demos and tests.

A seeded generator of fictional people, places, organisations and works, each written out as one
Wikipedia-like passage, plus distractor entities that no question asks about and the hand-written
common-knowledge facts of :mod:`data_builders.common_knowledge`. A small model cannot know the
fictional facts (it must retrieve) but may know the common ones.

    python -m data_builders.world --output_dir data/world --world_seed 0
    python -m data_builders.world --output_dir data/world100k --world_seed 0 --scale 100000   # bigger corpus

Ids are stable for a seed: passages "world-p-00012" (fictional), "world-p-ck-0003" (common),
"world-p-x-000042" (scale_passages); questions "world-q-single-0003", "world-q-bridge-0001",
"world-q-comparison-0007", "world-q-common-0010".
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from adaptive_rag.plumbing.cli import OneLineArgumentParser
from adaptive_rag.plumbing.records import Passage, QAExample
from data_builders import world_questions
from data_builders.common_knowledge import common_knowledge_examples
from data_builders.readers import write_passages_jsonl, write_qa_jsonl
from data_builders.world_entities import INDUSTRY_SUFFIXES, Entity, WorldBuilder, occupation_plan
from data_builders.world_names import NameGen
from data_builders.world_passages import render

# Distractor kinds and their weights: mostly people and places, like an encyclopedia.
DISTRACTOR_KINDS = ("person", "city", "company", "university", "band", "book", "film", "album", "country")
DISTRACTOR_WEIGHTS = (35, 14, 14, 5, 5, 10, 9, 5, 3)


@dataclass
class WorldConfig:
    """Sizes of the world. Places split ~1:5 into countries and cities; organisations ~25% universities,
    40% companies, 35% bands; works ~40% books, 35% films, 25% albums."""

    seed: int = 0
    n_people: int = 100
    n_places: int = 50
    n_orgs: int = 60
    n_works: int = 90
    n_distractors: int = 80  # entities no question asks about: retrieval must tell them apart
    n_single: int = 300
    n_bridge: int = 100
    n_comparison: int = 50
    include_common: bool = True  # add the common-knowledge passages and questions

    def __post_init__(self) -> None:
        # Every relation needs a target: a writer, a director, a singer, a founder, a city, ...
        minimums = {"n_people": 5, "n_places": 2, "n_orgs": 3, "n_works": 3}
        for name, low in minimums.items():
            if getattr(self, name) < low:
                raise ValueError(f"WorldConfig.{name} must be >= {low}, got {getattr(self, name)}")
        for name in ("n_distractors", "n_single", "n_bridge", "n_comparison"):
            if getattr(self, name) < 0:
                raise ValueError(f"WorldConfig.{name} must be >= 0, got {getattr(self, name)}")


@dataclass
class World:
    """Passages (fictional, distractor and common), the questions, and the entities behind them."""

    config: WorldConfig
    passages: list[Passage]
    single_hop: list[QAExample]
    two_hop: list[QAExample]
    common_knowledge: list[QAExample]
    entities: list[Entity] = field(repr=False, default_factory=list)
    awards: list[str] = field(repr=False, default_factory=list)


def _rng(seed: int, purpose: str) -> random.Random:
    """One independent stream per purpose, so changing e.g. question counts never changes the passages."""
    return random.Random(f"world:{seed}:{purpose}")


def _split(total: int, shares: tuple[float, ...]) -> list[int]:
    """Split ``total`` into parts of at least 1 by ``shares``; the last part takes the remainder."""
    parts = [max(1, round(total * s)) for s in shares[:-1]]
    return parts + [max(1, total - sum(parts))]


def _build_core(b: WorldBuilder, cfg: WorldConfig) -> None:
    n_countries = max(1, cfg.n_places // 6)
    countries = [b.country(True) for _ in range(n_countries)]
    for i in range(cfg.n_places - n_countries):
        b.city(True, countries[i] if i < n_countries else None)  # the first city of a country is its capital
    n_univ, n_comp, n_bands = _split(cfg.n_orgs, (0.25, 0.4, 0.35))
    for _ in range(n_univ):
        b.university(True)
    for occupation in occupation_plan(b.rng, cfg.n_people):
        b.person(True, occupation)
    industries = ["music", "publishing"]  # albums need labels and books publishers
    for i in range(n_comp):
        b.company(True, industries[i] if i < len(industries) else b.rng.choice(list(INDUSTRY_SUFFIXES)))
    for _ in range(n_bands):
        b.band(True)
    n_books, n_films, n_albums = _split(cfg.n_works, (0.4, 0.35, 0.25))
    for make, count in ((b.book, n_books), (b.film, n_films), (b.album, n_albums)):
        for _ in range(count):
            make(True)


def add_distractor(b: WorldBuilder) -> None:
    """One distractor entity (two for a country: it gets its capital at once, so no one edits it later)."""
    kind = b.rng.choices(DISTRACTOR_KINDS, DISTRACTOR_WEIGHTS)[0]
    if kind == "country":
        b.city(False, b.country(False))
    else:
        getattr(b, kind)(False)


def _render_all(entities: list[Entity], rng: random.Random, mention_founded: bool = True) -> list[Passage]:
    """Passages in entity order. A person's passage names the companies they founded; a core
    person's only the core ones, so that distractors never change a core passage."""
    founded: dict[str, list[Entity]] = {}
    for ent in entities:
        if ent.kind == "company" and mention_founded:
            founder = ent.attrs["founder"]
            if ent.core or not founder.core:
                founded.setdefault(founder.pid, []).append(ent)
    return [Passage(id=e.pid, title=e.name, text=render(e, rng, founded.get(e.pid))) for e in entities]


def build_world(cfg: WorldConfig | None = None) -> World:
    """Build the whole world for ``cfg`` (defaults: ~540 passages, 300 single-hop, 150 two-hop, 168 common)."""
    cfg = cfg or WorldConfig()
    b = WorldBuilder(_rng(cfg.seed, "entities"), NameGen(_rng(cfg.seed, "names")), "world-p-{:05d}")
    _build_core(b, cfg)
    n_core = len(b.entities)
    while len(b.entities) - n_core < cfg.n_distractors:
        add_distractor(b)
    passages = _render_all(b.entities, _rng(cfg.seed, "text"))
    by_id = {p.id: p for p in passages}
    core = b.entities[:n_core]
    qrng = _rng(cfg.seed, "questions")
    single = world_questions.single_hop(core, by_id, cfg.n_single, qrng)
    two_hop = (world_questions.bridge(core, by_id, cfg.n_bridge, qrng)
               + world_questions.comparison(core, by_id, cfg.n_comparison, qrng))
    common = common_knowledge_examples() if cfg.include_common else []
    passages += [ex.gold_passages[0] for ex in common]
    return World(cfg, passages, single, two_hop, common, b.entities, b.awards)


def scale_passages(world: World, n: int) -> list[Passage]:
    """The world's passages followed by fresh distractor passages: exactly ``n`` (or the world's own, if more).

    Deterministic for (seed, n), and a smaller ``n`` gives a prefix of a larger one. New names are
    only required to be unique as full names (a 100k world cannot keep every token distinct).
    """
    out = list(world.passages)
    if len(out) >= n:
        return out
    rng = _rng(world.config.seed, "scale")
    names = NameGen(rng, strict=False, used={e.name.lower() for e in world.entities})
    b = WorldBuilder(rng, names, "world-p-x-{:06d}", awards=world.awards)
    b.adopt(world.entities)
    while len(out) + len(b.entities) < n:
        add_distractor(b)
    # No "founded" mentions: a company added for a larger n would change an earlier passage.
    out += _render_all(b.entities, _rng(world.config.seed, "scale-text"), mention_founded=False)
    return out[:n]  # a distractor country comes with its capital: one passage too many, at most


def write_world(world: World, out_dir: str | Path, passages: list[Passage] | None = None) -> Path:
    """Write corpus.jsonl, single_hop.jsonl, two_hop.jsonl, common_knowledge.jsonl and world_config.json.

    ``passages`` replaces the corpus (e.g. the output of :func:`scale_passages`).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    write_passages_jsonl(passages or world.passages, out / "corpus.jsonl")
    for name, examples in (("single_hop", world.single_hop), ("two_hop", world.two_hop),
                           ("common_knowledge", world.common_knowledge)):
        write_qa_jsonl(examples, out / f"{name}.jsonl")
    (out / "world_config.json").write_text(json.dumps(asdict(world.config), indent=2) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = OneLineArgumentParser(prog="python -m data_builders.world",
                                   description="Write the embedded offline world as canonical JSONL.")
    parser.add_argument("--output_dir", "--out", required=True, help="output folder")
    parser.add_argument("--world_seed", "--seed", type=int, default=0,
                        help="the world's seed (the other commands' --world_seed)")
    parser.add_argument("--scale", type=int, default=0, help="grow the corpus to at least this many passages")
    args = parser.parse_args(argv)
    world = build_world(WorldConfig(seed=args.world_seed))
    corpus = scale_passages(world, args.scale) if args.scale else world.passages
    out = write_world(world, args.output_dir, corpus)
    print(f"wrote {len(corpus)} passages, {len(world.single_hop)} single-hop, {len(world.two_hop)} two-hop, "
          f"{len(world.common_knowledge)} common-knowledge questions to {out}")


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    main()
    return 0


if __name__ == "__main__":
    sys.exit(cli())
