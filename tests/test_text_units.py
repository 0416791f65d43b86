"""Sentence boundaries (FS-RAG windows, DRAGIN truncation) and the token-piece view of generated text."""

import pytest

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
