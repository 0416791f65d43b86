"""Sentence boundaries (FS-RAG windows, DRAGIN truncation) and the token-piece view of generated text."""

import pytest

from inference.text_units import TokenText, ends_sentence, split_sentences


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
