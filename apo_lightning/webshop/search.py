"""Lucene-compatible BM25 search over the WebShop catalogue (docs/webshop.md, "What is reproduced").

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

import json
import math
import threading
from array import array
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np
import regex
from nltk.stem.porter import PorterStemmer

__all__ = [
    "BM25_B",
    "BM25_K1",
    "STOP_WORDS",
    "SearchEngine",
    "SearchIndexBuilder",
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
#: Version of the files :meth:`SearchEngine.save` writes; a saved index of another version is refused on load.
INDEX_FORMAT_VERSION = 2
#: The file holding a saved index's scalars and format version, beside one ``<array>.npy`` file per array.
INDEX_META_FILE = "search_index.json"
#: Documents per block of the block-max index: each term keeps, per block of this many consecutive (reordered)
#: documents it occurs in, its largest denominator, so a block's best possible score for a query is known without
#: reading its postings (Ding & Suel, "Faster top-k document retrieval using block-max indexes", SIGIR 2011).
BLOCK_SIZE = 128
#: When the index is built, documents are renumbered so that similar ones share blocks: sorted by their rarest terms
#: (up to this many, each held by at least ``CLUSTER_MIN_DOC_FREQ`` documents), rarest first. Any order ranks the
#: same; this one makes block bounds tight (Silvestri, "Sorting out the document identifier assignment problem",
#: ECIR 2007, orders by URL for the same reason).
CLUSTER_KEY_TERMS = 4
CLUSTER_MIN_DOC_FREQ = 16
#: A query whose terms have at most this many postings in all is scored exhaustively: pruning would not pay off.
DIRECT_POSTINGS = 8192
#: Blocks scored in the first round of a pruned search (highest bounds first); each later round doubles.
FIRST_BLOCKS = 4
#: Relative margin of every pruning test. A block is skipped only when an upper bound of its documents' scores is
#: below ``theta * (1 - 2**-20)``; float32 scores are 2**-24 apart (relative), and the double-precision sums behind
#: the bounds are exact to far less, so no rounding can skip a document that reaches the k-th best score.
_MARGIN = 1.0 - 2.0**-20
#: Provisional (term, document) pairs gathered before they are sorted and counted, while building.
_BUILD_CHUNK_TOKENS = 1 << 22
#: The arrays of an index, each saved as ``<name>.npy`` (see :class:`SearchEngine` for their meaning).
_ARRAYS = ("doc_ids", "id_rank", "posting_start", "posting_doc", "posting_denominator", "idf", "block_start",
           "block_id", "block_max_denominator", "block_posting_start", "term_bytes", "term_offsets")


def _utf8(text: str) -> bytes:
    """UTF-8 bytes of a term or id; a lone surrogate (possible in scraped JSON text) is kept, not an error. Byte
    order of the result is code point order, the order Lucene sorts its terms and Anserini its ids in."""
    return text.encode("utf-8", "surrogatepass")


def _norm_inverses(lengths: np.ndarray, avg_doc_length: np.float32) -> np.ndarray:
    """Lucene's ``1f / (k1 * ((1 - b) + b * L / avgdl))`` per document, L the quantised length: (N,) float32."""
    distinct, slot = np.unique(lengths, return_inverse=True)
    quantised = np.array([quantize_length(int(n)) for n in distinct.tolist()], dtype=np.float32)[slot]  # (N,)
    with np.errstate(divide="ignore", invalid="ignore"):  # avgdl = 0 only if no document has a token
        return np.float32(1.0) / (BM25_K1 * ((np.float32(1.0) - BM25_B) + BM25_B * quantised / avg_doc_length))


def _idfs(doc_freq: np.ndarray, docs_with_terms: int) -> np.ndarray:
    """Lucene ``BM25Similarity.idf`` per term: ``ln(1 + (N - df + 0.5) / (df + 0.5))`` in double with the C
    library's log, rounded once to float32: (V,) float32. Only the distinct document frequencies need a log."""
    distinct, slot = np.unique(doc_freq, return_inverse=True)
    n = docs_with_terms
    idf_of_df = [math.log(1.0 + (n - df + 0.5) / (df + 0.5)) for df in distinct.tolist()]
    return np.array(idf_of_df, dtype=np.float64).astype(np.float32)[slot]


def _union(lists: list[np.ndarray]) -> np.ndarray:
    """The distinct values of several ascending int32 arrays, ascending (a sort and a neighbour test: NumPy's
    ``unique`` hashes, which is slower for arrays that are sorted already)."""
    if len(lists) == 1:
        return lists[0]
    merged = np.sort(np.concatenate(lists))
    if len(merged) < 2:
        return merged
    distinct = np.empty(len(merged), dtype=bool)
    distinct[0] = True
    np.not_equal(merged[1:], merged[:-1], out=distinct[1:])
    return merged[distinct]


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The integers of several ranges, one after another: ``concatenate([arange(s, s + c) for s, c in ...])``,
    (sum(counts),) int64, without a Python loop."""
    ends = np.cumsum(counts)
    return np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) + np.repeat(starts - (ends - counts), counts)


def _kth_largest(values: np.ndarray, k: int) -> float:
    """The k-th largest of ``values`` (as a Python float), or 0.0 when there are fewer than k."""
    if len(values) < k:
        return 0.0
    return float(np.partition(values, len(values) - k)[len(values) - k])


def _cluster_order(posting_term: np.ndarray, posting_doc: np.ndarray, doc_freq: np.ndarray,
                   num_docs: int) -> np.ndarray:
    """The documents in cluster order: (N,) int64, the old index of each new position.

    Each document's key is its rarest terms (at most ``CLUSTER_KEY_TERMS``, each held by at least
    ``CLUSTER_MIN_DOC_FREQ`` documents, rarest first, ties by term id); documents are sorted by their keys, so those
    that share their rarest words become neighbours. Documents with equal keys keep their order.

    Args:
        posting_term: (P,) int64 term id of each (term, document) pair.
        posting_doc: (P,) int64 document index of each pair.
        doc_freq: (V,) int64 documents per term.
        num_docs: N.
    """
    num_terms = len(doc_freq)
    rarity = np.empty(num_terms, dtype=np.int64)  # a term's place when terms are sorted rarest first
    rarity[np.lexsort((np.arange(num_terms), doc_freq))] = np.arange(num_terms)
    kept = doc_freq[posting_term] >= CLUSTER_MIN_DOC_FREQ
    keys = np.sort((posting_doc[kept].astype(np.int64) << 32) | rarity[posting_term[kept]])  # by document, rarest first
    doc_of_key = keys >> 32
    first = np.searchsorted(doc_of_key, np.arange(num_docs))  # (N,) each document's first key
    count = np.bincount(doc_of_key, minlength=num_docs)  # (N,)
    columns = []
    for j in range(CLUSTER_KEY_TERMS):
        column = np.full(num_docs, num_terms, dtype=np.int64)  # a document with fewer terms sorts after
        has = count > j
        column[has] = keys[first[has] + j] & 0xFFFFFFFF
        columns.append(column)
    return np.lexsort(columns[::-1])  # the rarest term is the primary key


def _block_maxima(posting_term: np.ndarray, posting_doc: np.ndarray, posting_denominator: np.ndarray,
                  num_terms: int, num_docs: int) -> dict[str, np.ndarray]:
    """The block-max index: per term, the blocks (``BLOCK_SIZE`` documents each) it occurs in, its largest
    denominator in each and where its postings in each begin. Postings must be sorted by (term, document).

    Returns:
        ``block_start`` (V + 1,) int64 (term t's blocks are entries ``[block_start[t], block_start[t + 1])``),
        ``block_id`` (E,) int32 ascending within a term, ``block_max_denominator`` (E,) float32 and
        ``block_posting_start`` (E + 1,) int64 (entry e's postings are ``[block_posting_start[e],
        block_posting_start[e + 1])``).
    """
    num_blocks = -(-num_docs // BLOCK_SIZE)
    code = posting_term * num_blocks + posting_doc // BLOCK_SIZE  # (P,) ascending
    starts = np.flatnonzero(np.concatenate(([True], code[1:] != code[:-1]))) if len(code) else np.zeros(0, np.int64)
    block_max_denominator = (np.maximum.reduceat(posting_denominator, starts) if len(starts)
                             else np.zeros(0, dtype=np.float32))
    block_id = (posting_doc[starts] // BLOCK_SIZE).astype(np.int32)
    block_start = np.searchsorted(posting_term[starts], np.arange(num_terms + 1)).astype(np.int64)
    block_posting_start = np.append(starts, len(code)).astype(np.int64)
    return {"block_start": block_start, "block_id": block_id, "block_max_denominator": block_max_denominator,
            "block_posting_start": block_posting_start}


class _Vocabulary:
    """The index's terms, sorted by their UTF-8 bytes, so that a term's id is its rank; looked up by binary search
    over two flat arrays (no per-term Python object, so a memory-mapped vocabulary costs nothing to open)."""

    def __init__(self, term_bytes: np.ndarray, term_offsets: np.ndarray) -> None:
        self._bytes = term_bytes  # (B,) uint8, the terms' UTF-8 bytes one after another
        self._offsets = term_offsets  # (V + 1,) int64, term i is bytes [offsets[i], offsets[i + 1])

    def __len__(self) -> int:
        return len(self._offsets) - 1

    def __getitem__(self, i: int) -> bytes:
        return self._bytes[self._offsets.item(i):self._offsets.item(i + 1)].tobytes()

    def get(self, term: str) -> int | None:
        """The id of ``term``, or None when no document contains it. O(log V) comparisons."""
        key = _utf8(term)
        i = bisect_left(self, key)
        return i if i < len(self) and self[i] == key else None


class SearchIndexBuilder:
    """Collects analysed documents one at a time and builds a :class:`SearchEngine` from them.

    Memory grows with the number of distinct (term, document) pairs, not with the text: each document's tokens are
    reduced to term ids at once, and every ``_BUILD_CHUNK_TOKENS`` tokens the pending pairs are counted into compact
    arrays. Building over N documents of T tokens in all takes O(T + P log P) time, P the number of pairs.
    """

    def __init__(self) -> None:
        self._term_ids: dict[str, int] = {}  # term -> provisional id (first-seen order)
        self._doc_ids: list[bytes] = []
        self._lengths: list[int] = []
        self._pending_terms: array = array("q")
        self._pending_first_doc = 0
        self._pairs: list[tuple[np.ndarray, np.ndarray]] = []  # per chunk: (term << 32 | doc, tf), codes ascending

    def __len__(self) -> int:
        return len(self._doc_ids)

    def add(self, doc_id: str, tokens: Sequence[str]) -> None:
        """Add the next document: its id (an ASIN) and its analysed tokens (possibly none).

        Raises:
            ValueError: more than 2**31 - 1 documents or distinct terms.
        """
        if len(self._doc_ids) >= 2**31 - 1 or len(self._term_ids) >= 2**31 - 1:
            raise ValueError("a search index holds at most 2**31 - 1 documents and as many distinct terms")
        self._doc_ids.append(_utf8(doc_id))
        self._lengths.append(len(tokens))
        term_ids = self._term_ids
        self._pending_terms.extend([term_ids.setdefault(term, len(term_ids)) for term in tokens])
        if len(self._pending_terms) >= _BUILD_CHUNK_TOKENS:
            self._count_pending()

    def _count_pending(self) -> None:
        """Turn the pending tokens into sorted (term, document) codes with their term frequencies."""
        lengths = np.asarray(self._lengths[self._pending_first_doc:], dtype=np.int64)  # (n,)
        docs = np.repeat(np.arange(self._pending_first_doc, len(self._doc_ids), dtype=np.int64), lengths)  # (t,)
        terms = np.frombuffer(self._pending_terms, dtype=np.int64) if self._pending_terms else np.zeros(0, np.int64)
        codes, term_freq = np.unique((terms << 32) | docs, return_counts=True)  # (p,), (p,)
        self._pairs.append((codes, term_freq.astype(np.int32)))
        self._pending_terms = array("q")
        self._pending_first_doc = len(self._doc_ids)

    def build(self) -> SearchEngine:
        """The finished index (in memory). The builder is left empty.

        Raises:
            ValueError: no documents were added, or an id was added twice (the message lists some).
        """
        if not self._doc_ids:
            raise ValueError("cannot build a search index over zero documents")
        self._count_pending()
        doc_ids = np.array(self._doc_ids, dtype=f"S{max(1, max(map(len, self._doc_ids)))}")  # (N,)
        if len(np.unique(doc_ids)) != len(doc_ids):
            repeated = [doc_id.decode("utf-8", "surrogatepass")
                        for doc_id, n in Counter(self._doc_ids).items() if n > 1]
            raise ValueError(f"document ids must be unique; repeated: {repeated[:5]}")
        lengths = np.asarray(self._lengths, dtype=np.int64)  # (N,)
        codes = np.concatenate([c for c, _ in self._pairs])  # (P,) per chunk ascending; chunks hold other docs
        term_freq = np.concatenate([f for _, f in self._pairs])  # (P,)
        terms = [_utf8(term) for term in self._term_ids]  # provisional id order
        self._term_ids, self._doc_ids, self._lengths, self._pairs = {}, [], [], []  # free them before the sort
        self._pending_first_doc = 0

        # Final term ids are the ranks of the terms' bytes.
        by_bytes = sorted(range(len(terms)), key=terms.__getitem__)
        rank = np.empty(len(terms), dtype=np.int64)
        rank[by_bytes] = np.arange(len(terms))
        posting_term = rank[codes >> 32]  # (P,)
        doc_freq = np.bincount(posting_term, minlength=len(terms))  # (V,)

        # Documents renumbered in cluster order (CLUSTER_KEY_TERMS); postings then sorted by (term, document).
        added_doc = codes & 0xFFFFFFFF  # (P,) each pair's document in the order documents were added
        del codes
        cluster_order = _cluster_order(posting_term, added_doc, doc_freq, len(doc_ids))  # (N,) old index
        new_index = np.empty(len(doc_ids), dtype=np.int64)
        new_index[cluster_order] = np.arange(len(doc_ids))
        doc_ids, lengths = doc_ids[cluster_order], lengths[cluster_order]
        codes = (posting_term << 32) | new_index[added_doc]
        del posting_term, added_doc, new_index, cluster_order
        order = np.argsort(codes, kind="stable")
        codes, term_freq = codes[order], term_freq[order]
        del order
        posting_term = codes >> 32  # (P,)
        posting_doc = (codes & 0xFFFFFFFF).astype(np.int32)  # (P,) ascending within each term
        del codes

        # Lucene's collection statistics count only documents with at least one token in the field
        # (CollectionStatistics.docCount); an empty document changes neither idf nor avgdl.
        docs_with_terms = max(int(np.count_nonzero(lengths)), 1)
        avg_doc_length = np.float32(int(lengths.sum()) / docs_with_terms)
        norm_inverse = _norm_inverses(lengths, avg_doc_length)  # (N,) float32
        posting_denominator = np.float32(1.0) + term_freq.astype(np.float32) * norm_inverse[posting_doc]  # (P,)
        del term_freq
        posting_start = np.zeros(len(terms) + 1, dtype=np.int64)  # (V + 1,)
        np.cumsum(doc_freq, out=posting_start[1:])
        blocks = _block_maxima(posting_term, posting_doc, posting_denominator, len(terms), len(doc_ids))
        del posting_term

        id_rank = np.empty(len(doc_ids), dtype=np.int32)  # the secondary sort key: Anserini sorts ties by id
        id_rank[np.argsort(doc_ids, kind="stable")] = np.arange(len(doc_ids), dtype=np.int32)
        term_bytes = np.frombuffer(b"".join(terms[i] for i in by_bytes), dtype=np.uint8)  # (B,)
        term_offsets = np.zeros(len(terms) + 1, dtype=np.int64)  # (V + 1,)
        np.cumsum(np.array([len(terms[i]) for i in by_bytes], dtype=np.int64), out=term_offsets[1:])
        arrays = {
            "doc_ids": doc_ids, "id_rank": id_rank, "posting_start": posting_start, "posting_doc": posting_doc,
            "posting_denominator": posting_denominator, "idf": _idfs(doc_freq, docs_with_terms),
            "term_bytes": term_bytes, "term_offsets": term_offsets, **blocks,
        }
        return SearchEngine._from_arrays(arrays, docs_with_terms, avg_doc_length, BLOCK_SIZE, None)


class SearchEngine:
    """BM25 over an inverted index, ranked exactly as WebShop's pyserini ``LuceneSearcher`` ranks, with top-k pruning.

    Sources: Lucene 9.5 ``BM25Similarity`` (k1 = 0.9, b = 0.4), ``BooleanQuery`` disjunction scoring, Anserini
    ``BagOfWordsQueryGenerator`` and ``SimpleSearcher.search`` (ties broken by document id); WebShop
    ``web_agent_site/engine/engine.py`` (``get_top_n_product_from_keywords``).

    Two ways to rank, with the same result to the last bit:

    * :meth:`scores` / :meth:`search_exhaustive` score every document (O(N + postings of the query's terms)); this
      is the reference.
    * :meth:`search` prunes with a block-max index (Ding & Suel, SIGIR 2011), visiting blocks of documents in
      order of their bounds as in anytime ranking over a clustered index (Mackenzie, Petri & Moffat, "Anytime
      ranking on document-ordered indexes", ACM TOIS 40(1), 2021). The documents are numbered so that similar ones
      are neighbours (:data:`CLUSTER_KEY_TERMS`) and cut into blocks of :data:`BLOCK_SIZE`; each term stores its
      largest denominator per block. For a query: (1) every block's bound, the sum over the query's terms of each
      term's highest score in that block, is one ``bincount`` over the terms' block lists; (2) in rounds of
      :data:`FIRST_BLOCKS` blocks, then twice as many each round, the blocks with the highest bounds are scored:
      their documents' scores are computed exactly as the reference computes them (terms added in query order in
      double precision, then rounded to float32), and the k-th best score so far, ``theta``, rises; (3) after each
      round every block whose bound is below ``theta`` is dropped, since no document in it can reach the top k, and
      the search ends when no block is left.
      Every test keeps a margin (``_MARGIN``) above float rounding, so no document the reference ranks in the top k
      is ever dropped. A query then reads the block lists of its terms and the postings of the few blocks that can
      hold the answer, and never O(N).

    Index layout (CSR over terms, term ids in UTF-8 byte order of the terms; P = number of distinct
    (term, document) pairs, V = number of terms, N = number of documents):

    * ``_posting_start``: (V + 1,) int64, term t's postings are ``[_posting_start[t], _posting_start[t + 1])``;
    * ``_posting_doc``: (P,) int32, document index of each posting, ascending within a term;
    * ``_posting_denominator``: (P,) float32, ``1f + tf * normInverse(doc)``, the query-independent part of the
      BM25 term score ``w - w / denominator``;
    * ``_block_start`` / ``_block_id`` / ``_block_max_denominator``: (V + 1,) int64 / (E,) int32 / (E,) float32, a
      CSR over terms of the blocks each term occurs in (block b holds documents ``[b * B, (b + 1) * B)``, B the
      index's block size) and the term's largest denominator there (its highest score in the block is
      ``w - w / max``, a bound in float32 because each float operation here is monotonic);
    * ``_block_posting_start``: (E + 1,) int64, where each (term, block) entry's postings begin (the next entry's
      begin is where they end);
    * ``_idf``: (V,) float32; ``_doc_ids``: (N,) bytes, the ids' UTF-8; ``_id_rank``: (N,) int32, each id's rank
      in sorted order (the tie-break); ``_term_bytes`` / ``_term_offsets``: the sorted vocabulary.

    An index is built in memory (the constructor, :meth:`from_contents`, or :class:`SearchIndexBuilder` for one
    document at a time), written with :meth:`save` and opened memory-mapped with :meth:`load`, so an index larger
    than memory costs only the pages that queries read. Document indexes are internal (cluster order); results and
    :meth:`doc_id` give ASINs. Thread-safe for queries: each thread gets its own scratch array (N entries, 8 bytes
    per document, made on its first query that needs it).

    Attributes:
        doc_count: number of documents, N.
        avg_doc_length: float32, Lucene's avgdl: total tokens / number of documents with at least one token.
        folder: the folder the index was loaded from, or None for an index built in memory.
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
        builder = SearchIndexBuilder()
        for doc_id, tokens in zip(doc_ids, doc_tokens):
            builder.add(doc_id, tokens)
        self.__dict__.update(builder.build().__dict__)

    @classmethod
    def _from_arrays(cls, arrays: dict[str, np.ndarray], docs_with_terms: int, avg_doc_length: np.float32,
                     block_size: int, folder: Path | None) -> SearchEngine:
        engine = cls.__new__(cls)
        for name in _ARRAYS:
            setattr(engine, f"_{name}", arrays[name])
        engine.doc_count = len(engine._doc_ids)
        engine.avg_doc_length = np.float32(avg_doc_length)
        engine.folder = folder
        engine._docs_with_terms = docs_with_terms
        engine._block_size = block_size
        engine._num_blocks = -(-engine.doc_count // block_size)
        engine._vocabulary = _Vocabulary(engine._term_bytes, engine._term_offsets)
        engine._term_id = lru_cache(maxsize=1 << 16)(engine._vocabulary.get)  # queries repeat their words
        engine._scratch = threading.local()
        return engine

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

    # ------------------------------------------------------------------------------------------- files
    def save(self, folder: str | Path) -> None:
        """Write the index into ``folder`` (created if needed): one ``.npy`` file per array and
        ``search_index.json``. Not atomic by itself; write into a temporary folder and rename it
        (``utils.files.atomic_directory``) when readers may be looking.
        """
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for name in _ARRAYS:
            np.save(folder / f"{name}.npy", np.ascontiguousarray(getattr(self, f"_{name}")), allow_pickle=False)
        meta = {"format_version": INDEX_FORMAT_VERSION, "doc_count": self.doc_count,
                "docs_with_terms": self._docs_with_terms, "avg_doc_length": float(self.avg_doc_length),
                "vocabulary_size": self.vocabulary_size, "postings": len(self._posting_doc),
                "block_size": self._block_size}
        (folder / INDEX_META_FILE).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, folder: str | Path, mmap: bool = True) -> SearchEngine:
        """Open an index written by :meth:`save`; with ``mmap`` its arrays are memory-mapped (read-only), so opening
        takes O(1) time and memory and queries read only the pages they touch.

        Raises:
            FileNotFoundError: ``folder`` lacks ``search_index.json`` or an array file (the message names it).
            ValueError: the index has another format version (rebuild it) or a malformed file.
        """
        folder = Path(folder)
        meta_path = folder / INDEX_META_FILE
        if not meta_path.is_file():
            raise FileNotFoundError(f"{meta_path} does not exist: {folder} holds no saved search index "
                                    "(SearchEngine.save writes one)")
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            version = meta.get("format_version")
        except (ValueError, AttributeError) as e:
            raise ValueError(f"{meta_path}: not a JSON object of index settings ({e})") from e
        block_size = meta.get("block_size")
        if version != INDEX_FORMAT_VERSION or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"{meta_path}: index format_version {version!r} (block_size {block_size!r}); this code "
                             f"reads version {INDEX_FORMAT_VERSION} with a positive block_size: rebuild the index")
        arrays = {}
        for name in _ARRAYS:
            path = folder / f"{name}.npy"
            if not path.is_file():
                raise FileNotFoundError(f"{path} does not exist: the saved index in {folder} is incomplete; "
                                        "rebuild it")
            # a plain ndarray view of the mapping: np.memmap's own slicing runs Python code on every slice
            arrays[name] = np.asarray(np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False))
        if len(arrays["doc_ids"]) != meta["doc_count"] or len(arrays["posting_doc"]) != meta["postings"]:
            raise ValueError(f"{folder}: the array files do not match {INDEX_META_FILE}; rebuild the index")
        return cls._from_arrays(arrays, int(meta["docs_with_terms"]), np.float32(meta["avg_doc_length"]), block_size,
                                folder)

    def __getstate__(self) -> dict:
        """Pickle a loaded index as its folder (the other process maps the same files); an in-memory one whole."""
        if self.folder is not None:
            return {"folder": self.folder}
        return {name: value for name, value in self.__dict__.items()
                if name not in ("_scratch", "_vocabulary", "_term_id")}

    def __setstate__(self, state: dict) -> None:
        if "folder" in state and len(state) == 1:
            self.__dict__.update(SearchEngine.load(state["folder"]).__dict__)
            return
        arrays = {name: state[f"_{name}"] for name in _ARRAYS}
        self.__dict__.update(SearchEngine._from_arrays(arrays, state["_docs_with_terms"], state["avg_doc_length"],
                                                       state["_block_size"], None).__dict__)

    # ------------------------------------------------------------------------------------------- lookups
    @property
    def vocabulary_size(self) -> int:
        """Number of distinct terms in the index, V."""
        return len(self._vocabulary)

    @property
    def doc_ids(self) -> list[str]:
        """The document ids (ASINs) in index order (cluster order, not the order they were added); built on each
        call, O(N)."""
        return [self.doc_id(i) for i in range(self.doc_count)]

    def doc_id(self, i: int) -> str:
        """The id of document ``i`` (0 <= i < N)."""
        return self._doc_ids[i].decode("utf-8", "surrogatepass")

    def doc_freq(self, term: str) -> int:
        """Number of documents that contain the analysed ``term`` (0 for an unknown term)."""
        t = self._term_id(term)
        return 0 if t is None else int(self._posting_start[t + 1] - self._posting_start[t])

    def _query_terms(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """The query's known terms as (term ids (Q,) int64, weights (Q,) float32), in first-occurrence order.

        Each distinct term is one SHOULD clause whose boost is its count in the analysed query (Anserini
        BagOfWords); Lucene's clause weight is ``boost * idf`` in float32. Terms absent from the index are dropped.
        """
        counts = Counter(analyze(query))
        found = [(t, n) for t, n in ((self._term_id(term), n) for term, n in counts.items()) if t is not None]
        term_ids = np.array([t for t, _ in found], dtype=np.int64)
        boosts = np.array([n for _, n in found], dtype=np.float32)
        return term_ids, boosts * self._idf[term_ids]  # (Q,), (Q,) float32

    # ------------------------------------------------------------------------------------------- reference
    def scores(self, query: str) -> np.ndarray:
        """BM25 scores of every document for ``query``: (N,) float32, 0 for documents that match no term. O(N)."""
        term_ids, weights = self._query_terms(query)
        if not len(term_ids):
            return np.zeros(self.doc_count, dtype=np.float32)
        starts = self._posting_start[term_ids]
        ends = self._posting_start[term_ids + 1]
        slices = [slice(s, e) for s, e in zip(starts.tolist(), ends.tolist())]
        docs = np.concatenate([self._posting_doc[s] for s in slices])  # (P_q,) int32
        denominators = np.concatenate([self._posting_denominator[s] for s in slices])  # (P_q,) float32
        posting_weights = np.repeat(weights, ends - starts)  # (P_q,) float32
        term_scores = posting_weights - posting_weights / denominators  # (P_q,) float32, one rounding per op
        # Lucene adds clause scores in double and casts the sum to float once; bincount adds in double, each
        # document's clauses in query-term order.
        total = np.bincount(docs, weights=term_scores.astype(np.float64), minlength=self.doc_count)  # (N,)
        return total.astype(np.float32)

    def search_exhaustive(self, query: str, k: int = 50) -> list[tuple[str, float]]:
        """:meth:`search` without pruning: every document scored (:meth:`scores`), then ranked. The reference the
        pruned search is tested against; O(N) per query.

        Raises:
            ValueError: ``k`` is negative.
        """
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        scores = self.scores(query)  # (N,) float32
        docs = np.flatnonzero(scores > 0).astype(np.int32)
        return self._hits(*self._select(docs, scores[docs], k))

    # ------------------------------------------------------------------------------------------- pruned
    def search(self, query: str, k: int = 50) -> list[tuple[str, float]]:
        """The top-``k`` documents for ``query``, as WebShop's ``LuceneSearcher.search(query, k)`` returns them.

        Pruned (MaxScore, see the class docstring); the result equals :meth:`search_exhaustive`'s, scores included.

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
        term_ids, weights = self._query_terms(query)
        if k == 0 or not len(term_ids):
            return []
        return self._hits(*self._top_k(term_ids, weights, k))

    def _hits(self, docs: np.ndarray, scores: np.ndarray) -> list[tuple[str, float]]:
        return [(self.doc_id(d), s) for d, s in zip(docs.tolist(), scores.tolist())]

    def _select(self, docs: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Rank documents by float32 score descending, then id ascending; keep the first k with score > 0."""
        positive = scores > 0
        docs, scores = docs[positive], scores[positive]
        if k == 0 or docs.size == 0:
            return docs[:0], scores[:0]
        if docs.size > k:
            # Keep every document scoring at least the k-th best score (ties at the cut stay for the id sort).
            keep = scores >= np.partition(scores, docs.size - k)[docs.size - k]
            docs, scores = docs[keep], scores[keep]
        order = np.lexsort((self._id_rank[docs], -scores))[:k]  # last key is the primary one
        return docs[order], scores[order]

    def _postings(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Term ``t``'s documents (ascending) and denominators."""
        lo, hi = self._posting_start.item(t), self._posting_start.item(t + 1)
        return self._posting_doc[lo:hi], self._posting_denominator[lo:hi]

    def _sums(self) -> np.ndarray:
        """This thread's scratch array: (N,) float64 of zeros (restored after each use)."""
        scratch = self._scratch
        if getattr(scratch, "sums", None) is None:
            scratch.sums = np.zeros(self.doc_count, dtype=np.float64)
        return scratch.sums

    def _contributions(self, t: int, weight: np.float32, docs: np.ndarray) -> np.ndarray:
        """Term ``t``'s float32 score in each of ``docs`` (int32, ascending, distinct), 0 where it is absent, as
        (len(docs),) float64. Binary search into the postings, or a scatter and gather when ``docs`` is long."""
        post_docs, denominators = self._postings(t)
        if len(post_docs) < len(docs) * math.log2(len(post_docs) + 1) / 2:
            sums = self._sums()
            sums[post_docs] = weight - weight / denominators
            out = sums[docs]
            sums[post_docs] = 0.0
            return out
        at = np.searchsorted(post_docs, docs)  # (D,)
        at[at == len(post_docs)] = 0
        found = post_docs[at] == docs
        term_scores = weight - weight / denominators[at[found]]  # float32
        out = np.zeros(len(docs), dtype=np.float64)
        out[found] = term_scores
        return out

    def _exact_scores(self, term_ids: np.ndarray, weights: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """The float32 scores of ``docs`` (int32, ascending, distinct), computed as :meth:`scores` does: each
        document's clause scores added in double in query-term order (adding 0.0 for an absent term is exact)."""
        total = np.zeros(len(docs), dtype=np.float64)
        for t, weight in zip(term_ids.tolist(), weights):
            total += self._contributions(t, weight, docs)
        return total.astype(np.float32)

    def _query_blocks(self, term_ids: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The query terms' block entries and every block's bound.

        Returns:
            ``codes`` (E_q,) int64, ``j * num_blocks + block`` for query term j's entries, ascending;
            ``entries`` (E_q,) int64, the index's entry of each code; ``bounds`` (num blocks,) float64, each block's
            sum in double of each query term's highest float32 score in the block (0 where no term occurs). No
            document of a block scores above its bound (to rounding).
        """
        lo, hi = self._block_start[term_ids], self._block_start[term_ids + 1]  # (Q,)
        counts = hi - lo
        entries = _ranges(lo, counts)  # (E_q,)
        blocks = self._block_id[entries].astype(np.int64)
        term_weights = np.repeat(weights, counts)  # (E_q,) float32
        term_bounds = term_weights - term_weights / self._block_max_denominator[entries]  # float32, one rounding per op
        bounds = np.bincount(blocks, weights=term_bounds.astype(np.float64), minlength=self._num_blocks)
        codes = np.repeat(np.arange(len(term_ids), dtype=np.int64) * self._num_blocks, counts) + blocks
        return codes, entries, bounds

    def _score_blocks(self, weights: np.ndarray, codes: np.ndarray, entries: np.ndarray,
                      blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The documents of ``blocks`` (ascending) that match a query term, and their float32 scores computed as
        :meth:`scores` computes them (each document's clause scores added in double in query-term order).
        ``codes`` and ``entries`` are :meth:`_query_blocks`'."""
        size = self._block_size
        term_codes = np.arange(len(weights), dtype=np.int64)[:, None] * self._num_blocks  # (Q, 1)
        wanted = (term_codes + blocks[None, :]).ravel()  # (Q * m,)
        at = np.minimum(np.searchsorted(codes, wanted), len(codes) - 1)
        found = np.flatnonzero(codes[at] == wanted)  # term-major: term j's entries come before term j + 1's
        entry = entries[at[found]]
        lo = self._block_posting_start[entry]
        counts = self._block_posting_start[entry + 1] - lo
        postings = _ranges(lo, counts)  # (n,) term by term, block by block
        term_weights = np.repeat(weights[found // len(blocks)], counts)  # (n,) float32
        term_scores = term_weights - term_weights / self._posting_denominator[postings]  # float32, one rounding per op
        block_at = found % len(blocks)  # each found entry's place in ``blocks``
        slot_base = np.repeat((block_at - blocks[block_at]) * size, counts)
        slots = self._posting_doc[postings] + slot_base  # (n,) document j of the i-th block: i * size + j
        # bincount adds in input order, so each document's clauses in query-term order, as the reference does
        scores = np.bincount(slots, weights=term_scores.astype(np.float64), minlength=len(blocks) * size)
        scores = scores.astype(np.float32)
        matched = np.flatnonzero(scores > 0)
        docs = (blocks[matched // size] * size + matched % size).astype(np.int32)
        return docs, scores[matched]

    def _top_k(self, term_ids: np.ndarray, weights: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Block-max search (class docstring): the top-k documents and their float32 scores, ranked."""
        doc_freq = self._posting_start[term_ids + 1] - self._posting_start[term_ids]  # (Q,)
        if len(term_ids) == 1:
            docs, denominators = self._postings(term_ids.item(0))
            return self._select(docs, weights[0] - weights[0] / denominators, k)
        if int(doc_freq.sum()) <= DIRECT_POSTINGS:
            docs = _union([self._postings(t)[0] for t in term_ids.tolist()])
            return self._select(docs, self._exact_scores(term_ids, weights, docs), k)

        codes, entries, bounds = self._query_blocks(term_ids, weights)
        candidates = np.flatnonzero(bounds > 0)  # (num candidate blocks,) int64
        docs, scores = np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
        theta, size = 0.0, FIRST_BLOCKS
        while len(candidates):
            if len(candidates) > size:  # the round: the candidates with the highest bounds
                in_round = np.argpartition(-bounds[candidates], size - 1)[:size]
            else:
                in_round = np.arange(len(candidates))
            new_docs, new_scores = self._score_blocks(weights, codes, entries, np.sort(candidates[in_round]))
            docs, scores = np.concatenate((docs, new_docs)), np.concatenate((scores, new_scores))
            theta = _kth_largest(scores, k)  # a lower bound of the answer's k-th best score
            keep = scores >= theta  # ties at theta stay for the id sort
            docs, scores = docs[keep], scores[keep]
            candidates = np.delete(candidates, in_round)
            candidates = candidates[bounds[candidates] >= theta * _MARGIN]  # the blocks that can still reach theta
            size *= 2
        return self._select(docs, scores, k)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(doc_count={self.doc_count}, vocabulary_size={self.vocabulary_size}, "
                f"avg_doc_length={float(self.avg_doc_length):.3f})")
