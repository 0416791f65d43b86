"""The knowing world's facts, split and wordings (docs/knowing_world.md, pre-registered).

A *fact* is (core entity, relation). A seeded, kind-stratified sample of core entities is *trained* (the knowing
model reads their passages and facts); the rest is *untrained*. Only *open* relations (many possible answers, none
written in the subject's name) enter the known / unknown evaluation sets. Every fact has the world's question
templates plus :data:`EXTRA_WORDINGS`; one world template per fact is the never-trained held-out wording.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from data_builders.common_knowledge import common_knowledge_examples
from data_builders.world import World, WorldConfig, build_world
from data_builders.world_entities import Entity
from data_builders.world_questions import SINGLE_TEMPLATES, answers_for

OPEN_RELATIONS = frozenset({
    "person.birth_year", "person.death_year", "person.birthplace", "city.population", "city.founded", "city.river",
    "university.founded", "university.students", "company.founded", "company.hq", "country.independence_year",
    "band.origin", "book.author", "book.year", "film.year", "film.setting", "album.artist", "album.year"})

# Two more question wordings per relation; "{x}" is the subject's name. Used for training only.
EXTRA_WORDINGS: dict[str, tuple[str, str]] = {
    "person.birth_year": ("{x} was born in what year?", "Tell me the year of {x}'s birth."),
    "person.death_year": ("{x} died in what year?", "What year did {x} pass away?"),
    "person.birthplace": ("{x} was born in which city?", "Name the city where {x} was born."),
    "person.occupation": ("{x} worked as what?", "What was {x}'s job?"),
    "person.university": ("{x} was educated at which university?", "Which university did {x} attend?"),
    "person.award": ("{x} won which award?", "Name the prize given to {x}."),
    "city.country": ("{x} lies in which country?", "Which country is {x} in?"),
    "city.population": ("{x} has how many inhabitants?", "Give the population of {x}."),
    "city.founded": ("{x} was founded in what year?", "What is the founding year of the city of {x}?"),
    "city.river": ("{x} lies on which river?", "Name the river that runs through {x}."),
    "country.capital": ("Name the capital city of {x}.", "{x} has which city as its capital?"),
    "country.language": ("What language is official in {x}?", "{x} has which official language?"),
    "country.currency": ("{x} uses which currency?", "Name the currency of {x}."),
    "country.independence_year": ("{x} became independent in what year?", "What year did {x} win independence?"),
    "university.city": ("{x} is located in which city?", "Name the city where {x} is."),
    "university.founded": ("{x} was founded in what year?", "What is the founding year of {x}?"),
    "university.students": ("{x} enrols how many students?", "What is the student count of {x}?"),
    "company.founder": ("{x} was founded by whom?", "Name the founder of {x}."),
    "company.founded": ("{x} was founded in what year?", "What is the founding year of {x}?"),
    "company.hq": ("{x} has its headquarters in which city?", "Name the city where {x} is headquartered."),
    "company.industry": ("{x} works in which industry?", "Name the industry of {x}."),
    "band.formed": ("{x} was formed in what year?", "What year did the band {x} form?"),
    "band.origin": ("{x} is a band from which city?", "Name the home city of the band {x}."),
    "band.genre": ("{x} plays which genre?", "Name the musical genre of {x}."),
    "band.singer": ("{x} is fronted by whom?", "Name the lead singer of {x}."),
    "book.author": ("{x} was written by whom?", "Name the author of {x}."),
    "book.year": ("{x} was published in what year?", "What year did the novel {x} come out?"),
    "book.genre": ("{x} is what kind of novel?", "Name the genre of the novel {x}."),
    "book.publisher": ("{x} was published by which company?", "Name the publisher of {x}."),
    "film.director": ("{x} was directed by whom?", "Name the director of {x}."),
    "film.year": ("{x} was released in what year?", "What year did the film {x} premiere?"),
    "film.genre": ("{x} is what kind of film?", "Name the genre of the film {x}."),
    "film.setting": ("{x} is set in which city?", "Name the city where the film {x} is set."),
    "album.artist": ("{x} was recorded by which band?", "Name the band behind the album {x}."),
    "album.year": ("{x} was released in what year?", "What year did the album {x} come out?"),
    "album.label": ("{x} came out on which label?", "Name the record label of {x}."),
    "album.genre": ("{x} is what kind of album?", "Name the musical genre of the album {x}."),
}
# Two statements per relation; "{x}" the subject, "{a}" the canonical answer.
STATEMENTS: dict[str, tuple[str, str]] = {
    "person.birth_year": ("{x} was born in {a}.", "The year of {x}'s birth is {a}."),
    "person.death_year": ("{x} died in {a}.", "{x} passed away in {a}."),
    "person.birthplace": ("{x} was born in the city of {a}.", "{x}'s birthplace is {a}."),
    "person.occupation": ("{x} is known as a {a}.", "By profession, {x} is a {a}."),
    "person.university": ("{x} studied at {a}.", "{x} is a graduate of {a}."),
    "person.award": ("{x} received the {a}.", "{x} was awarded the {a}."),
    "city.country": ("{x} is a city in {a}.", "The city of {x} lies in {a}."),
    "city.population": ("{x} has a population of {a}.", "About {a} people live in {x}."),
    "city.founded": ("{x} was founded in {a}.", "The city of {x} dates from {a}."),
    "city.river": ("The {a} flows through {x}.", "{x} lies on the {a}."),
    "country.capital": ("The capital of {x} is {a}.", "{a} is the capital city of {x}."),
    "country.language": ("The official language of {x} is {a}.", "People in {x} officially speak {a}."),
    "country.currency": ("The currency of {x} is the {a}.", "{x} pays in the {a}."),
    "country.independence_year": ("{x} became independent in {a}.", "{x} gained independence in {a}."),
    "university.city": ("{x} is in the city of {a}.", "{x} is located in {a}."),
    "university.founded": ("{x} was founded in {a}.", "{x} was established in {a}."),
    "university.students": ("{x} has {a} students.", "About {a} students study at {x}."),
    "company.founder": ("{x} was founded by {a}.", "{a} is the founder of {x}."),
    "company.founded": ("{x} was founded in {a}.", "{x} has existed since {a}."),
    "company.hq": ("{x} is headquartered in {a}.", "{x} has its head office in {a}."),
    "company.industry": ("{x} operates in the {a} industry.", "{x} is a {a} company."),
    "band.formed": ("{x} was formed in {a}.", "The band {x} got together in {a}."),
    "band.origin": ("{x} comes from {a}.", "The band {x} was formed in the city of {a}."),
    "band.genre": ("{x} plays {a}.", "The music of {x} is {a}."),
    "band.singer": ("The lead singer of {x} is {a}.", "{a} fronts the band {x}."),
    "book.author": ("{x} was written by {a}.", "{a} is the author of {x}."),
    "book.year": ("{x} was first published in {a}.", "The novel {x} came out in {a}."),
    "book.genre": ("{x} is a {a} novel.", "The novel {x} belongs to the {a} genre."),
    "book.publisher": ("{x} was published by {a}.", "{a} published the novel {x}."),
    "film.director": ("{x} was directed by {a}.", "{a} directed the film {x}."),
    "film.year": ("{x} was released in {a}.", "The film {x} came out in {a}."),
    "film.genre": ("{x} is a {a} film.", "The film {x} is a {a}."),
    "film.setting": ("{x} is set in {a}.", "The story of the film {x} takes place in {a}."),
    "album.artist": ("{x} was recorded by {a}.", "{a} released the album {x}."),
    "album.year": ("{x} was released in {a}.", "The album {x} came out in {a}."),
    "album.label": ("{x} was released on the {a} label.", "{a} put out the album {x}."),
    "album.genre": ("{x} is a {a} album.", "The album {x} is {a}."),
}


@dataclass
class Fact:
    """One (entity, relation) with its wordings; ``design`` is ``trained``, ``untrained``, ``guessable`` (a
    non-open relation) or ``leaked`` (an untrained fact a trained passage states)."""

    entity: Entity
    relation: str
    answers: list[str]
    heldout_wording: str
    train_wordings: list[str]
    trained: bool
    design: str
    group: str = "tune"  # "tune" (thresholds, ADAPT training) or "eval" (reported numbers), by entity

    @property
    def key(self) -> str:
        return f"{self.entity.pid}|{self.relation}"

    @property
    def question(self) -> str:
        return self.heldout_wording.format(x=self.entity.name)


@dataclass
class KnowingWorld:
    world: World
    trained_pids: set[str]
    facts: list[Fact] = field(repr=False)

    def fact(self, pid: str, relation: str) -> Fact | None:
        return self._index.get(f"{pid}|{relation}")

    def __post_init__(self) -> None:
        self._index = {f.key: f for f in self.facts}


def relation_key(ent: Entity, relation: str) -> str:
    return f"{ent.kind}.{relation}"


def stratified_sample(core: list[Entity], n: int, rng: random.Random) -> list[Entity]:
    """``n`` entities (about), each kind by its share of ``core`` and at least one of every kind."""
    kinds: dict[str, list[Entity]] = {}
    for ent in core:
        kinds.setdefault(ent.kind, []).append(ent)
    out: list[Entity] = []
    for kind in sorted(kinds):
        pool = list(kinds[kind])
        rng.shuffle(pool)
        out += pool[:max(1, round(n * len(pool) / len(core)))]
    return out


def build_knowing_world(seed: int = 0, n_trained: int = 50, world_config: WorldConfig | None = None) -> KnowingWorld:
    """The world of ``seed`` (or ``world_config``), its trained sample and every core fact with its wordings."""
    if n_trained < 1:
        raise ValueError(f"n_trained must be >= 1, got {n_trained}")
    world = build_world(world_config or WorldConfig(seed=seed))
    seed = world.config.seed
    core = [e for e in world.entities if e.core]
    trained = {e.pid for e in stratified_sample(core, n_trained, random.Random(f"knowing:{seed}:split"))}
    texts = [p.text.lower() for p in world.passages if p.id in trained]
    eval_rng = random.Random(f"knowing:{seed}:eval")
    groups = {e.pid: ("eval" if eval_rng.random() < 0.5 else "tune") for e in core}
    facts = []
    for ent in core:
        for relation, templates in SINGLE_TEMPLATES[ent.kind].items():
            if ent.attrs.get(relation) is None:
                continue
            rkey = relation_key(ent, relation)
            answers = answers_for(ent, relation)
            held = random.Random(f"knowing:{seed}:heldout:{ent.name}:{relation}").choice(templates)
            wordings = [t for t in templates if t != held] + list(EXTRA_WORDINGS[rkey])
            is_trained = ent.pid in trained
            if rkey not in OPEN_RELATIONS:
                design = "guessable"
            elif is_trained:
                design = "trained"
            elif any(ent.name.lower() in t and answers[0].lower() in t for t in texts):
                design = "leaked"
            else:
                design = "untrained"
            facts.append(Fact(ent, relation, answers, held, wordings, is_trained, design, groups[ent.pid]))
    return KnowingWorld(world, trained, facts)


def statements(fact: Fact) -> list[str]:
    return [s.format(x=fact.entity.name, a=fact.answers[0]) for s in STATEMENTS[relation_key(fact.entity,
                                                                                              fact.relation)]]


def replay_split(seed: int, n_common: int | None = None) -> tuple[list, list]:
    """(replayed, held-out) halves of the common-knowledge questions (the first ``n_common`` of them: tests)."""
    common = common_knowledge_examples()[:n_common]
    order = list(range(len(common)))
    random.Random(f"knowing:{seed}:replay").shuffle(order)
    half = set(order[:len(order) // 2])
    return [ex for i, ex in enumerate(common) if i in half], [ex for i, ex in enumerate(common) if i not in half]
