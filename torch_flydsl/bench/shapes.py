"""Shape records and shape files.

A suite describes one shape by a few named fields (``Field``): ``mm`` by ``M, N, K``,
``rms_norm`` by ``dtype, rows, n``, and so on (``python -m torch_flydsl bench --help`` lists
them). A shape is a dict of those fields: the suites' seed lists are such dicts, and
``--shapes FILE`` reads them from a file:

* JSON (``.json``, or any file whose first character is ``[`` or ``{``): a list of shapes, or
  an object ``{"shapes": [...]}``; each shape an object of fields (``{"M": 1, "N": 4096,
  "K": 4096}``) or a list of values in the suite's field order (``[1, 4096, 4096]``).
* CSV (anything else): a header row of field names, then one shape per row; blank lines and
  lines starting with ``#`` are skipped.

Field names match case-insensitively; a field with a default may be left out; an unknown
field, a missing required one, a value that is not a positive integer where one is needed, or
one outside a field's choices is an error (``ShapesFileError``, naming the entry) and the CLI
exits 2.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from ..templates.vocabulary import REQUIRED, Field, FieldError  # noqa: F401  (Field: the suites' field type)


class ShapesFileError(ValueError):
    """A shape file that cannot be read as shapes of the suite."""


def coerce(field: Field, value, where: str):
    """``value`` checked by the field's own validator (the one every format shares); text may
    spell an int (a CSV cell)."""
    try:
        return field.coerce(value, strict=False)
    except FieldError as e:
        raise ShapesFileError(f"{where}: {e}") from None


def record(fields: tuple, item, where: str) -> dict:
    """One shape: ``item`` (a mapping of field names, or a list of values in field order)
    checked against ``fields`` and completed with their defaults."""
    if isinstance(item, (list, tuple)):
        if not 1 <= len(item) <= len(fields):
            raise ShapesFileError(f"{where}: {len(item)} values for the {len(fields)} fields "
                                  f"{', '.join(f.name for f in fields)}")
        item = {f.name: v for f, v in zip(fields, item)}
    if not isinstance(item, dict):
        raise ShapesFileError(f"{where}: a shape is an object of fields or a list of values, got {item!r}")
    by_name = {f.name.lower(): f for f in fields}
    given = {}
    for key, value in item.items():
        f = by_name.get(str(key).strip().lower())
        if f is None:
            raise ShapesFileError(f"{where}: unknown field {key!r} (fields: {', '.join(f.name for f in fields)})")
        if f.name in given:
            raise ShapesFileError(f"{where}: field {f.name!r} given twice")
        given[f.name] = value
    out = {}
    for f in fields:
        if f.name in given and given[f.name] not in (None, ""):
            out[f.name] = coerce(f, given[f.name], where)
        elif f.default is REQUIRED:
            raise ShapesFileError(f"{where}: missing field {f.name!r}")
        else:
            out[f.name] = f.default
    return out


def parse(text: str, fields: tuple, name: str = "<shapes>") -> list[dict]:
    """The shapes in ``text``: JSON when ``name`` ends in .json or the text starts with [ or
    {, else CSV with a header row."""
    stripped = text.lstrip()
    if name.lower().endswith(".json") or stripped[:1] in ("[", "{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ShapesFileError(f"{name}: not valid JSON: {e}") from None
        if isinstance(data, dict) and set(data) == {"shapes"}:
            data = data["shapes"]
        if not isinstance(data, list):
            raise ShapesFileError(f"{name}: JSON shapes are a list (or {{\"shapes\": [...]}}), got {type(data).__name__}")
        shapes = [record(fields, item, f"{name}: entry {i}") for i, item in enumerate(data, 1)]
    else:
        lines = [(i, ln) for i, ln in enumerate(text.splitlines(), 1) if ln.strip() and not ln.lstrip().startswith("#")]
        if not lines:
            raise ShapesFileError(f"{name}: no shapes (CSV needs a header row of field names, then one row per shape)")
        header_line, header = lines[0][0], next(csv.reader([lines[0][1]]))
        known = {f.name.lower() for f in fields}
        if not any(h.strip().lower() in known for h in header):
            raise ShapesFileError(f"{name}: line {header_line}: the first row must name the fields "
                                  f"({', '.join(f.name for f in fields)}), got {lines[0][1]!r}")
        shapes = []
        for (i, ln), values in zip(lines[1:], csv.reader(io.StringIO("\n".join(ln for _, ln in lines[1:])))):
            if len(values) != len(header):
                raise ShapesFileError(f"{name}: line {i}: {len(values)} values for {len(header)} columns")
            shapes.append(record(fields, dict(zip((h.strip() for h in header), (v.strip() for v in values))),
                                 f"{name}: line {i}"))
    if not shapes:
        raise ShapesFileError(f"{name}: no shapes")
    return shapes


def load(path, fields: tuple) -> list[dict]:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise ShapesFileError(f"{path}: cannot read it: {e.strerror or e}") from None
    return parse(text, fields, str(path))
