"""Build the exactness tables shipped in ``apo_lightning/webshop/data`` from the shared WebShop data folder.

    python scripts/build_package_data.py                      # reads ../shared/webshop_data, writes the package
    python scripts/build_package_data.py --check              # exit 1 if the committed files differ

Writes two gzip files (fixed mtime, so a rebuild is byte-identical):

* ``search_doc_tokens.jsonl.gz``: per product, the Lucene analyzer's tokens of its search document
  (``search_doc_tokens.jsonl``) with ``text_hash`` = ``catalog.text_hash(catalog.search_document(product))``, the
  hash of the text the analyzer ran on. Checked against ``webshop_1k_search_docs.jsonl``'s ``contents`` when that
  file is there.
* ``title_nouns_en_core_web_sm.jsonl.gz``: per product, the spaCy nouns of its name
  (``title_nouns_en_core_web_sm.json``) with ``text_hash`` = ``catalog.text_hash(product["name"])``.

Each starts with a ``{"_meta": ...}`` line: what the values are, the source file's name, size and SHA-256, and the
hash rule.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import sys
from pathlib import Path

from apo_lightning.webshop.catalog import (
    PACKAGED_DOC_TOKENS,
    PACKAGED_TITLE_NOUNS,
    TEXT_HASH_HEX_DIGITS,
    DataFiles,
    WebShopDataError,
    load_doc_tokens,
    load_products,
    search_document,
    text_hash,
)
from apo_lightning.utils.files import read_json

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SOURCE = ROOT.parent / "shared" / "webshop_data"
DEFAULT_OUT = ROOT / "apo_lightning" / "webshop" / "data"
HASH_RULE = (f"text_hash = the first {TEXT_HASH_HEX_DIGITS} hex digits of sha256(text.encode('utf-8')) "
             "(apo_lightning.webshop.catalog.text_hash)")


def _source_meta(path: Path) -> dict:
    data = path.read_bytes()
    return {"file": path.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _gzip_lines(lines: list[dict]) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as f:
        for line in lines:
            f.write((json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8"))
    return buffer.getvalue()


def build(source: Path) -> dict[str, bytes]:
    """The package files' bytes, by file name, built from the data folder ``source``.

    Raises:
        WebShopDataError: a source file is missing, or a product has no tokens or nouns, or a search document
            differs from the one the tokens were computed from (``webshop_1k_search_docs.jsonl``).
    """
    files = DataFiles.find(source)
    if files.doc_tokens is None or files.title_nouns is None:
        raise WebShopDataError(f"{source} lacks search_doc_tokens.jsonl or the title-noun table; point --source at "
                               "the shared WebShop folder")
    products = load_products(files, human_goals=False)
    tokens = load_doc_tokens(files.doc_tokens)
    noun_table = read_json(files.title_nouns, dict, "{asin: [nouns]}", WebShopDataError)
    nouns = {k: v for k, v in noun_table.items() if k != "_meta"}
    documents = {p["asin"]: search_document(p) for p in products}
    docs_file = source / "webshop_1k_search_docs.jsonl"
    if docs_file.is_file():  # the text the analyzer ran on is the index's `contents`: make sure ours is the same
        with open(docs_file, encoding="utf-8") as f:
            contents = {d["id"]: d["contents"] for d in map(json.loads, f)}
        differ = [a for a, text in documents.items() if contents.get(a) != text]
        if differ:
            raise WebShopDataError(f"{docs_file}: {len(differ)} search documents differ from "
                                   f"catalog.search_document, e.g. {differ[:3]}")
    missing = [a for a in documents if a not in tokens or a not in nouns]
    if missing:
        raise WebShopDataError(f"{source}: no tokens or nouns for {len(missing)} products, e.g. {missing[:3]}")

    token_lines: list[dict] = [{"_meta": {
        "what": "Lucene tokens of each product's search document (Anserini 0.22.1 DefaultEnglishAnalyzer, "
                "Lucene 9.5), text = catalog.search_document(product)",
        "source": _source_meta(files.doc_tokens), "hash": HASH_RULE, "products": len(documents)}}]
    token_lines += [{"id": a, "text_hash": text_hash(text), "tokens": tokens[a]} for a, text in documents.items()]
    noun_meta = dict(noun_table.get("_meta", {}))
    noun_lines: list[dict] = [{"_meta": {
        "what": "spaCy nouns of each product's name, text = product['name']", "source": _source_meta(files.title_nouns),
        "hash": HASH_RULE, "products": len(products), "table_meta": noun_meta}}]
    noun_lines += [{"id": p["asin"], "text_hash": text_hash(p["name"]), "nouns": nouns[p["asin"]]} for p in products]
    return {PACKAGED_DOC_TOKENS: _gzip_lines(token_lines), PACKAGED_TITLE_NOUNS: _gzip_lines(noun_lines)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", type=Path, default=DEFAULT_SOURCE, help="the shared WebShop data folder")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the package data folder")
    parser.add_argument("--check", action="store_true", help="compare with the files in --out; write nothing")
    args = parser.parse_args(argv)
    built = build(args.source)
    stale = [name for name, data in built.items()
             if not (args.out / name).is_file() or (args.out / name).read_bytes() != data]
    for name, data in built.items():
        if args.check:
            print(f"{args.out / name}: {'differs from a rebuild' if name in stale else 'up to date'}")
        else:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / name).write_bytes(data)
            print(f"{args.out / name}: {len(data):,} B")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
