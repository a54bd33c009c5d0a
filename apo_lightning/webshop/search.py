"""Lucene-compatible BM25 search over the WebShop catalogue (WEBSHOP_SPEC.md §4.5).

WebShop's ``engine.py`` sends every ``search[...]`` action to pyserini's ``LuceneSearcher.search(query, k=50)``,
which runs Anserini's ``BagOfWordsQueryGenerator`` over Lucene 9.5's ``BM25Similarity(k1=0.9, b=0.4)``. This
file reproduces that ranking and its float32 scores bit for bit, in two parts:

* :func:`analyze` ports Anserini's ``DefaultEnglishAnalyzer`` (StandardTokenizer → EnglishPossessiveFilter →
  LowerCaseFilter → StopFilter → PorterStemFilter). It is used for queries, and for documents only when no
  Lucene-made token file is shipped (for instance a synthetic catalogue).
* :class:`SearchEngine` is an in-memory inverted index with Lucene's scoring arithmetic.

Float arithmetic, step by step, as Lucene does it (a reader checking the code should know these):

1. ``idf = (float) ln(1 + (N - df + 0.5) / (df + 0.5))``: computed in double, then rounded to float32. N counts
   the documents that have at least one token (Lucene's ``CollectionStatistics.docCount``).
2. ``avgdl = (float) (sumTotalTermFreq / (double) N)``: it uses the *exact* token total, not the quantised
   lengths.
3. A document's length is stored as one byte (``SmallFloat.intToByte4``) and decoded again, so lengths of 32 and
   more lose precision (100 → 96, 1000 → 984). The decoded length enters
   ``normInverse = 1f / (k1 * ((1 - b) + b * L / avgdl))``, evaluated in float32, left to right.
4. Per term: ``weight = boost * idf`` (float32; boost = the term's count in the query), then
   ``weight - weight / (1f + tf * normInverse)``. This is float32 throughout; each operation rounds.
5. The clause scores of the disjunction are added in **double** and the sum is cast to float32 once. Sums of a
   few float32 values of similar size are exact in double, so the order of the clauses does not matter.
   (Adding in float32 instead changes the last bit of the scores in 591 of the 770 golden queries.)

Ranking is by score descending, then by document id ascending (Anserini's sort), and only documents that
match at least one query term (score > 0) are returned.

Only ``1f + tf * normInverse`` depends on the document, and it does not depend on the query. So it is
precomputed once per posting, and a query costs one float32 division and one subtraction per posting.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import regex
from nltk.stem.porter import PorterStemmer

__all__ = [
    "BM25_B",
    "BM25_K1",
    "STOP_WORDS",
    "SearchEngine",
    "analyze",
    "decode_length",
    "encode_length",
    "quantize_length",
]

#: BM25 parameters of WebShop's ``LuceneSearcher`` (Anserini's defaults), as the float32 values Lucene stores.
BM25_K1 = np.float32(0.9)
BM25_B = np.float32(0.4)

#: Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (33 words), which Anserini's DefaultEnglishAnalyzer uses.
STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)

# ----------------------------------------------------------------------------------------------- analyzer
# StandardTokenizer segments text by the UAX #29 word-boundary rules. The `regex` module implements those
# rules for `\b` under its WORD flag, so splitting at every `\b` yields the same segments, including the
# separators between words. Lucene then keeps only the "word-like" segments:
#   * those made of letters, digits (and connectors such as `_`): ALPHANUM/NUM tokens, e.g. `3.5`, `i'm`,
#     `description:solid`;
#   * pictographic symbols (EMOJI tokens), e.g. `★`, `♡`, `🌸`.
_WORD_BOUNDARY = regex.compile(r"\b", flags=regex.WORD | regex.V1)
_WORD_START = regex.compile(r"[\p{L}\p{Nd}_]")
_HAS_LETTER_OR_DIGIT = regex.compile(r"[\p{L}\p{Nd}]")

# Lucene 9.5's tokenizer tables use the Extended_Pictographic property of Unicode's emoji data 11-12.
# `regex`'s own \p{Extended_Pictographic} is narrower (it misses e.g. ★ U+2605 and ♡ U+2661, which Lucene emits
# as tokens), so the code point ranges are listed here. Checked on the 1k catalogue: ★ ♡ ♚ ♫ ♬ ☚ ☛ ☞ ❥ ❧ are
# tokens, while ☆ ✓ ✦ ✧ ✱ ✿ ❀ ➤ ❶ are not, exactly as these ranges say. Regional indicators (flags) are added.
_PICTOGRAPHIC_RANGES = (
    "\u00a9\u00ae\u203c\u2049\u2122\u2139\u2194-\u2199\u21a9\u21aa\u231a\u231b\u2328\u2388\u23cf"
    "\u23e9-\u23f3\u23f8-\u23fa\u24c2\u25aa\u25ab\u25b6\u25c0\u25fb-\u25fe\u2600-\u2605\u2607-\u2612"
    "\u2614-\u2685\u2690-\u2705\u2708-\u2712\u2714\u2716\u271d\u2721\u2728\u2733\u2734\u2744\u2747\u274c"
    "\u274e\u2753-\u2755\u2757\u2763-\u2767\u2795-\u2797\u27a1\u27b0\u27bf\u2934\u2935\u2b05-\u2b07"
    "\u2b1b\u2b1c\u2b50\u2b55\u3030\u303d\u3297\u3299"
    "\U0001f000-\U0001f0ff\U0001f10d-\U0001f10f\U0001f12f\U0001f16c-\U0001f171\U0001f17e\U0001f17f"
    "\U0001f18e\U0001f191-\U0001f19a\U0001f1ad-\U0001f1ff\U0001f201-\U0001f20f\U0001f21a\U0001f22f"
    "\U0001f232-\U0001f23a\U0001f23c-\U0001f23f\U0001f249-\U0001f3fa\U0001f400-\U0001f53d"
    "\U0001f546-\U0001f64f\U0001f680-\U0001f6ff\U0001f774-\U0001f77f\U0001f7d5-\U0001f7ff"
    "\U0001f80c-\U0001f80f\U0001f848-\U0001f84f\U0001f85a-\U0001f85f\U0001f888-\U0001f88f"
    "\U0001f8ae-\U0001f8ff\U0001f90c-\U0001f93a\U0001f93c-\U0001f945\U0001f947-\U0001faff"
    "\U0001fc00-\U0001fffd"
)
_PICTOGRAPHIC_START = regex.compile(f"[{_PICTOGRAPHIC_RANGES}]")

# `regex` keeps a leading apostrophe on a word ("'em", "'is"); UAX #29 (and Lucene) never starts a word with one.
_LEADING_APOSTROPHES = "'\u2019"
# EnglishPossessiveFilter removes a final "'s" written with any of these apostrophes (before lower-casing).
_POSSESSIVE_APOSTROPHES = "'\u2019\uff07"

_STEMMER = PorterStemmer(mode=PorterStemmer.MARTIN_EXTENSIONS)


def _is_word_segment(segment: str) -> bool:
    """Whether a UAX #29 segment is a token StandardTokenizer emits (word, number or pictographic symbol)."""
    first = segment[0]
    if first.isascii():  # fast path for the common case; no ASCII character is pictographic
        return first.isalnum() or (first == "_" and _HAS_LETTER_OR_DIGIT.search(segment) is not None)
    if _PICTOGRAPHIC_START.match(segment):
        return True
    return _WORD_START.match(segment) is not None and _HAS_LETTER_OR_DIGIT.search(segment) is not None


@lru_cache(maxsize=1 << 17)
def _segment_token(segment: str) -> str | None:
    """The token one UAX #29 segment becomes after the token filters, or None if it is dropped.

    Cached: text is made of few distinct segments (words, spaces, punctuation), and Porter stemming is the
    slow part of the analysis.
    """
    segment = segment.lstrip(_LEADING_APOSTROPHES)
    if not segment or not _is_word_segment(segment):
        return None
    if len(segment) >= 2 and segment[-1] in "sS" and segment[-2] in _POSSESSIVE_APOSTROPHES:
        segment = segment[:-2]  # EnglishPossessiveFilter
    segment = segment.lower()  # LowerCaseFilter
    if not segment or segment in STOP_WORDS:  # StopFilter
        return None
    # PorterStemFilter; NLTK leaves words of <= 2 characters alone, as Porter's C code does.
    return _STEMMER.stem(segment, to_lowercase=False)


def analyze(text: str) -> list[str]:
    """Tokens of ``text`` as Anserini's ``DefaultEnglishAnalyzer`` (Lucene 9.5) produces them.

    The chain is: UAX #29 word segmentation (Lucene ``StandardTokenizer``), dropping a trailing ``'s``/``’s``
    (``EnglishPossessiveFilter``), lower-casing, removing Lucene's 33 English stop words (:data:`STOP_WORDS`),
    and Porter stemming (``PorterStemFilter``; here NLTK's ``PorterStemmer`` in ``MARTIN_EXTENSIONS`` mode,
    which has the same "departures" from the published algorithm as Porter's C code).

    Examples: ``"women's shoes"`` → ``["women", "shoe"]``; ``"x-large"`` → ``["x", "larg"]``;
    ``"the and of"`` → ``[]``.

    Agreement with real Lucene: all 770 golden queries (``golden/bm25_top50_golden.jsonl``) and all 1,000
    documents of the 1k catalogue (``search_doc_tokens.jsonl``) give identical token lists. Known gaps, absent
    from that data: tokens longer than 255 characters (Lucene splits them) and characters whose Java and Python
    lower-case forms differ (e.g. ``İ``).

    Args:
        text: any string (a query or a document's ``contents``). The empty string gives ``[]``.

    Returns:
        The tokens in text order, duplicates kept.
    """
    segment_tokens = map(_segment_token, _WORD_BOUNDARY.split(text))
    return [token for token in segment_tokens if token is not None]


# ------------------------------------------------------------------------------------ length quantisation
# Lucene stores a document's length in one byte (SmallFloat.intToByte4): the 24 smallest lengths are stored
# as they are; above that, (length - 24) is written as a tiny float with a 3-bit mantissa and an implicit
# leading 1, rounded *down*. So lengths up to 31 are exact, and longer ones keep 4 significant bits of
# (length - 24).
_EXACT_LENGTHS = 24


def encode_length(length: int) -> int:
    """The one-byte norm (0..255) Lucene stores for a document of ``length`` tokens.

    Source: Lucene ``SmallFloat.intToByte4`` (``BM25Similarity.computeNorm``).

    Raises:
        ValueError: ``length`` is negative.
    """
    if length < 0:
        raise ValueError(f"a document length cannot be negative, got {length}")
    if length < _EXACT_LENGTHS:
        return length
    excess = length - _EXACT_LENGTHS
    if excess < 8:  # "subnormal": fewer than 4 significant bits, kept exactly
        return _EXACT_LENGTHS + excess
    shift = excess.bit_length() - 4  # keep the top 4 bits; the leading one is implicit
    mantissa = (excess >> shift) & 0b111
    return _EXACT_LENGTHS + (((shift + 1) << 3) | mantissa)


def decode_length(norm: int) -> int:
    """The document length Lucene's BM25 uses for a stored one-byte ``norm`` (Lucene ``SmallFloat.byte4ToInt``).

    Raises:
        ValueError: ``norm`` is outside 0..255.
    """
    if not 0 <= norm <= 255:
        raise ValueError(f"a norm byte must lie in 0..255, got {norm}")
    if norm < _EXACT_LENGTHS:
        return norm
    code = norm - _EXACT_LENGTHS
    shift = (code >> 3) - 1
    mantissa = code & 0b111
    excess = mantissa if shift < 0 else (mantissa | 0b1000) << shift
    return _EXACT_LENGTHS + excess


def quantize_length(length: int) -> int:
    """The length BM25 sees for a document of ``length`` tokens: exact below 32; above, ``length - 24`` is
    rounded down to 4 significant bits (100 → 96, 150 → 144, 300 → 280, 500 → 472, 1000 → 984).

    Raises:
        ValueError: ``length`` is negative.
    """
    return decode_length(encode_length(length))


# ------------------------------------------------------------------------------------------------- engine
class SearchEngine:
    """BM25 over an in-memory inverted index, ranked exactly as WebShop's pyserini ``LuceneSearcher`` ranks.

    Sources: Lucene 9.5 ``BM25Similarity`` (k1 = 0.9, b = 0.4), ``BooleanQuery`` disjunction scoring, Anserini
    ``BagOfWordsQueryGenerator`` and ``SimpleSearcher.search`` (ties broken by document id); WebShop
    ``web_agent_site/engine/engine.py`` (``get_top_n_product_from_keywords``).

    Index layout (CSR over terms; P = total number of distinct (term, document) pairs):

    * ``_posting_start``: (V + 1,) int64, term t's postings are ``[_posting_start[t], _posting_start[t + 1])``;
    * ``_posting_doc``: (P,) int32, document index of each posting, ascending within a term;
    * ``_posting_denominator``: (P,) float32, ``1f + tf * normInverse(doc)``, the query-independent part of
      the BM25 term score;
    * ``_idf``: (V,) float32.

    Attributes:
        doc_ids: the document ids (ASINs), in index order.
        doc_count: number of documents, N.
        avg_doc_length: float32, Lucene's avgdl: total tokens / number of documents with at least one token.
    """

    def __init__(self, doc_ids: Sequence[str], doc_tokens: Sequence[Sequence[str]]) -> None:
        """Build the index from analysed documents.

        Args:
            doc_ids: N distinct document ids (ASINs). Ties in score are broken by these, ascending in code point
                order (what Lucene's UTF-8 byte order gives; for ASCII ASINs, plain string order).
            doc_tokens: N token lists, already analysed (e.g. the lines of ``search_doc_tokens.jsonl``, or
                :func:`analyze` of each document's ``contents``). A document may have no tokens; it then
                matches nothing.

        Raises:
            ValueError: no documents, ``doc_ids`` and ``doc_tokens`` differ in length, or an id repeats.
        """
        if len(doc_ids) != len(doc_tokens):
            raise ValueError(f"got {len(doc_ids)} doc ids but {len(doc_tokens)} token lists; they must pair up")
        if not doc_ids:
            raise ValueError("cannot build a search index over zero documents")
        if len(set(doc_ids)) != len(doc_ids):
            repeated = [doc_id for doc_id, n in Counter(doc_ids).items() if n > 1]
            raise ValueError(f"document ids must be unique; repeated: {repeated[:5]}")

        self.doc_ids: list[str] = list(doc_ids)
        self.doc_count: int = len(self.doc_ids)
        # Rank of each id in sorted order: the secondary sort key (Anserini sorts ties by the id string).
        self._id_rank = np.empty(self.doc_count, dtype=np.int64)
        self._id_rank[np.argsort(np.array(self.doc_ids, dtype=object), kind="stable")] = np.arange(self.doc_count)

        lengths = np.array([len(tokens) for tokens in doc_tokens], dtype=np.int64)  # (N,)
        # Lucene's collection statistics count only documents with at least one token in the field
        # (CollectionStatistics.docCount); an empty document changes neither idf nor avgdl.
        self._docs_with_terms = max(int(np.count_nonzero(lengths)), 1)
        self.avg_doc_length = np.float32(int(lengths.sum()) / self._docs_with_terms)
        quantised = np.array([quantize_length(int(n)) for n in lengths], dtype=np.float32)  # (N,)
        # Lucene's cache[norm] = 1f / (k1 * ((1 - b) + b * L / avgdl)), each step rounded to float32.
        with np.errstate(divide="ignore", invalid="ignore"):  # avgdl = 0 only if no document has a token
            norm_inverse = np.float32(1.0) / (
                BM25_K1 * ((np.float32(1.0) - BM25_B) + BM25_B * quantised / self.avg_doc_length)
            )  # (N,) float32

        # Every (term, document) pair becomes one code term * N + doc; the distinct codes, sorted, are the
        # postings grouped by term with documents ascending, and their multiplicities are the term frequencies.
        self._term_index: dict[str, int] = {}
        token_terms = [self._term_index.setdefault(term, len(self._term_index))
                       for tokens in doc_tokens for term in tokens]
        token_docs = np.repeat(np.arange(self.doc_count, dtype=np.int64), lengths)  # (T,)
        codes, term_freq = np.unique(np.asarray(token_terms, dtype=np.int64) * self.doc_count + token_docs,
                                     return_counts=True)  # (P,), (P,)
        posting_term = codes // self.doc_count
        self._posting_doc = (codes % self.doc_count).astype(np.int32)  # (P,)
        doc_freq = np.bincount(posting_term, minlength=len(self._term_index))  # (V,)
        self._posting_start = np.zeros(len(self._term_index) + 1, dtype=np.int64)  # (V + 1,)
        np.cumsum(doc_freq, out=self._posting_start[1:])
        self._posting_denominator = (
            np.float32(1.0) + term_freq.astype(np.float32) * norm_inverse[self._posting_doc]
        )  # (P,) float32
        # idf in double with the C library's log, rounded once to float32 (Lucene BM25Similarity.idf). Only the
        # distinct document frequencies need a log.
        distinct_df, df_slot = np.unique(doc_freq, return_inverse=True)
        n = self._docs_with_terms
        idf_of_df = [math.log(1.0 + (n - df + 0.5) / (df + 0.5)) for df in distinct_df.tolist()]
        self._idf = np.array(idf_of_df, dtype=np.float64).astype(np.float32)[df_slot]  # (V,) float32

    @classmethod
    def from_contents(cls, doc_ids: Sequence[str], contents: Sequence[str]) -> SearchEngine:
        """Build the index by running :func:`analyze` over each document's text.

        For a data directory without a Lucene-made ``search_doc_tokens.jsonl`` (e.g. a synthetic catalogue).
        On the real 1k catalogue this gives the same tokens as Lucene for all 1,000 documents, but the shipped
        token file remains the reference: a single token's difference shifts a document's length and so the
        scores of every query that matches it.

        Args:
            doc_ids: N distinct ids (ASINs).
            contents: N strings, WebShop's search document ``contents`` (lower-cased title, description, first
                bullet point and option text; ``convert_product_file_format.py``).

        Raises:
            ValueError: as for the constructor.
        """
        return cls(doc_ids, [analyze(text) for text in contents])

    @property
    def vocabulary_size(self) -> int:
        """Number of distinct terms in the index, V."""
        return len(self._term_index)

    def doc_freq(self, term: str) -> int:
        """Number of documents that contain the analysed ``term`` (0 for an unknown term)."""
        t = self._term_index.get(term)
        return 0 if t is None else int(self._posting_start[t + 1] - self._posting_start[t])

    def scores(self, query: str) -> np.ndarray:
        """BM25 scores of every document for ``query``: (N,) float32, 0 for documents that match no term.

        Each query term is one SHOULD clause whose boost is the term's count in the analysed query (Anserini
        BagOfWords). Terms absent from the index are ignored.
        """
        counts = Counter(analyze(query))
        term_ids = [self._term_index[term] for term in counts if term in self._term_index]
        if not term_ids:
            return np.zeros(self.doc_count, dtype=np.float32)
        boosts = np.array([counts[term] for term in counts if term in self._term_index], dtype=np.float32)
        weights = boosts * self._idf[term_ids]  # (Q,) float32, Lucene's weight = boost * idf

        starts = self._posting_start[term_ids]
        ends = self._posting_start[np.asarray(term_ids) + 1]
        slices = [slice(s, e) for s, e in zip(starts.tolist(), ends.tolist())]
        docs = np.concatenate([self._posting_doc[s] for s in slices])  # (P_q,) int32
        denominators = np.concatenate([self._posting_denominator[s] for s in slices])  # (P_q,) float32
        posting_weights = np.repeat(weights, ends - starts)  # (P_q,) float32
        term_scores = posting_weights - posting_weights / denominators  # (P_q,) float32, one rounding per op
        # Lucene adds clause scores in double and casts the sum to float once; bincount adds in double.
        total = np.bincount(docs, weights=term_scores.astype(np.float64), minlength=self.doc_count)  # (N,)
        return total.astype(np.float32)

    def search(self, query: str, k: int = 50) -> list[tuple[str, float]]:
        """The top-``k`` documents for ``query``, as WebShop's ``LuceneSearcher.search(query, k)`` returns them.

        Args:
            query: the raw query text (WebShop passes the lower-cased ``search[...]`` argument). It is analysed
                with :func:`analyze`; a query that analyses to nothing (stop words only) returns ``[]``.
            k: the most hits to return (WebShop's ``SEARCH_RETURN_N`` = 50).

        Returns:
            Up to ``k`` pairs ``(doc_id, score)``, score descending, ties by ``doc_id`` ascending. Only documents
            with score > 0 (matching at least one term) appear. Each score is the float32 Lucene score as a
            Python float (exactly representable, so ``np.float32(score)`` gives Lucene's value back).

        Raises:
            ValueError: ``k`` is negative.
        """
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        scores = self.scores(query)  # (N,) float32
        hits = np.flatnonzero(scores > 0)  # (H,)
        if k == 0 or hits.size == 0:
            return []
        hit_scores = scores[hits]
        if hits.size > k:
            # Keep every document scoring at least the k-th best score (ties at the cut stay for the id sort).
            kth_best = np.partition(hit_scores, hits.size - k)[hits.size - k]
            keep = hit_scores >= kth_best
            hits, hit_scores = hits[keep], hit_scores[keep]
        order = np.lexsort((self._id_rank[hits], -hit_scores))[:k]  # last key is the primary one
        ranked = hits[order]
        return [(self.doc_ids[i], float(s)) for i, s in zip(ranked.tolist(), scores[ranked].tolist())]

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(doc_count={self.doc_count}, vocabulary_size={self.vocabulary_size}, "
                f"avg_doc_length={float(self.avg_doc_length):.3f})")
