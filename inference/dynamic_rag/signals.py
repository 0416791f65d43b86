"""DRAGIN's signals as pure functions over recorded generation signals (hand-checkable; no model here).

Definitions (SPEC.md, DRAGIN paper): for generated tokens t_1..t_n,

* ``H_i = -Σ_v p_i(v) log p_i(v)``: recorded by the decoder;
* ``a_max(i) = max_{j>i} A[j, i]``: the most last-layer attention any later generated token pays to t_i;
* ``s_i = 0`` when t_i's word is a stopword (or has no letter/digit), else 1;
* ``S_RIND(t_i) = H_i · a_max(i) · s_i`` computed on words (sub-word pieces merged).

DRAGIN's reference code (oneal2000/DRAGIN ``src/generate.py``, ``AttnWeightRAG``) differs in places; its variants are
here too, each named ``..._reference``: per head the max over query rows (diagonal included) before the mean over
heads, and QFS from the attention rows of the positions before the hit words, averaged over the hits.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from inference.dynamic_rag.text_units import contains_real_word


def _spacy_stop_words() -> frozenset[str]:
    """spaCy's English stopword list (SPEC: the reference used spaCy), read from spaCy's own file: importing
    ``spacy.lang.en.stop_words`` imports all of spaCy, seconds for one set of words."""
    spec = importlib.util.find_spec("spacy")  # locates the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("spaCy is not installed (pip install spacy): DRAGIN's stopword list comes from it")
    path = Path(next(iter(spec.submodule_search_locations))) / "lang" / "en" / "stop_words.py"
    namespace: dict = {}
    exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)  # a plain list of words
    return frozenset(namespace["STOP_WORDS"])


STOP_WORDS = _spacy_stop_words()
WordAgg = Literal["mean", "max", "sum"]


# English clitics: a word ending in one is tested by its stem ("didn't" -> "did", "Derrickson's" -> "Derrickson"),
# as spaCy, whose list this is, tokenizes them apart before its own stopword test.
_CLITIC = re.compile(r"(?:n't|'s|'re|'ve|'d|'ll|'m)$")
_EDGE_PUNCTUATION = ".,;:!?\"'()[]{}<>«»“”‘’-–—*_/\\"


def bare_word(word: str) -> str:
    """The word without the punctuation around it ("(Paris)." -> "Paris"; "U.S." -> "U.S"; inner marks stay)."""
    return word.strip().strip(_EDGE_PUNCTUATION)


def has_text(word: str) -> bool:
    """False for a unit of punctuation or white space alone (".", a newline, "--"): never content, never a
    trigger."""
    return any(c.isalnum() for c in word)


def is_content_word(word: str) -> bool:
    """``s_i``: 1 for a word with a letter or digit that is not on spaCy's English stopword list. The test reads the
    word stripped of the punctuation around it, and a clitic's stem: "Derrickson's" and "U.S." are content words,
    "didn't", "it's" and "The," are not."""
    whole = word.strip().lower().replace("’", "'")
    w = bare_word(whole)
    if not has_text(w) or whole in STOP_WORDS or w in STOP_WORDS:
        return False
    stem = _CLITIC.sub("", w)
    return bool(stem) and stem not in STOP_WORDS


def group_words(pieces: list[str]) -> list[list[int]]:
    """Token indices grouped into words as DRAGIN's reference code forms them (``src/generate.py``): a word starts at
    the first token and at a piece that begins with white space (the tokenizer's word marker, decoded: "Ġ" or "▁";
    a newline token, which the reference names by its Llama-2 id 13); every other piece joins the word before it.
    So "Paris.", "Derrickson's" and "U.S." are one word each; a lone space piece (Llama-2 and SmolLM2 write " 1970"
    as " ", "1", "9", "7", "0") starts the number's word; a newline and the word right after it ("\nThe") are one
    word. An empty piece (a special token, or a byte token whose character a later token completes) joins the word
    before it, as the reference's byte and "</s>" tokens do."""
    words: list[list[int]] = []
    for i, piece in enumerate(pieces):
        if not words or piece[:1].isspace():
            words.append([i])
        else:
            words[-1].append(i)
    return words


def a_max(rows: list[torch.Tensor], prompt_len: int, n: int | None = None) -> torch.Tensor:
    """``a_max(i) = max_{j>i} rows[j][prompt_len + i]`` for generated tokens i < n; 0 where no later row exists.

    ``rows[j]`` is the attention row of generated token j over positions ``0 .. prompt_len + j``.
    """
    n = len(rows) if n is None else n
    out = torch.zeros(n)
    for j in range(1, len(rows)):
        upto = min(j, n)
        if upto:
            out[:upto] = torch.maximum(out[:upto], rows[j][prompt_len:prompt_len + upto])
    return out


def a_max_reference(rows: list[torch.Tensor], prompt_len: int, n: int | None = None) -> torch.Tensor:
    """The reference code's attention per generated token: per head ``max_{j>=i} rows[j][h, prompt_len + i]`` (the
    token's own row included), then the mean over heads; 0 where no row covers the token.

    ``rows[j]`` is generated token j's row per head, shape (H, prompt_len + j + 1). The reference takes this max
    over a second forward pass of the generated text alone; here the rows come from generation itself, so each row's
    softmax also covers the prompt (the columns read are the generated ones only).
    """
    n = len(rows) if n is None else n
    if not rows:
        return torch.zeros(n)
    per_head = torch.zeros(rows[0].shape[0], n)
    for j, row in enumerate(rows):
        upto = min(j + 1, n)
        per_head[:, :upto] = torch.maximum(per_head[:, :upto], row[:, prompt_len:prompt_len + upto])
    return per_head.mean(dim=0)


def _agg(values: list[float], how: WordAgg) -> float:
    if how == "mean":
        return sum(values) / len(values)
    if how == "max":
        return max(values)
    return sum(values)


@dataclass
class WordScore:
    word: str
    tokens: list[int]  # generated-token indices
    entropy: float
    attention: float
    content: bool

    @property
    def score(self) -> float:
        return self.entropy * self.attention * float(self.content)

    @property
    def unfiltered_score(self) -> float:
        """``H · a`` without the stopword indicator (the reference thresholds this, then filters)."""
        return self.entropy * self.attention


def rind_word_scores(pieces: list[str], entropies: list[float], amax: torch.Tensor, *,
                     entropy_agg: WordAgg = "mean", attention_agg: WordAgg = "sum",
                     words: list[tuple[list[int], str]] | None = None) -> list[WordScore]:
    """RIND per word. Defaults follow the reference code: entropy averaged, attention summed over pieces.
    ``words``: (token indices, text) per word when the words are not the pieces' (``word_text: tokens``)."""
    scores = []
    for idx, word in words if words is not None else ((g, "".join(pieces[i] for i in g).strip())
                                                      for g in group_words(pieces)):
        scores.append(WordScore(word, idx, _agg([entropies[i] for i in idx], entropy_agg),
                                _agg([float(amax[i]) for i in idx], attention_agg), is_content_word(word)))
    return scores


def _real_word_content(view, words: list[WordScore], rules) -> list[WordScore]:
    """Content flags as ``check_real_words`` sets them: a word counts when it contains a real word (NOUN, ADJ, VERB,
    PROPN, NUM) of its sentence as the spaCy pipeline tags it."""
    real: dict[int, frozenset[str]] = {}
    out = []
    for w in words:
        start = view.sentence_start(w.tokens[0])
        if start not in real:
            real[start] = rules.real_words("".join(view.pieces[start:view.sentence_end(start)]).strip())
        out.append(WordScore(w.word, w.tokens, w.entropy, w.attention,
                             has_text(w.word) and contains_real_word(w.word, real[start])))
    return out


def renormalise_like_reference(scores: list[WordScore], sentence_of_word: list[int]) -> list[WordScore]:
    """The reference code's variant (not in the paper): within each sentence, attention is renormalised to sum
    to 1 and multiplied by the sentence's word count. Kept as a switch (``rind_normalisation: reference``)."""
    out = list(scores)
    for sent in sorted(set(sentence_of_word)):
        members = [i for i, s in enumerate(sentence_of_word) if s == sent]
        total = sum(scores[i].attention for i in members)
        for i in members:
            att = scores[i].attention / total * len(members) if total > 0 else 0.0
            out[i] = WordScore(scores[i].word, scores[i].tokens, scores[i].entropy, att, scores[i].content)
    return out


def qfs_query(row: torch.Tensor, pieces: list[str], eligible: list[bool], top_n: int) -> str:
    """Query Formulation based on Self-attention: the ``top_n`` words that the triggering token attends to most
    (attention summed over a word's pieces), restricted to eligible positions (question and generated text;
    not few-shot demos or template), stopwords and punctuation excluded, joined in their original order.

    ``row``, ``pieces`` and ``eligible`` are aligned over all positions preceding the triggering token.
    """
    if not (len(row) == len(pieces) == len(eligible)):
        raise ValueError(f"row ({len(row)}), pieces ({len(pieces)}) and eligible ({len(eligible)}) must align")
    candidates = []
    for idx in group_words(pieces):
        word = "".join(pieces[i] for i in idx).strip()
        if all(eligible[i] for i in idx) and is_content_word(word):
            candidates.append((float(sum(row[i] for i in idx)), idx[0], word))
    best = sorted(candidates, key=lambda c: -c[0])[:top_n]
    return " ".join(word for _, _, word in sorted(best, key=lambda c: c[1]))


def qfs_query_reference(rows_before: list[list[torch.Tensor]], hit_starts: list[int], pieces: list[str],
                        eligible: list[bool], exclude: set[int], top_n: int,
                        real_words: frozenset[str] | None = None) -> str:
    """QFS as the reference code computes it (``keep_real_words``): for each hit word starting at position ``r0``
    and each of its tokens i, the attention row of position i-1 over positions before ``r0`` (eligible ones only,
    renormalised to sum 1), averaged over the word's tokens; those averaged over the hit words; a candidate word's
    weight is the sum over its tokens. The ``top_n`` heaviest content words, hit words (positions in ``exclude``)
    left out, joined in text order.

    ``real_words``: the reference's real words of the whole text (``keep_real_words``: a word is a candidate when one
    of them is a substring of it); None: the project's stopword test.

    ``rows_before[h][t]`` is the (head-averaged) row of the position before token t of hit word h, over at least
    ``hit_starts[h]`` positions; ``pieces`` and ``eligible`` cover every position that may fill the query (the
    reference's text runs to the end of the triggering sentence; words after the hits weigh 0).
    """
    if len(pieces) != len(eligible):
        raise ValueError(f"pieces ({len(pieces)}) and eligible ({len(eligible)}) must align")
    if not rows_before or len(rows_before) != len(hit_starts):
        raise ValueError("QFS needs at least one hit word, and one list of rows per hit word")
    mask = torch.tensor(eligible, dtype=torch.float32)
    weight = torch.zeros(len(pieces))
    for rows, r0 in zip(rows_before, hit_starts):
        word = torch.zeros(len(pieces))
        for row in rows:
            v = row[:r0].float() * mask[:r0]
            if float(v.sum()) > 0:
                word[:r0] += v / v.sum()
        weight += word / max(1, len(rows))
    weight /= len(rows_before)
    candidates = []
    for idx in group_words(pieces):
        text = "".join(pieces[i] for i in idx).strip()
        content = is_content_word(text) if real_words is None else any(r in text for r in real_words)
        if all(eligible[i] for i in idx) and not exclude.intersection(idx) and content:
            candidates.append((float(weight[idx].sum()), idx[0], text))
    best = sorted(candidates, key=lambda c: -c[0])[:top_n]
    return " ".join(word for _, _, word in sorted(best, key=lambda c: c[1]))


def flare_masked_query(pieces: list[str], probs: list[float], mask_prob: float) -> str:
    """FLARE's query: the tentative sentence with every token of probability ≤ ``mask_prob`` replaced by a space
    (jzbjyb/FLARE ``use_as_query``, ``mask_method="simple"``), so the pieces on either side never fuse into one
    word; runs of white space collapse to one."""
    return " ".join("".join(p if q > mask_prob else " " for p, q in zip(pieces, probs)).split())


def raw_words(view) -> list[tuple[list[int], str]] | None:
    """``word_text: tokens``: the round's words as the reference code forms them (raw token strings, grouped by its
    rules; inference/dynamic_rag/token_words.py), or None for words of decoded pieces."""
    raw = getattr(view, "raw_words", None)
    if raw is None:
        return None
    tokens = view.raw_tokens()[:len(view.pieces)]
    return [(g, raw.text(tokens, g)) for g in raw.groups(view.ids[:len(view.pieces)], tokens)]


def round_word_signals(view, cfg, *, raw_only: bool = False) -> list[WordScore]:
    """RIND's per-word entropy, attention and stopword flag for one round (a
    :class:`inference.dynamic_rag.round_view.RoundView`):
    attention per ``cfg.rind_attention``, renormalised per ``cfg.rind_normalisation``, words aggregated per
    ``cfg.entropy_agg`` / ``cfg.attention_agg``. The RIND trigger decides from them; the trace view shows them
    (the same step asks twice with ``keep_signals``: the second call reuses the first's words). ``raw_only``: before
    the content flags and the renormalisation (the reference code's modifier takes the real words of the firing
    sentence and renormalises over its own sentence ranges)."""
    n, prompt_len = len(view.pieces), len(view.prompt_pieces)
    authors = getattr(view, "authors_attention", None)
    key = (view.rows, view.entropies, authors, cfg, raw_only)  # the same objects: the same step, nothing changed since
    cached = getattr(view, "__dict__", {}).get("_word_signals")
    if cached is not None and cached[0] == n and all(a is b for a, b in zip(cached[1], key)):
        return cached[2]
    if getattr(cfg, "attention_pass", "in_flight") == "authors" and authors is not None and len(authors) >= n:
        # the reference's second pass over the generated text (inference/dynamic_rag/authors_pass.py)
        attention = authors[:n]
    elif not view.rows:
        attention = torch.zeros(n)
    elif cfg.rind_attention == "reference":
        if view.rows[0].dim() != 2:
            raise ValueError("rind_attention 'reference' needs attention rows kept per head")
        attention = a_max_reference(view.rows, prompt_len, n)
    else:
        attention = a_max([view.row(j) for j in range(len(view.rows))], prompt_len, n)
    words = rind_word_scores(view.pieces, view.entropies, attention, entropy_agg=cfg.entropy_agg,
                             attention_agg=cfg.attention_agg, words=raw_words(view))
    if raw_only:  # their modifier reads the real words of the firing sentence alone
        return words
    rules = getattr(view, "rules", None)
    if rules is not None and rules.nlp is not None:  # the reference's real words of each word's own sentence
        words = _real_word_content(view, words, rules)
    if cfg.rind_normalisation == "reference":
        words = renormalise_like_reference(words, [view.sentence_start(w.tokens[0]) for w in words])
    if hasattr(view, "__dict__"):
        view.__dict__["_word_signals"] = (n, key, words)
    return words
