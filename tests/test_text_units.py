"""Sentence boundaries (FS-RAG windows, DRAGIN truncation) and the token-piece view of generated text."""

import pytest
import torch

from inference.dynamic_rag.text_units import TokenText, ends_sentence, split_sentences


def _sentences(text: str) -> list[str]:
    return [text[a:b] for a, b in split_sentences(text)]


@pytest.mark.parametrize("text, expected", [
    ("It was directed by Robert Z. Leonard. He was born in 1889.",
     ["It was directed by Robert Z. Leonard.", "He was born in 1889."]),
    ("Dr. Who is a show. Mr. Smith watched it.", ["Dr. Who is a show.", "Mr. Smith watched it."]),
    ("He moved to Washington, D.C. in 1990. Then he left.", ["He moved to Washington, D.C. in 1990.", "Then he left."]),
    ("No. The first one is older.", ["No.", "The first one is older."]),
    ("Line one\nLine two. Three!", ["Line one", "Line two.", "Three!"]),
    ("Ends with Z.", ["Ends with Z."]),
    ("", []),
    ("   \n  ", []),
    ("Zoë Ångström wrote it. Café au lait?", ["Zoë Ångström wrote it.", "Café au lait?"]),
])
def test_split_sentences(text, expected):
    assert _sentences(text) == expected


@pytest.mark.parametrize("before, nxt, expected", [
    ("He was born in 1889.", " He", True),
    ("He was born in 1889.", "", True),
    ("It was 3.", "5", False),  # a decimal point, not an end
    ("directed by Robert Z.", " Leonard", False),
    ("It was Dr.", " Who", False),
    ("No.", " The", True),
    ("answer\u201d", " so", False),
    ("some text", "\n", True),
    ("", "\n", False),
])
def test_ends_sentence(before, nxt, expected):
    assert ends_sentence(before, nxt) is expected


class _Tok:
    """A byte-level-BPE-like tokenizer: 'Ġ' marks a leading space and decode keeps it."""

    vocab = {"Ġword": 0, "Ġhello": 1, "Ġworld": 2, ".": 3, "<eos>": 4}
    all_special_ids = [4]

    def encode(self, text, add_special_tokens=False):
        return [self.vocab["Ġ" + w] for w in text.split()]

    def convert_ids_to_tokens(self, ids):
        inv = {v: k for k, v in self.vocab.items()}
        return [inv[i] for i in ids] if isinstance(ids, list) else inv[ids]

    def decode(self, ids):
        return "".join(self.convert_ids_to_tokens(list(ids))).replace("Ġ", " ")


def test_token_text_pieces_join_to_the_decoded_text_and_specials_are_empty():
    tt = TokenText(_Tok())
    assert tt.marker == "Ġ"
    assert tt.pieces([1, 2, 3, 4]) == [" hello", " world", ".", ""]
    assert "".join(tt.pieces([1, 2, 3])) == _Tok().decode([1, 2, 3])


def test_sentence_end_reads_the_tail_as_the_whole_text_would():
    """ends_sentence looks at the last 64 characters only (flat cost per token): it must decide exactly as the
    patterns over the whole text do, also with long runs of trailing white space and initials at the cut."""
    import random

    from inference.dynamic_rag.text_units import _NOT_AN_END, SENTENCE_END

    def whole(text, nxt):
        if "\n" in nxt and text.strip():
            return True
        return bool(SENTENCE_END.search(text)) and not _NOT_AN_END.search(text) and (not nxt or nxt[0].isspace())

    rng = random.Random(0)
    alphabet = list("abcXYZ .!?\"')]\n") + ["Dr", "Mr", "D.C", " A.", "  ", "\t"]
    for _ in range(20000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 120))) + " " * rng.choice([0, 0, 70])
        nxt = rng.choice(["", " x", "x", "\n", "\nY", " "])
        assert ends_sentence(text, nxt) == whole(text, nxt), (text[-80:], nxt)


def test_round_text_grows_with_its_pieces():
    from inference.dynamic_rag.round_view import RoundView

    view = RoundView("q", [], [], [], [], [], [])
    view.extend([" Red", " fox"])
    assert view.text == " Red fox"
    view.extend(["."])
    assert view.text == " Red fox."
    view.truncate(1)
    assert view.text == " Red"
    view.pieces = [" Blue"]  # a view given a new list reads the new list
    assert view.text == " Blue"


class _PieceTok:
    """A tokenizer over a fixed list of raw tokens in one of two styles: byte-level BPE ("Ġ" marks a space, "Ċ" is a
    newline; decode keeps both) or SentencePiece ("▁" marks a space, "<0x0A>" is a newline; decode drops the leading
    space of a lone "▁word", as Llama-2's does)."""

    all_special_ids: list[int] = []

    def __init__(self, raw: list[str], style: str):
        self.raw, self.style = list(raw) + [("Ġ" if style == "bpe" else "▁") + "word"], style
        self.marker = "Ġ" if style == "bpe" else "▁"

    def encode(self, text, add_special_tokens=False):
        assert text == " word"  # TokenText's probe
        return [len(self.raw) - 1]

    def convert_ids_to_tokens(self, ids):
        return [self.raw[i] for i in ids] if isinstance(ids, list) else self.raw[ids]

    def decode(self, ids):
        text = "".join(self.raw[i] for i in ids)
        if self.style == "bpe":
            return text.replace("Ġ", " ").replace("Ċ", "\n")
        text = text.replace("<0x0A>", "\n").replace("▁", " ")
        return text[1:] if text.startswith(" ") else text


# " Scott Derrickson's film didn't use U.S. money.\nSo" as each tokenizer family cuts it
_BPE = ["ĠScott", "ĠDer", "rick", "son", "'s", "Ġfilm", "Ġdidn", "'t", "Ġuse", "ĠU", ".", "S", ".", "Ġmoney", ".",
        "Ċ", "So"]
_SP = ["▁Scott", "▁Der", "rick", "son", "'", "s", "▁film", "▁didn", "'", "t", "▁use", "▁U", ".", "S", ".", "▁money",
       ".", "<0x0A>", "So"]
_WORDS = ["Scott", "Derrickson's", "film", "didn't", "use", "U.S.", "money.", "", "So"]


@pytest.mark.parametrize("raw", [_BPE, _SP], ids=["smollm2-style", "llama2-style"])
def test_words_are_the_references_whitespace_delimited_units(raw):
    """Punctuation and apostrophes stay in the word (the reference's "▁"-delimited words); a newline is a unit of its
    own; the stopword test reads the word without its surrounding punctuation and a clitic by its stem."""
    from inference.dynamic_rag.signals import group_words, has_text, is_content_word

    tok = _PieceTok(raw, "bpe" if raw is _BPE else "sp")
    pieces = TokenText(tok).pieces(list(range(len(raw))))
    assert "".join(pieces) == " Scott Derrickson's film didn't use U.S. money.\nSo"
    words = ["".join(pieces[i] for i in idx).strip() for idx in group_words(pieces)]
    assert words == _WORDS
    assert [is_content_word(w) for w in words] == [True, True, True, False, True, True, True, False, False]
    assert not has_text(words[7]) and not is_content_word("'s") and not is_content_word(" .")


def test_qfs_fills_its_top_n_with_whole_words_not_fragments():
    from inference.dynamic_rag.signals import qfs_query

    pieces = _PieceTok(_SP, "sp")
    pieces = TokenText(pieces).pieces(list(range(len(_SP))))
    row = torch.full((len(pieces),), 0.01)
    row[5] = 0.5  # the "s" of "Derrickson's"
    row[9] = 0.4  # the "t" of "didn't": a stopword once whole
    row[14] = 0.3  # the second "." of "U.S."
    # "Derrickson's" = 0.01 * 4 + 0.5; "U.S." = 0.01 * 3 + 0.3; then "Scott", "film", "use", "money." at 0.01-0.02
    assert qfs_query(row, pieces, [True] * len(pieces), 2) == "Derrickson's U.S."
