"""Writes each world entity out as one Wikipedia-like passage of 40-120 words.

Facts come first (so every question's answer is in the gold passage), then neutral filler sentences
until the passage reaches ``MIN_WORDS``; fillers carry no names and no numbers, so they never add a
competing answer.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from data_builders.world_entities import Entity

MIN_WORDS = 45
FILLERS = {
    "person": (
        "{S} is regarded as one of the most original figures of {p} generation.",
        "Critics have praised {p} work for its patience and precision.",
        "{S} has spent much of {p} adult life travelling between the coast and the mountains.",
        "Colleagues describe {o} as meticulous, private and generous with younger people.",
        "{S} has given lectures at several institutions and served on a number of juries.",
        "Outside {p} profession, {s} is a keen sailor and an amateur beekeeper.",
    ),
    "person_past": (
        "{S} was regarded as one of the most original figures of {p} generation.",
        "Critics praised {p} work for its patience and precision.",
        "{S} spent much of {p} adult life travelling between the coast and the mountains.",
        "Colleagues described {o} as meticulous, private and generous with younger people.",
        "{S} gave lectures at several institutions and served on a number of juries.",
        "Outside {p} profession, {s} was a keen sailor and an amateur beekeeper.",
    ),
    "place": (
        "Its old town is known for covered markets and narrow stone bridges.",
        "The local economy rests on trade, fishing and light industry.",
        "An annual lantern festival draws visitors from the surrounding region every autumn.",
        "Winters are long and damp, while summers are short and mild.",
        "The area is connected to the rest of the region by rail and by a coastal road.",
    ),
    "org": (
        "Its founders aimed to combine careful craft with long-term ambition.",
        "The organisation has been praised for its early support of new talent.",
        "It went through a difficult period of reorganisation but later recovered.",
        "Its archives are open to researchers by appointment.",
        "Over the decades it has built a loyal following across the region.",
    ),
    "work": (
        "Critics praised its unusual structure and restrained tone.",
        "It was initially overlooked but later gained a devoted following.",
        "It has been reissued and discussed in several retrospectives.",
        "The work is often cited as an influence by younger artists.",
        "Its reception was mixed at first, though later assessments were warmer.",
    ),
}
FILLER_GROUP = {"person": "person", "city": "place", "country": "place", "university": "org", "company": "org",
                "band": "org", "book": "work", "film": "work", "album": "work"}


def _pronouns(ent: Entity) -> dict[str, str]:
    female = ent.attrs["gender"] == "female"
    subj, poss, obj = ("she", "her", "her") if female else ("he", "his", "him")
    return {"s": subj, "S": subj.capitalize(), "p": poss, "P": poss.capitalize(), "o": obj}


def _person(ent: Entity, rng: random.Random, founded: list[Entity]) -> list[str]:
    a, pr = ent.attrs, _pronouns(ent)
    n, by, bp, occ, dy = ent.name, a["birth_year"], a["birthplace"].name, a["occupation"], a["death_year"]
    article = "an" if occ[0] in "aeiou" else "a"
    if dy:
        out = [rng.choice((f"{n} ({by}–{dy}) was {article} {occ} born in {bp}.",
                           f"{n} was {article} {occ}, born in {bp} in {by}; {pr['s']} died in {dy}."))]
    else:
        out = [rng.choice((f"{n} (born {by} in {bp}) is {article} {occ}.",
                           f"{n} is {article} {occ} who was born in {bp} in {by}.",
                           f"{n}, born in {bp} in {by}, is {article} {occ}."))]
    uni = a["university"].name
    out.append(rng.choice((f"{pr['S']} studied at {uni}.", f"{pr['S']} was educated at {uni}.",
                           f"After leaving school, {pr['s']} attended {uni}.")))
    if a["award"]:
        out.append(f"In {a['award_year']}, {pr['s']} received {a['award']}.")
    out += [f"{pr['S']} founded {c.name}." for c in founded]
    return out


def _city(ent: Entity, rng: random.Random) -> list[str]:
    a, n = ent.attrs, ent.name
    country = a["country"].name
    first = (f"{n} is the capital and largest city of {country}." if a["is_capital"]
             else rng.choice((f"{n} is a city in {country}.", f"{n} is a town in the north of {country}.",
                              f"{n} is a port city in {country}.")))
    return [first,
            rng.choice((f"It has a population of {a['population']:,}.",
                        f"As of the last census, {n} had {a['population']:,} inhabitants.")),
            rng.choice((f"The city was founded in {a['founded']}.", f"{n} was founded in {a['founded']}.")),
            rng.choice((f"The {a['river']} flows through the city.", f"It lies on the banks of the {a['river']}."))]


def _country(ent: Entity, rng: random.Random) -> list[str]:
    a, n = ent.attrs, ent.name
    out = [f"{n} is a country whose capital is {a['capital'].name}." if a["capital"] else f"{n} is a small country."]
    out.append(f"The official language is {a['language']}, and the currency is the {a['currency']}.")
    out.append(rng.choice((f"{n} became independent in {a['independence_year']}.",
                           f"The country gained its independence in {a['independence_year']}.")))
    out.append(f"It has a population of about {a['population']:,}.")
    return out


def _university(ent: Entity, rng: random.Random) -> list[str]:
    a, n = ent.attrs, ent.name
    return [rng.choice((f"{n} is a public university in {a['city'].name}.",
                        f"{n} is a university located in {a['city'].name}.")),
            rng.choice((f"It was founded in {a['founded']}.", f"The university was established in {a['founded']}.")),
            f"It enrols about {a['students']:,} students."]


def _company(ent: Entity, rng: random.Random) -> list[str]:
    a, n = ent.attrs, ent.name
    return [rng.choice((f"{n} is a {a['industry']} company headquartered in {a['hq'].name}.",
                        f"{n} is a company in the {a['industry']} industry, based in {a['hq'].name}.")),
            rng.choice((f"It was founded in {a['founded']} by {a['founder'].name}.",
                        f"{a['founder'].name} founded the company in {a['founded']}.")),
            f"It employs about {a['employees']:,} people."]


def _band(ent: Entity, rng: random.Random) -> list[str]:
    a, n = ent.attrs, ent.name
    return [rng.choice((f"{n} is a {a['genre']} band from {a['origin'].name}, formed in {a['formed']}.",
                        f"{n} is a {a['genre']} group formed in {a['origin'].name} in {a['formed']}.")),
            rng.choice((f"The band is fronted by lead singer {a['singer'].name}.",
                        f"{a['singer'].name} is the band's lead singer."))]


def _book(ent: Entity, rng: random.Random) -> list[str]:
    a, n = ent.attrs, ent.name
    out = [rng.choice((f"{n} is a {a['year']} {a['genre']} novel by {a['author'].name}.",
                       f"{n} is a {a['genre']} novel written by {a['author'].name} and first published in "
                       f"{a['year']}."))]
    if a["publisher"]:
        out.append(f"It was published by {a['publisher'].name}.")
    out.append(f"The first edition ran to {a['pages']} pages.")
    return out


def _film(ent: Entity, rng: random.Random) -> list[str]:
    a, n = ent.attrs, ent.name
    return [rng.choice((f"{n} is a {a['year']} {a['genre']} film directed by {a['director'].name}.",
                        f"{n} is a {a['genre']} film directed by {a['director'].name} and released in {a['year']}.")),
            rng.choice((f"The film is set in {a['setting'].name}.", f"The story takes place in {a['setting'].name}.")),
            f"It runs for {a['runtime']} minutes."]


def _album(ent: Entity, rng: random.Random) -> list[str]:
    a, n = ent.attrs, ent.name
    out = [rng.choice((f"{n} is a {a['genre']} studio album by {a['artist'].name}, released in {a['year']}.",
                       f"{n} is an album by the {a['genre']} band {a['artist'].name}, released in {a['year']}."))]
    if a["label"]:
        out.append(f"It was released on the {a['label'].name} label.")
    out.append(f"The album contains {a['tracks']} tracks.")
    return out


RENDERERS: dict[str, Callable[[Entity, random.Random], list[str]]] = {
    "city": _city, "country": _country, "university": _university, "company": _company,
    "band": _band, "book": _book, "film": _film, "album": _album,
}


def render(ent: Entity, rng: random.Random, founded: list[Entity] | None = None) -> str:
    """The passage text for ``ent``; ``founded`` lists the companies a person founded."""
    group = FILLER_GROUP[ent.kind]
    if ent.kind == "person":
        sentences = _person(ent, rng, founded or [])
        fmt = _pronouns(ent)
        group = "person_past" if ent.attrs["death_year"] else group
    else:
        sentences = RENDERERS[ent.kind](ent, rng)
        fmt = {}
    fillers = list(FILLERS[group])
    rng.shuffle(fillers)
    words = sum(len(s.split()) for s in sentences)
    for filler in fillers:
        if words >= MIN_WORDS:
            break
        sentence = filler.format(**fmt)
        sentences.append(sentence)
        words += len(sentence.split())
    return " ".join(sentences)
