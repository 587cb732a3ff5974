"""Rows of results as CSV or JSON, at full float precision.

One writer for every table resgrad emits (the lesson's depth table, flow
records, sweep rows), so that the formats agree: floats by ``repr`` (they
round-trip exactly), None as an empty CSV cell or JSON null. :func:`render_rows`
writes result objects (rows with attributes) in the format a command's ``--format``
names.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence

__all__ = ["render_rows", "to_csv", "to_json"]


def _cell(v: object) -> object:
    if v is None:
        return ""
    return repr(float(v)) if isinstance(v, float) else v  # float(): np.float64 is a float too


def to_csv(rows: Sequence[Mapping], fields: Sequence[str]) -> str:
    """``rows`` as CSV text with a header of ``fields``, one line per row."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(fields)
    for r in rows:
        w.writerow([_cell(r[k]) for k in fields])
    return buf.getvalue()


def to_json(
    rows: Sequence[Mapping], fields: Sequence[str], meta: Mapping | None = None, indent: int = 1
) -> str:
    """``rows`` as a JSON list of objects with ``fields``; with ``meta``, an object
    ``{**meta, "rows": [...]}``."""
    data: object = [{k: r[k] for k in fields} for r in rows]
    if meta is not None:
        data = {**meta, "rows": data}
    return json.dumps(data, indent=indent) + "\n"


def render_rows(rows: Sequence, keys: Sequence[str], fmt: str, meta: Mapping | None = None) -> str:
    """Result rows (objects with attributes ``keys``) as JSON (``fmt`` ``"json"``, with
    ``meta``) or CSV (any other ``fmt``)."""
    dicts = [{k: getattr(r, k) for k in keys} for r in rows]
    if fmt == "json":
        return to_json(dicts, keys, meta=meta, indent=2)
    return to_csv(dicts, keys)
