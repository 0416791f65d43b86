"""Entities of the offline world and the seeded builder that creates them.

An :class:`Entity` is a kind ("person", "city", ...), an invented name and attributes; relation
attributes hold other entities (``book.attrs["author"]`` is a person). Dates are drawn so the world
is coherent: a company is founded 25-50 years after its founder's birth, a book written after its
author turned 22, an album released after its band formed.

"Core" entities may be asked about; distractors may point at core entities (a distractor novel by a
core author) but core entities only point at core entities, so adding distractors never changes an
answer.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from data_builders.world_names import NameGen

# Occupation -> the role it can play in a relation; "other" people only have personal attributes.
OCCUPATION_ROLES = {
    "novelist": "writer", "poet": "writer", "historian": "writer",
    "film director": "director",
    "singer": "singer",
    "entrepreneur": "founder", "engineer": "founder", "industrialist": "founder",
    "physicist": "other", "architect": "other", "painter": "other", "mathematician": "other",
    "chemist": "other", "economist": "other", "botanist": "other", "diplomat": "other",
}
# Share of people per role: every relation needs someone to point at.
ROLE_SHARES = (("writer", 0.22), ("director", 0.12), ("singer", 0.12), ("founder", 0.16), ("other", 0.38))
INDUSTRY_SUFFIXES = {
    "music": ("Records", "Music"), "publishing": ("Press", "Books"), "shipping": ("Shipping", "Maritime"),
    "software": ("Software", "Systems"), "textiles": ("Textiles", "Mills"), "brewing": ("Brewery", "Breweries"),
    "aviation": ("Aeronautics", "Airways"), "pharmaceuticals": ("Pharma", "Laboratories"),
    "mining": ("Mining", "Minerals"), "automobiles": ("Motors", "Automotive"), "banking": ("Bank", "Capital"),
}
UNIVERSITY_TEMPLATES = ("{} University", "University of {}", "{} Institute of Technology", "{} College")
BOOK_GENRES = ("historical", "crime", "science fiction", "fantasy", "romance", "satirical", "gothic", "adventure")
FILM_GENRES = ("drama", "comedy", "thriller", "western", "musical", "war", "horror", "mystery")
MUSIC_GENRES = ("folk rock", "jazz", "synth-pop", "heavy metal", "blues", "indie pop", "post-punk", "bluegrass")
TITLE_TEMPLATES = ("The {} Letters", "Songs of {}", "The Last {}", "Winter in {}", "The {} Affair",
                   "Beyond {}", "The House of {}", "{}", "A Season in {}", "The {} Variations")
N_AWARDS = 6


@dataclass
class Entity:
    """One thing the world knows about; ``pid`` is the id of the passage that describes it."""

    pid: str
    kind: str
    name: str
    attrs: dict[str, Any] = field(default_factory=dict)
    core: bool = True


class WorldBuilder:
    """Creates entities one at a time, keeping per-kind (and per-role) pools for relations.

    ``pid_format`` turns a running number into a passage id ("world-p-{:05d}").
    """

    def __init__(self, rng: random.Random, names: NameGen, pid_format: str, awards: list[str] | None = None):
        self.rng, self.names, self.pid_format = rng, names, pid_format
        self.counter = 0
        self.entities: list[Entity] = []  # created by this builder, in order
        self._pools: dict[tuple[str, bool], list[Entity]] = defaultdict(list)  # (kind|role, core only?)
        self.awards = awards or [names.name(["thing"], rng.choice(("the {} Prize", "the {} Medal", "the {} Award")))
                                 for _ in range(N_AWARDS)]

    # -- bookkeeping -------------------------------------------------------------------------
    def adopt(self, entities: list[Entity]) -> None:
        """Make entities built elsewhere available as relation targets (they are never modified)."""
        for ent in entities:
            self._register(ent)

    def _register(self, ent: Entity) -> None:
        keys = [ent.kind]
        if ent.kind == "person":
            keys.append(OCCUPATION_ROLES[ent.attrs["occupation"]])
        elif ent.kind == "company":
            keys.append(ent.attrs["industry"])
        for key in keys:
            self._pools[(key, False)].append(ent)
            if ent.core:
                self._pools[(key, True)].append(ent)

    def _new(self, kind: str, name: str, core: bool, **attrs: Any) -> Entity:
        ent = Entity(self.pid_format.format(self.counter), kind, name, attrs, core)
        self.counter += 1
        self.entities.append(ent)
        self._register(ent)
        return ent

    def pool(self, key: str, core: bool) -> list[Entity]:
        """Entities of a kind or role that an entity may point at (core ones only point at core)."""
        return self._pools[(key, core)]

    def pick(self, key: str, core: bool) -> Entity:
        candidates = self.pool(key, core)
        if not candidates:
            raise ValueError(f"no {key!r} entity to point at; create one first (check WorldConfig sizes)")
        return self.rng.choice(candidates)

    def pick_founded_by(self, key: str, core: bool, year: int, tries: int = 8) -> Entity | None:
        """A company of ``key`` founded by ``year`` (a publisher for a book), or None.

        A few random tries instead of a filter, so a 100k-entity world stays fast.
        """
        candidates = self.pool(key, core)
        for _ in range(tries if candidates else 0):
            ent = self.rng.choice(candidates)
            if ent.attrs["founded"] <= year:
                return ent
        return None

    # -- places --------------------------------------------------------------------------------
    def country(self, core: bool) -> Entity:
        rng, names = self.rng, self.names
        return self._new(
            "country", names.token("place"), core,
            capital=None,  # set by the first city created in it
            language=names.token("lang"),
            currency=names.token("thing").lower(),
            population=rng.randrange(50, 6000) * 10_000,
            independence_year=rng.randint(1800, 1995),
        )

    def city(self, core: bool, country: Entity | None = None) -> Entity:
        rng, names = self.rng, self.names
        country = country or self.pick("country", core)
        capital = country.attrs["capital"] is None
        low, high = (200, 2500) if capital else (8, 900)  # capitals are big: population in thousands
        city = self._new(
            "city", names.token("place"), core,
            country=country,
            population=rng.randint(low, high) * 1000 + rng.randrange(0, 1000, 10),
            founded=rng.randint(600, 1890),
            river=names.name(["place"], "{} River"),
            is_capital=capital,
        )
        if capital:
            country.attrs["capital"] = city
        return city

    # -- organisations --------------------------------------------------------------------------
    def university(self, core: bool) -> Entity:
        rng = self.rng
        name = self.names.name(["place"], rng.choice(UNIVERSITY_TEMPLATES))
        return self._new("university", name, core, city=self.pick("city", core),
                         founded=rng.randint(1300, 1880), students=rng.randrange(20, 450) * 100)

    def person(self, core: bool, occupation: str | None = None) -> Entity:
        rng = self.rng
        occupation = occupation or rng.choice(list(OCCUPATION_ROLES))
        award = rng.choice(self.awards) if rng.random() < 0.4 else None
        birth = rng.randint(1890, 1995)
        death = min(2022, birth + rng.randint(55, 95)) if birth < 1935 else None  # nobody alive past ~90
        return self._new(
            "person", self.names.name(["first", "surname"], "{} {}"), core,
            gender=rng.choice(("female", "male")), birth_year=birth, death_year=death,
            birthplace=self.pick("city", core),
            occupation=occupation, university=self.pick("university", core),
            award=award, award_year=min(2023, birth + rng.randint(30, 60), death or 2023) if award else None,
        )

    def company(self, core: bool, industry: str | None = None) -> Entity:
        rng = self.rng
        industry = industry or rng.choice(list(INDUSTRY_SUFFIXES))
        founder = self.pick("founder", core)
        name = self.names.name(["thing"], "{} " + rng.choice(INDUSTRY_SUFFIXES[industry]))
        return self._new("company", name, core, founder=founder, industry=industry,
                         founded=min(2022, founder.attrs["birth_year"] + rng.randint(25, 50)),
                         hq=self.pick("city", core), employees=rng.randrange(2, 900) * 50)

    def band(self, core: bool) -> Entity:
        rng = self.rng
        singer = self.pick("singer", core)
        formed = min(2020, max(1960, singer.attrs["birth_year"] + rng.randint(17, 30)))
        name = self.names.name(["thing"], rng.choice(("{}", "The {}", "{} Collective")))
        return self._new("band", name, core, formed=formed, origin=self.pick("city", core),
                         genre=rng.choice(MUSIC_GENRES), singer=singer)

    # -- works ----------------------------------------------------------------------------------
    def _title(self) -> str:
        return self.names.name(["thing"], self.rng.choice(TITLE_TEMPLATES))

    def book(self, core: bool) -> Entity:
        rng = self.rng
        author = self.pick("writer", core)
        year = min(2023, author.attrs["birth_year"] + rng.randint(22, 60))
        return self._new("book", self._title(), core, author=author, year=year, genre=rng.choice(BOOK_GENRES),
                         publisher=self.pick_founded_by("publishing", core, year), pages=rng.randint(120, 780))

    def film(self, core: bool) -> Entity:
        rng = self.rng
        director = self.pick("director", core)
        year = min(2023, director.attrs["birth_year"] + rng.randint(25, 60))
        return self._new("film", self._title(), core, director=director, year=year, genre=rng.choice(FILM_GENRES),
                         setting=self.pick("city", core), runtime=rng.randint(78, 185))

    def album(self, core: bool) -> Entity:
        rng = self.rng
        band = self.pick("band", core)
        year = min(2023, band.attrs["formed"] + rng.randint(0, 20))
        return self._new("album", self._title(), core, artist=band, year=year, genre=band.attrs["genre"],
                         label=self.pick_founded_by("music", core, year), tracks=rng.randint(8, 16))


def occupation_plan(rng: random.Random, n_people: int) -> list[str]:
    """Occupations for ``n_people`` people, every role represented (a relation needs a target)."""
    counts = {role: max(1, round(share * n_people)) for role, share in ROLE_SHARES}
    while sum(counts.values()) > n_people and max(counts.values()) > 1:
        counts[max(counts, key=counts.__getitem__)] -= 1
    counts["other"] += max(0, n_people - sum(counts.values()))
    plan: list[str] = []
    for role, count in counts.items():
        jobs = [occ for occ, r in OCCUPATION_ROLES.items() if r == role]
        plan += [jobs[i % len(jobs)] for i in range(count)]
    rng.shuffle(plan)
    return plan
