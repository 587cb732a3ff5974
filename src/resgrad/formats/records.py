"""Rows of results as CSV or JSON, at full float precision.

One writer for every table resgrad emits (the lesson's depth table, flow
records, sweep rows), so that the formats agree: floats by ``repr`` (they
round-trip exactly), None as an empty CSV cell or JSON null.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence

__all__ = ["to_csv", "to_json"]


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
