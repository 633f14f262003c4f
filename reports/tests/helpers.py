"""Reading rendered reports back in tests: tables by id, element text by id (stdlib html.parser)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Tables(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, list[dict]] = {}
        self.texts: dict[str, str] = {}
        self._stack: list[str | None] = []  # ids of open tables (None when unnamed)
        self._row: dict | None = None
        self._cell: list[str] | None = None
        self._open: list[tuple[str, str | None, list[str]]] = []  # (tag, id, text chunks) of open elements

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag not in VOID:
            self._open.append((tag, attrs.get("id"), []))
        if tag == "table":
            self._stack.append(attrs.get("id"))
            if attrs.get("id"):
                self.tables[attrs["id"]] = []
        elif tag == "tr" and self._stack and self._stack[-1]:
            self._row = {"class": attrs.get("class") or "", "cells": [], "header": False}
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
            self._row["header"] = self._row["header"] or tag == "th"

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._row is not None and self._cell is not None:
            self._row["cells"].append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if not self._row["header"]:
                self.tables[self._stack[-1]].append(self._row)
            self._row = None
        elif tag == "table" and self._stack:
            self._stack.pop()
        if any(open_tag == tag for open_tag, _, _ in self._open):
            while self._open:
                open_tag, ident, chunks = self._open.pop()
                if ident:
                    self.texts[ident] = " ".join("".join(chunks).split())
                if open_tag == tag:
                    break

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        for _, ident, chunks in self._open:
            if ident:
                chunks.append(data)


def parse(html: str) -> _Tables:
    parser = _Tables()
    parser.feed(html)
    parser.close()
    return parser


def table_rows(html: str, table_id: str) -> list[dict]:
    """Body rows of the table with this id: ``{"class": ..., "cells": [text, ...]}``."""
    tables = parse(html).tables
    if table_id not in tables:
        raise AssertionError(f"no table with id {table_id!r} in the report")
    return tables[table_id]


def text_of(html: str, element_id: str) -> str:
    texts = parse(html).texts
    if element_id not in texts:
        raise AssertionError(f"no element with id {element_id!r} in the report")
    return texts[element_id]


def section(html: str, section_id: str) -> str:
    """The raw HTML of ``<section id=...>`` (sections do not nest)."""
    start = html.index(f'<section id="{section_id}"')
    return html[start:html.index("</section>", start)]


def gate_data(html: str) -> list[dict]:
    """The gate table's embedded data, one dict per record with its strings resolved."""
    match = re.search(r'<script type="application/json" id="gate-data">(.*?)</script>', html, re.S)
    if match is None:
        raise AssertionError("no gate data in the report")
    data = json.loads(match.group(1))
    strings = data["strings"]
    text = {"kernel", "arm", "dtype", "shape", "case", "gate", "test_id"}
    return [{c: (strings[v] if c in text else v) for c, v in zip(data["columns"], row)} for row in data["rows"]]
