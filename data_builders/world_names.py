"""Invented, syllable-composed names for the offline world ("Veltrane Osk", "Quarvik").

A name token is ``head + [mid] + tail``. Heads are invented stems that are not English words and
tails carry a little flavour per kind (places end in -vik/-holm, surnames in -sk/-dahl), so the
tokens read as proper nouns a small model cannot have seen. Two modes:

* strict (the default world, a few hundred entities): every token is new and no two tokens are
  within edit distance 1 of each other, so BM25 and a dense retriever never confuse two entities;
* loose (``scale_passages``, ~100k entities): only full names must be unique, which keeps
  generation at a few microseconds per name.
"""

from __future__ import annotations

import random
import re

HEADS = (
    "Vel", "Quar", "Kel", "Zor", "Thal", "Ysk", "Brev", "Orm", "Drav", "Tass", "Osk", "Fenn", "Gald",
    "Hask", "Ilv", "Jorv", "Kast", "Lud", "Myr", "Nakt", "Obr", "Pell", "Rusk", "Sarn", "Torv", "Uld",
    "Vask", "Wyr", "Xan", "Yord", "Zeph", "Arv", "Bryn", "Corv", "Dusk", "Eld", "Fyr", "Grel", "Hroth",
    "Isk", "Jask", "Krev", "Lorv", "Morv", "Nyl", "Ostr", "Prax", "Qel", "Rhov", "Stav", "Thr", "Ulv",
    "Vorn", "Wex", "Yarr", "Zunn", "Ael", "Bax", "Cyr", "Dryn", "Ekt", "Fal", "Gryv", "Hev", "Ixt",
    "Jund", "Kov", "Lask", "Mokt", "Nev", "Orv", "Pyr", "Quen", "Riv", "Skel", "Tov", "Urz", "Vyn",
    "Wald", "Yev", "Zask", "Aum", "Brok", "Cald", "Dev", "Ezr", "Fex", "Glav", "Harv", "Ivr",
)
MIDS = ("a", "e", "i", "o", "u", "ar", "en", "il", "or", "an", "el", "is", "ov", "ur", "y")
TAILS = {
    "first": ("ane", "ira", "elle", "ion", "ena", "is", "ara", "o", "ric", "wen", "eth", "ya", "ander", "ette",
              "orin", "trane", "ilde", "amon", "ela", "un"),
    "surname": ("sk", "rell", "vane", "mont", "dahl", "ovic", "ardt", "enko", "quist", "by", "varr", "ek",
                "ossa", "ander", "ith", "urne", "aro", "ell", "ent", "oth"),
    "place": ("vik", "holm", "mora", "stad", "gard", "ven", "dor", "rith", "mere", "oss", "ara", "essa",
              "thane", "brek", "wyn", "ulm", "ash", "avel", "ond", "ir"),
    "thing": ("ora", "ex", "ium", "ant", "ylon", "arc", "eon", "isk", "ova", "ux", "andra", "eris", "ol",
              "ynth", "ade", "olt", "ema", "irn", "os", "ast"),
    "lang": ("ish", "ic", "ese", "ian", "ani", "avic"),
}
# Junctions like "Yarr"+"rith", "Corv"+"vik" or "Thr"+"holm" read as typos: no tripled letter, no
# doubled letter except l/n/r/s/t, no run of four consonants.
_CLUMSY = re.compile(r"(.)\1\1|([^lnrst])\2|[^aeiouy]{4}")
# Invented stems can still collide with a real word or place when glued together; these are the
# ones we saw, rejected outright.
BLOCKED = frozenset({"osko", "orvo", "torvo"})


def _deletions(token: str) -> set[str]:
    """The token and every string one deletion away: two tokens within edit distance 1 share one."""
    return {token} | {token[:i] + token[i + 1:] for i in range(len(token))}


class NameGen:
    """Draws unique invented names from a private ``random.Random``.

    ``used`` holds the full names (lower case) already given out; ``strict`` adds the per-token
    rules described in the module docstring.
    """

    def __init__(self, rng: random.Random, *, strict: bool = True, used: set[str] | None = None):
        self.rng = rng
        self.strict = strict
        self.used: set[str] = set(used or ())
        self._tokens: set[str] = set()  # strict mode: every token given out
        self._near: set[str] = set()  # strict mode: deletion neighbourhoods of those tokens

    def _raw_token(self, tail_kind: str) -> str:
        rng = self.rng
        mid = "" if rng.random() < 0.5 else rng.choice(MIDS)
        if not self.strict and rng.random() < 0.5:
            mid += rng.choice(MIDS)  # loose mode needs a bigger space: ~100k names
        return rng.choice(HEADS) + mid + rng.choice(TAILS[tail_kind])

    def _token_ok(self, token: str) -> bool:
        low = token.lower()
        if len(low) < 3 or low in BLOCKED or _CLUMSY.search(low):
            return False
        if not self.strict:
            return True
        return low not in self._tokens and not (_deletions(low) & self._near)

    def _claim_tokens(self, tokens: list[str]) -> None:
        if self.strict:
            for token in tokens:
                low = token.lower()
                self._tokens.add(low)
                self._near |= _deletions(low)

    def token(self, tail_kind: str) -> str:
        """One new name token (already claimed)."""
        return self.name([tail_kind])

    def name(self, tail_kinds: list[str], template: str = "{}") -> str:
        """A new full name made of one token per tail kind, formatted with ``template``.

        E.g. ``name(["first", "surname"], "{} {}")`` -> "Veltrane Osk";
        ``name(["thing"], "{} Records")`` -> "Kelmora Records".
        """
        for _ in range(10_000):
            tokens = [self._raw_token(kind) for kind in tail_kinds]
            if len({t.lower() for t in tokens}) < len(tokens) or not all(self._token_ok(t) for t in tokens):
                continue
            if self.strict and len(tokens) > 1 and _near_each_other(tokens):
                continue
            full = template.format(*tokens)
            if full.lower() in self.used:
                continue
            self.used.add(full.lower())
            self._claim_tokens(tokens)
            return full
        raise RuntimeError("name space exhausted; use fewer entities or loose mode")


def _near_each_other(tokens: list[str]) -> bool:
    """True when two tokens of the same name are within edit distance 1 (e.g. "Velra Velrak")."""
    seen: set[str] = set()
    for token in tokens:
        dels = _deletions(token.lower())
        if dels & seen:
            return True
        seen |= dels
    return False
