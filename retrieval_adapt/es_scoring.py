"""BM25 as Elasticsearch 7 scores a field (Lucene's BM25Similarity, k1 1.2, b 0.75), and ``best_fields``.

Per field, with that field's own statistics (Lucene's ``CollectionStatistics``): ``docCount`` is the number of
documents with at least one term in the field, ``avgdl = sumTotalTermFreq / docCount``. A term's weight is
``(k1 + 1) * idf`` with ``idf = log(1 + (docCount - df + 0.5) / (df + 0.5))``; a document's score for it is
``weight * tf / (tf + k1 * (1 - b + b * L / avgdl))``, where ``L`` is the field length (terms after stopwords) as
Lucene's one-byte norm stores it: exact up to 23, then only the four most significant bits of ``length - 24`` are
kept (``SmallFloat.intToByte4``), so a field of 100 terms is scored as 96 long. Elasticsearch 7 keeps the
``(k1 + 1)`` factor (``LegacyBM25Similarity``, explain's "boost 2.2"); Lucene 8+'s own BM25Similarity drops it,
which changes every score by the same factor and no ranking. Everything is float32 in Lucene's order of operations,
so the scores are the ones Elasticsearch returns (sums of clauses aside, which Lucene may add in another order).

``best_fields`` with ``tie_breaker`` t is a ``DisjunctionMaxQuery``: the best field's score plus t times the others'.
"""

from __future__ import annotations

import numpy as np

K1 = 1.2
B = 0.75
TIE_BREAKER = 0.5
_FREE = 24  # SmallFloat: byte values below 24 are the length itself


def _int4_to_long(i: np.ndarray) -> np.ndarray:
    bits = i & 0x07
    shift = (i >> 3) - 1
    return np.where(shift == -1, bits, (bits | 0x08) << np.maximum(shift, 0))


def _long_to_int4(i: np.ndarray) -> np.ndarray:
    i = i.astype(np.int64)
    num_bits = np.frexp(i.astype(np.float64))[1].astype(np.int64)  # 64 - numberOfLeadingZeros (0 for 0)
    shift = np.maximum(num_bits - 4, 0)
    encoded = ((i >> shift) & 0x07) | ((shift + 1) << 3)
    return np.where(num_bits < 4, i, encoded)


def encode_length(length: np.ndarray) -> np.ndarray:
    """``SmallFloat.intToByte4``: the norm byte (0-255) of each field length."""
    length = np.asarray(length, dtype=np.int64)
    return np.where(length < _FREE, length, _FREE + _long_to_int4(np.maximum(length - _FREE, 0)))


# BM25Similarity.LENGTH_TABLE: what each norm byte decodes to
LENGTH_TABLE = np.where(np.arange(256) < _FREE, np.arange(256), _FREE + _int4_to_long(np.arange(256) - _FREE))


def stored_length(length: np.ndarray) -> np.ndarray:
    """The field length a Lucene index scores with (``byte4ToInt(intToByte4(length))``)."""
    return LENGTH_TABLE[encode_length(length)]


def avg_length(sum_ttf: int, doc_count: int) -> np.float32:
    return np.float32(sum_ttf / doc_count) if doc_count else np.float32(1)


def idf(df: np.ndarray, doc_count: int) -> np.ndarray:
    """float32 idf per document frequency (0 for a term absent from the field)."""
    df = np.asarray(df, dtype=np.float64)
    out = np.log(1 + (doc_count - df + 0.5) / (df + 0.5)).astype(np.float32)
    return np.where(df > 0, out, np.float32(0)).astype(np.float32)


def norm_inverse(avgdl: np.float32, k1: float = K1, b: float = B) -> np.ndarray:
    """BM25Similarity's cache: ``1 / (k1 * ((1 - b) + b * L / avgdl))`` for each of the 256 norm bytes."""
    f = np.float32
    length = LENGTH_TABLE.astype(np.float32)
    return (f(1) / (f(k1) * ((f(1) - f(b)) + f(b) * length / f(avgdl)))).astype(np.float32)


def entry_scores(tf: np.ndarray, length: np.ndarray, term_idf: np.ndarray, avgdl: np.float32, k1: float = K1,
                 b: float = B) -> np.ndarray:
    """The score of each (term, document) entry: term frequency, the document's field length (unquantised) and
    the term's idf, one value per entry; float32 as BM25Scorer computes it."""
    f = np.float32
    weight = (f(k1 + 1) * term_idf.astype(np.float32)).astype(np.float32)
    inv = norm_inverse(avgdl, k1, b)[encode_length(length)]
    return (weight - weight / (f(1) + tf.astype(np.float32) * inv)).astype(np.float32)


def best_fields(field_scores: list[np.ndarray], tie_breaker: float = TIE_BREAKER) -> np.ndarray:
    """DisjunctionMaxScorer: the largest field score plus ``tie_breaker`` times the sum of the others (summed in
    double, returned as float32). ``field_scores`` are float32 arrays of one shape."""
    stacked = np.sort(np.stack([np.asarray(s, dtype=np.float32) for s in field_scores]), axis=0)
    best = stacked[-1]
    others = stacked[:-1].astype(np.float64).sum(axis=0)
    return (best.astype(np.float64) + others * np.float32(tie_breaker)).astype(np.float32)
