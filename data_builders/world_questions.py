"""Questions over the offline world: single-hop, two-hop bridge and two-hop comparison.

Every question names its subject in full (so BM25 and a dense retriever can find the passage),
and every canonical answer (``answers[0]``) is copied from the text of a gold passage.
"""

from __future__ import annotations

import random
from collections import defaultdict
from typing import Any

from adaptive_rag.plumbing.records import Passage, QAExample
from data_builders.world_entities import Entity

# relation -> templates; "{x}" is the subject's full name.
SINGLE_TEMPLATES: dict[str, dict[str, tuple[str, ...]]] = {
    "person": {
        "birth_year": ("In which year was {x} born?", "When was {x} born?", "What is the birth year of {x}?"),
        "death_year": ("In which year did {x} die?", "When did {x} die?"),
        "birthplace": ("In which city was {x} born?", "Where was {x} born?", "What is the birthplace of {x}?"),
        "occupation": ("What is the occupation of {x}?", "What does {x} do for a living?",
                       "What is {x}'s profession?"),
        "university": ("Where did {x} study?", "At which university did {x} study?"),
        "award": ("Which award did {x} receive?", "What prize was {x} awarded?"),
    },
    "city": {
        "country": ("In which country is {x} located?", "{x} is a city in which country?"),
        "population": ("What is the population of {x}?", "How many people live in {x}?"),
        "founded": ("In which year was {x} founded?", "When was the city of {x} founded?"),
        "river": ("Which river flows through {x}?", "On which river does {x} lie?"),
    },
    "country": {
        "capital": ("What is the capital of {x}?", "Which city is the capital of {x}?"),
        "language": ("What is the official language of {x}?", "Which language is spoken officially in {x}?"),
        "currency": ("What is the currency of {x}?", "Which currency is used in {x}?"),
        "independence_year": ("In which year did {x} become independent?", "When did {x} gain independence?"),
    },
    "university": {
        "city": ("In which city is {x} located?", "Where is {x}?"),
        "founded": ("When was {x} founded?", "In which year was {x} established?"),
        "students": ("How many students does {x} have?",),
    },
    "company": {
        "founder": ("Who founded {x}?", "Who is the founder of {x}?"),
        "founded": ("In which year was {x} founded?", "When was {x} founded?"),
        "hq": ("Where is {x} headquartered?", "In which city is {x} based?"),
        "industry": ("In which industry does {x} operate?", "What kind of company is {x}?"),
    },
    "band": {
        "formed": ("In which year was {x} formed?", "When was the band {x} formed?"),
        "origin": ("Which city does the band {x} come from?", "Where was {x} formed?"),
        "genre": ("What genre of music does {x} play?", "What kind of music does the band {x} play?"),
        "singer": ("Who is the lead singer of {x}?", "Who fronts the band {x}?"),
    },
    "book": {
        "author": ("Who wrote {x}?", "Who is the author of the novel {x}?"),
        "year": ("When was {x} published?", "In which year was the novel {x} first published?"),
        "genre": ("What genre is the novel {x}?",),
        "publisher": ("Who published {x}?", "Which company published the novel {x}?"),
    },
    "film": {
        "director": ("Who directed {x}?", "Who is the director of the film {x}?"),
        "year": ("In which year was the film {x} released?", "When did {x} come out?"),
        "genre": ("What genre is the film {x}?",),
        "setting": ("In which city is the film {x} set?", "Where does the film {x} take place?"),
    },
    "album": {
        "artist": ("Which band recorded the album {x}?", "Who released the album {x}?"),
        "year": ("When was the album {x} released?", "In which year did {x} come out?"),
        "label": ("On which label was {x} released?",),
        "genre": ("What genre is the album {x}?",),
    },
}
OCCUPATION_ALIASES = {"novelist": ["writer", "author"], "poet": ["writer"], "historian": ["writer"],
                      "film director": ["director", "filmmaker"], "singer": ["vocalist"],
                      "entrepreneur": ["businessman", "businesswoman"]}
# (subject kind, relation to the bridge entity, attribute of the bridge entity, template)
BRIDGE_RECIPES = (
    ("book", "author", "birth_year", "In which year was the author of {x} born?"),
    ("book", "author", "birthplace", "In which city was the author of {x} born?"),
    ("book", "author", "death_year", "In which year did the author of {x} die?"),
    ("book", "author", "university", "At which university did the author of {x} study?"),
    ("book", "publisher", "hq", "In which city is the publisher of {x} based?"),
    ("film", "director", "birth_year", "When was the director of the film {x} born?"),
    ("film", "director", "birthplace", "Where was the director of the film {x} born?"),
    ("film", "setting", "country", "In which country is the film {x} set?"),
    ("album", "artist", "origin", "Which city does the band that recorded {x} come from?"),
    ("album", "artist", "formed", "In which year was the band behind the album {x} formed?"),
    ("album", "artist", "singer", "Who is the lead singer of the band that recorded {x}?"),
    ("company", "founder", "birth_year", "In which year was the founder of {x} born?"),
    ("company", "founder", "birthplace", "In which city was the founder of {x} born?"),
    ("company", "hq", "country", "In which country is {x} headquartered?"),
    ("person", "birthplace", "country", "In which country was {x} born?"),
    ("person", "university", "city", "In which city is the university where {x} studied?"),
    ("city", "country", "capital", "What is the capital of the country where {x} is located?"),
    ("band", "singer", "birth_year", "In which year was the lead singer of {x} born?"),
    ("university", "city", "country", "In which country is {x} located?"),
)
# (kind, attribute, template, True when the smaller value wins)
COMPARISON_RECIPES = (
    ("person", "birth_year", "Who was born first, {a} or {b}?", True),
    ("person", "birth_year", "Who is younger, {a} or {b}?", False),
    ("company", "founded", "Which company was founded earlier, {a} or {b}?", True),
    ("university", "founded", "Which university is older, {a} or {b}?", True),
    ("band", "formed", "Which band was formed first, {a} or {b}?", True),
    ("book", "year", "Which novel was published first, {a} or {b}?", True),
    ("film", "year", "Which film was released earlier, {a} or {b}?", True),
    ("album", "year", "Which album came out first, {a} or {b}?", True),
    ("city", "population", "Which city has a larger population, {a} or {b}?", False),
)


def answers_for(ent: Entity, relation: str) -> list[str]:
    """Gold answers for ``ent.attrs[relation]``: the canonical form (as written in the passage) first."""
    value = ent.attrs[relation]
    if isinstance(value, Entity):
        return [value.name]
    if relation in ("population", "students"):
        return [f"{value:,}", str(value)]
    if relation == "occupation":
        return [value, *OCCUPATION_ALIASES.get(value, [])]
    if relation == "award":
        return [value.removeprefix("the "), value]
    if relation == "river":
        return [value, value.removesuffix(" River")]
    if relation == "genre" and ent.kind in ("book", "film"):
        return [value, f"{value} {'novel' if ent.kind == 'book' else 'film'}"]
    return [str(value)]


def _meta(hop_type: str, **extra: Any) -> dict[str, Any]:
    return {"source": "world", "hop_type": hop_type, "kind": "fictional", **extra}


def single_hop(core: list[Entity], passages: dict[str, Passage], n: int, rng: random.Random) -> list[QAExample]:
    """``n`` single-hop questions: one relation per entity, then a second pass for more if needed."""
    pending = {ent.pid: [r for r in SINGLE_TEMPLATES[ent.kind] if ent.attrs.get(r) is not None] for ent in core}
    for rels in pending.values():
        rng.shuffle(rels)
    chosen: list[tuple[Entity, str]] = []
    while len(chosen) < n and any(pending.values()):
        for ent in core:
            if pending[ent.pid] and len(chosen) < n:
                chosen.append((ent, pending[ent.pid].pop()))
    rng.shuffle(chosen)
    return [QAExample(id=f"world-q-single-{i:04d}",
                      question=rng.choice(SINGLE_TEMPLATES[ent.kind][rel]).format(x=ent.name),
                      answers=answers_for(ent, rel), gold_passages=[passages[ent.pid]],
                      metadata=_meta("single", entity=ent.name, entity_type=ent.kind, relation=rel))
            for i, (ent, rel) in enumerate(chosen)]


def _round_robin(buckets: list[list[Any]], n: int) -> list[Any]:
    """Take one item from each bucket in turn, so every recipe is represented."""
    out: list[Any] = []
    while len(out) < n and any(buckets):
        for bucket in buckets:
            if bucket and len(out) < n:
                out.append(bucket.pop())
    return out


def bridge(core: list[Entity], passages: dict[str, Passage], n: int, rng: random.Random) -> list[QAExample]:
    """``n`` bridge questions: an attribute of the entity that the subject points at."""
    by_kind: dict[str, list[Entity]] = defaultdict(list)
    for ent in core:
        by_kind[ent.kind].append(ent)
    buckets = []
    for kind, via, attr, template in BRIDGE_RECIPES:
        items = [(ent, via, attr, template) for ent in by_kind[kind]
                 if ent.attrs.get(via) is not None and ent.attrs[via].attrs.get(attr) is not None
                 and not (attr == "capital" and ent.attrs[via].attrs["capital"] is ent)]
        rng.shuffle(items)
        buckets.append(items)
    out = []
    for i, (ent, via, attr, template) in enumerate(_round_robin(buckets, n)):
        mid = ent.attrs[via]
        out.append(QAExample(
            id=f"world-q-bridge-{i:04d}", question=template.format(x=ent.name), answers=answers_for(mid, attr),
            gold_passages=[passages[ent.pid], passages[mid.pid]],
            metadata=_meta("bridge", entity=ent.name, intermediate=mid.name, intermediate_type=mid.kind,
                           relations=[via, attr])))
    return out


def comparison(core: list[Entity], passages: dict[str, Passage], n: int, rng: random.Random) -> list[QAExample]:
    """``n`` comparison questions over pairs of same-kind entities whose values differ."""
    by_kind: dict[str, list[Entity]] = defaultdict(list)
    for ent in core:
        by_kind[ent.kind].append(ent)
    per_recipe = n // len(COMPARISON_RECIPES) + 1
    buckets = []
    for recipe in COMPARISON_RECIPES:
        ents, attr = by_kind[recipe[0]], recipe[1]
        pairs: dict[frozenset[str], tuple[Entity, Entity]] = {}
        for _ in range(per_recipe * 20):  # rejection sampling; pools are small
            if len(pairs) >= per_recipe or len(ents) < 2:
                break
            a, b = rng.sample(ents, 2)
            if a.attrs[attr] != b.attrs[attr]:
                pairs.setdefault(frozenset((a.pid, b.pid)), (a, b))
        buckets.append([(recipe, pair) for pair in pairs.values()])
    out = []
    for i, ((kind, attr, template, smaller_wins), (a, b)) in enumerate(_round_robin(buckets, n)):
        winner = min((a, b), key=lambda e: e.attrs[attr]) if smaller_wins else max((a, b), key=lambda e: e.attrs[attr])
        out.append(QAExample(
            id=f"world-q-comparison-{i:04d}", question=template.format(a=a.name, b=b.name), answers=[winner.name],
            gold_passages=[passages[a.pid], passages[b.pid]],
            metadata=_meta("comparison", entities=[a.name, b.name], entity_type=kind, attribute=attr)))
    return out
