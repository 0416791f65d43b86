"""Elasticsearch's ``english`` analyzer (Lucene's EnglishAnalyzer) in Python, for the ``elasticsearch`` BM25 scoring.

The chain, in Lucene's order: StandardTokenizer (Unicode word breaks, UAX #29), EnglishPossessiveFilter (a trailing
``'s``), LowerCaseFilter, StopFilter with Lucene's 33 English stopwords, PorterStemFilter (Porter's 1980 algorithm,
not Snowball's "english").

The tokenizer is a regular expression for the word-break rules that matter in English text: letters and digits run
together (``1990s``), ``_`` joins, ``. ' ’ :`` stay inside a word between two letters (``U.S.A`` , ``don't``), ``. , ;
'`` between two digits (``3.14``, ``1,000``), each Han or Hiragana character is a word of its own, tokens longer than
255 characters are cut every 255. Where it differs from Lucene (rare scripts, emoji, Katakana touching Latin) is
measured in docs/bm25_elasticsearch.md.
"""

from __future__ import annotations

import re

import regex
import Stemmer

# org.apache.lucene.analysis.en.EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (Elasticsearch's _english_)
ENGLISH_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with".split())

MAX_TOKEN_LENGTH = 255  # StandardTokenizer's default: a longer run is cut into pieces of this length

_MARK = r"\p{M}\p{Cf}"  # marks and format characters join the character before them (UAX #29 WB4)
# ALetter (and Katakana) beyond \p{L}: letter numbers (Roman numerals), circled and squared Latin letters and
# Katakana, modifier letters among the symbols
_LETTER = (r"\p{L}\p{Nd}\p{Nl}\u24b6-\u24e9\u02c2-\u02c5\u02d2-\u02d7\u02de\u02df\u02ed\u02ef-\u02ff"
           r"\u32d0-\u32fe\u3300-\u3357\U0001f130-\U0001f149\U0001f150-\U0001f169\U0001f170-\U0001f189")
_JOINER = r"\p{Pc}\u202f"  # ExtendNumLet (``_``, U+202F) joins, but a run of it alone is no word
_SINGLES = r"\p{Han}\p{Hiragana}"  # a word each
# a run: joiners, a letter or digit, then letters, digits, joiners and marks
_RUN = rf"[{_JOINER}]*[[{_LETTER}]--[{_SINGLES}]][[{_LETTER}{_MARK}{_JOINER}]--[{_SINGLES}]]*"
# MidLetter and MidNumLet (with the ASCII apostrophe): a break only where no letter follows
_MID_LETTER = "[:\u00b7\u0387\u05f4\u2027\ufe13\ufe55\uff1a.'\u2018\u2019\u2024\ufe52\uff07\uff0e]"
# MidNum and MidNumLet: between two digits
_MID_NUM = "[,;\u037e\u0589\u060c\u060d\u066c\u07f8\u2044\ufe10\ufe14\ufe50\ufe54\uff0c\uff1b.'\u2018\u2019\u2024" \
           "\ufe52\uff07\uff0e]"
# runs join over a MidLetter between letters, a MidNum between digits, a double quote between Hebrew letters
# (gershayim: WB7b/c); a mark before the middle character belongs to the letter or digit it follows
_JOIN = (rf"(?:(?<=[\p{{L}}{_MARK}]){_MID_LETTER}(?=\p{{L}})|(?<=[\p{{Nd}}{_MARK}]){_MID_NUM}(?=\p{{Nd}})"
         rf"|(?<=[\p{{Hebrew}}{_MARK}])\"(?=\p{{Hebrew}}))")
# Extended_Pictographic as Unicode's emoji-data lists it (the regex module's holds the Emoji property only, so
# "\u2605" or "\u266f" would be lost)
_PICTOGRAPHIC = (
    "\u00a9\u00ae\u203c\u2049\u2122\u2139\u2194-\u2199\u21a9\u21aa\u231a\u231b\u2328\u2388\u23cf"
    "\u23e9-\u23f3\u23f8-\u23fa\u24c2\u25aa\u25ab\u25b6\u25c0\u25fb-\u25fe\u2600-\u2605\u2607-\u2612"
    "\u2614-\u2685\u2690-\u2705\u2708-\u2712\u2714\u2716\u271d\u2721\u2728\u2733\u2734\u2744\u2747"
    "\u274c\u274e\u2753-\u2755\u2757\u2763-\u2767\u2795-\u2797\u27a1\u27b0\u27bf\u2934\u2935"
    "\u2b05-\u2b07\u2b1b\u2b1c\u2b50\u2b55\u3030\u303d\u3297\u3299"
    "\U0001f000-\U0001f0ff\U0001f10d-\U0001f10f\U0001f12f\U0001f16c-\U0001f171\U0001f17e\U0001f17f"
    "\U0001f18e\U0001f191-\U0001f19a\U0001f1ad-\U0001f1e5\U0001f201-\U0001f20f\U0001f21a\U0001f22f"
    "\U0001f232-\U0001f23a\U0001f23c-\U0001f23f\U0001f249-\U0001f3fa\U0001f400-\U0001f53d"
    "\U0001f546-\U0001f64f\U0001f680-\U0001f6ff\U0001f774-\U0001f77f\U0001f7d5-\U0001f7ff"
    "\U0001f80c-\U0001f80f\U0001f848-\U0001f84f\U0001f85a-\U0001f85f\U0001f888-\U0001f88f"
    "\U0001f8ae-\U0001f8ff\U0001f90c-\U0001f93a\U0001f93c-\U0001f945\U0001f947-\U0001faff"
    "\U0001fc00-\U0001fffd")
_EMOJI = rf"[\p{{Extended_Pictographic}}{_PICTOGRAPHIC}][{_MARK}\p{{Emoji_Modifier}}]*"
# a word; or one Han or Hiragana character; or one emoji (Lucene 8 and later emit them as tokens)
_TOKEN = regex.compile(rf"{_RUN}(?:{_JOIN}{_RUN})*|[{_SINGLES}][{_MARK}]*|{_EMOJI}", flags=regex.V1)
# the same rules on ASCII text (most titles, many passages), with the standard library's much faster engine
_ASCII_RUN = r"_*[A-Za-z0-9][A-Za-z0-9_]*"
_ASCII_TOKEN = re.compile(rf"{_ASCII_RUN}(?:(?:(?<=[A-Za-z])[.':](?=[A-Za-z])|(?<=[0-9])[.,;'](?=[0-9])){_ASCII_RUN})*")

# the endings whose Porter step 1 leaves "...logi" / "...bli"
_LOGI = ("logi", "logy", "logis", "logies", "logied")
_BLI = ("bli", "bly", "blis", "blies", "blied")
_UNDOUBLED = "chjkqvwx"  # the double consonants Porter's step 1b undoubles and Snowball's does not
_APOSTROPHES = ("'", "\u2019", "\uff07")
# Java's Character.toLowerCase maps one code point to one; Python's str.lower differs on these (and on a final
# sigma, which per-character lowering avoids).
_LOWER_FIX = {"\u0130": "i"}


def tokenize(text: str) -> list[str]:
    """StandardTokenizer's tokens, case kept."""
    tokens = (_ASCII_TOKEN if text.isascii() else _TOKEN).findall(text)
    if any(len(t) > MAX_TOKEN_LENGTH for t in tokens):
        tokens = [t[i:i + MAX_TOKEN_LENGTH] for t in tokens for i in range(0, len(t), MAX_TOKEN_LENGTH)]
    return tokens


def _lower(token: str) -> str:
    if token.isascii():
        return token.lower()
    return "".join(_LOWER_FIX.get(c) or (c.lower() if len(c.lower()) == 1 else c) for c in token)


class EnglishAnalyzer:
    """``analyze(text)`` -> the terms Elasticsearch's ``english`` analyzer indexes (and searches) for ``text``."""

    name = "elasticsearch_english"

    def __init__(self) -> None:
        self._stemmer = Stemmer.Stemmer("porter")
        self._stems: dict[str, str] = {}

    def _stem(self, word: str) -> str:
        stem = self._stems.get(word)
        if stem is None:
            # Lucene's PorterStemmer leaves words of one or two letters alone; Snowball's Porter strips an "s" ("us")
            stem = word if len(word) <= 2 else self._lucene_step2(word, self._stemmer.stemWord(word))
            if len(self._stems) < 1_000_000:  # a cache bounded like the corpus's vocabulary is, not like its size
                self._stems[word] = stem
        return stem

    def _lucene_step2(self, word: str, stem: str) -> str:
        """Lucene's PorterStemmer is Porter's later C version, whose step 2 has two rules the 1980 paper (and
        Snowball's "porter") lacks: "bli" -> "ble" (the paper: "abli" -> "able") and "logi" -> "log", each when the
        rest has a measure above 0. Snowball's steps 3 to 5 leave a word ending in either untouched, so the rule is
        applied to its output, and a new "ble" goes through steps 3 to 5 by stemming it again (steps 1 and 2 have
        nothing to do on it). Only for words whose step 1 ends in "logi" or "bli": Snowball's step 5 also makes them
        from "...logie", which Lucene's step 2 never saw. And step 1b undoubles any final consonant but l, s and z
        once "ed" or "ing" is gone ("revving" -> "rev"); Snowball's only bb dd ff gg mm nn pp rr tt."""
        if len(stem) > 2 and stem[-1] == stem[-2] and stem[-1] in _UNDOUBLED and \
                any(word == stem + end for end in ("ed", "ing", "ings")):
            return stem[:-1]
        if stem.endswith("logi") and word.endswith(_LOGI) and _measure(stem[:-4]) > 0:
            return stem[:-1]
        if stem.endswith("bli") and word.endswith(_BLI) and _measure(stem[:-3]) > 0:
            return self._stemmer.stemWord(stem[:-3] + "ble")
        return stem

    def analyze(self, text: str) -> list[str]:
        out = []
        for token in tokenize(text):
            if len(token) >= 2 and token[-1] in "sS" and token[-2] in _APOSTROPHES:
                token = token[:-2]
                if not token:
                    continue
            token = _lower(token)
            if token not in ENGLISH_STOP_WORDS:
                out.append(self._stem(token))
        return out


def _measure(stem: str) -> int:
    """Porter's m: the number of vowel-consonant sequences in ``stem`` ("y" after a consonant is a vowel)."""
    m = 0
    prev_vowel = False
    for i, c in enumerate(stem):
        vowel = c in "aeiou" or (c == "y" and i > 0 and not prev_vowel)
        if prev_vowel and not vowel:
            m += 1
        prev_vowel = vowel
    return m
