"""Sentence boundaries (FS-RAG windows, DRAGIN truncation) and the token-piece view of generated text."""

import pytest
import torch
from tokenizer_matrix import TOKENIZERS, shared_tokenizer

from adaptive_rag.lm.tokenization import continuation_ids
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


# Hand-built pieces of " Scott Derrickson's film didn't use U.S. money.\nSo 1970" as each family decodes them
# (TokenText: each piece as it reads in the middle of a text). Byte-level BPE (SmolLM2): "ĠScott", "ĠDer", ...,
# "Ċ", "So", "Ġ", "1", "9", "7", "0"; SentencePiece (Llama-2): "▁Scott", ..., "'", "s", ..., "<0x0A>", "So", "▁",
# "1", "9", "7", "0" (a lone "▁" before digits on both).
_BPE = [" Scott", " Der", "rick", "son", "'s", " film", " didn", "'t", " use", " U", ".", "S", ".", " money", ".",
        "\n", "So", " ", "1", "9", "7", "0"]
_SP = [" Scott", " Der", "rick", "son", "'", "s", " film", " didn", "'", "t", " use", " U", ".", "S", ".", " money",
       ".", "\n", "So", " ", "1", "9", "7", "0"]
_WORDS = ["Scott", "Derrickson's", "film", "didn't", "use", "U.S.", "money.", "So", "1970"]


@pytest.mark.parametrize("pieces", [_BPE, _SP], ids=["smollm2-style", "llama2-style"])
def test_words_are_the_references_whitespace_delimited_units(pieces):
    """Punctuation and apostrophes stay in the word (the reference's "▁"-delimited words); a newline opens the word
    after it and a lone space the number after it, as the reference's rule does; the stopword test reads the word
    without its surrounding punctuation and a clitic by its stem."""
    from inference.dynamic_rag.signals import group_words, is_content_word

    assert "".join(pieces) == " Scott Derrickson's film didn't use U.S. money.\nSo 1970"
    groups = group_words(pieces)
    words = ["".join(pieces[i] for i in idx).strip() for idx in groups]
    assert words == _WORDS
    assert [len(idx) for idx in groups][-1] == 5  # " ", "1", "9", "7", "0": the number keeps all five tokens
    assert [is_content_word(w) for w in words] == [True, True, True, False, True, True, True, False, True]
    assert not is_content_word("'s") and not is_content_word(" .")


@pytest.mark.parametrize("family", TOKENIZERS)
def test_real_tokenizers_give_the_hand_built_words(family):
    """The same sentence through each real tokenizer family: its pieces join to the text, and its words are the
    hand-built ones."""
    from inference.dynamic_rag.signals import group_words

    tok = shared_tokenizer(family)
    text = " Scott Derrickson's film didn't use U.S. money.\nSo 1970"
    pieces = TokenText(tok).pieces(continuation_ids(tok, text))
    assert "".join(pieces) == text
    assert ["".join(pieces[i] for i in idx).strip() for idx in group_words(pieces)] == _WORDS


def test_specials_are_empty_pieces(smol_tokenizer):
    tt = TokenText(smol_tokenizer)
    assert tt.marker == "Ġ"
    assert tt.pieces([smol_tokenizer.eos_token_id]) == [""]


def test_qfs_fills_its_top_n_with_whole_words_not_fragments():
    from inference.dynamic_rag.signals import qfs_query

    pieces = _SP
    row = torch.full((len(pieces),), 0.01)
    row[5] = 0.5  # the "s" of "Derrickson's"
    row[9] = 0.4  # the "t" of "didn't": a stopword once whole
    row[14] = 0.3  # the second "." of "U.S."
    # "Derrickson's" = 0.01 * 4 + 0.5; "U.S." = 0.01 * 3 + 0.3; then the others at 0.01-0.05
    assert qfs_query(row, pieces, [True] * len(pieces), 2) == "Derrickson's U.S."
