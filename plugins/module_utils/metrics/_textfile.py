# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Metrics for node exporter's textfile collector: Prometheus' text format, written whole and atomically.

node exporter reads every ``*.prom`` file of its textfile directory at each scrape. A file it reads while it is being
written would give half a scrape (or a parse error that drops the whole file), so a file is always replaced whole:
``_atomic.write_atomic`` writes a temporary name starting with a dot (the collector ignores it: it reads only names
ending in ``.prom``), fsyncs it and renames it over the old file.

A family is a dict ``{name, type, help, samples}``; a sample is ``(labels, value)``, labels a dict of strings. Names
follow Prometheus' conventions (the unit in the name, ``_total`` for counters), checked here; labels carry no secret
(the callers put only host, worker, shard and mount names in them).

The standard library only (and ``_atomic``): the coordinator's supervisor and the worker's cache pruner run with this
file copied beside them, so it imports ``_atomic`` flat there and from the collection everywhere else.
"""

from __future__ import annotations

import math
import os
import re

try:  # in the collection (modules, tests)
    from ansible_collections.llamarpc.cluster.plugins.module_utils.files import _atomic
except ImportError:  # copied flat beside a script on a host
    import _atomic  # type: ignore[no-redef]

TYPES = ("gauge", "counter")
NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
#: A textfile's samples whose value is a time: they change at every write without any other change.
TIMESTAMP_SUFFIX = "_timestamp_seconds"


class MetricError(ValueError):
    """A family that breaks the text format or the naming conventions."""


def family(name, kind, help_text, samples):
    """A family dict (``samples``: an iterable of ``(labels, value)``)."""
    return {"name": name, "type": kind, "help": help_text, "samples": list(samples)}


def escape(value):
    """A label value in the text format: backslash, double quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def unescape(value):
    out, chars = [], iter(value)
    for char in chars:
        if char == "\\":
            following = next(chars, "")
            out.append("\n" if following == "n" else following)
        else:
            out.append(char)
    return "".join(out)


def format_value(value):
    """A sample's value: integers as integers, booleans as 0/1, NaN and infinities as Prometheus spells them."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    return repr(number) if not number.is_integer() else str(int(number))


def check(families):
    """Raise MetricError for a family the collection must not write (a bad name or label, a counter without
    ``_total``, a type this helper does not write, one name twice)."""
    seen = set()
    for item in families:
        name, kind = item["name"], item["type"]
        if not NAME.match(name):
            raise MetricError(f"{name!r} is no Prometheus metric name")
        if name in seen:
            raise MetricError(f"metric {name} is given twice")
        seen.add(name)
        if kind not in TYPES:
            raise MetricError(f"{name}: type {kind!r} is not one of {', '.join(TYPES)}")
        if kind == "counter" and not name.endswith("_total"):
            raise MetricError(f"{name}: a counter's name ends in _total")
        for labels, _value in item["samples"]:
            for label in labels:
                if not LABEL.match(label) or label.startswith("__"):
                    raise MetricError(f"{name}: {label!r} is no label name")


def render(families):
    """The families in Prometheus' text format (HELP, TYPE, then each sample; labels sorted), ending in a newline."""
    check(families)
    lines = []
    for item in families:
        lines.append(f"# HELP {item['name']} {item['help']}".replace("\n", " "))
        lines.append(f"# TYPE {item['name']} {item['type']}")
        for labels, value in item["samples"]:
            text = ",".join(f'{key}="{escape(labels[key])}"' for key in sorted(labels))
            lines.append(
                f"{item['name']}{{{text}}} {format_value(value)}" if text else f"{item['name']} {format_value(value)}"
            )
    return "\n".join(lines) + "\n" if lines else ""


def parse(text):
    """The samples of a text this helper wrote: ``{name: [(labels, value), ...]}`` (comments and blank lines
    skipped; a line that is no sample is skipped too)."""
    samples = {}
    for raw_line in (text or "").splitlines():
        line = raw_line.strip()
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        if not match:
            continue
        name, labels, value = match.groups()
        pairs = {key: unescape(raw) for key, raw in LABEL_PAIR.findall(labels or "")}
        try:
            number = float(value)
        except ValueError:
            continue
        samples.setdefault(name, []).append((pairs, number))
    return samples


def without_timestamps(text):
    """``text`` without the samples of ``*_timestamp_seconds`` families: what a rewrite changes besides the time."""
    return "\n".join(
        line for line in (text or "").splitlines() if not line.split("{")[0].split(" ")[0].endswith(TIMESTAMP_SUFFIX)
    )


def read(path):
    """The text of ``path`` ('' when it does not exist)."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


def write(path, families, mode=0o644, move=None):
    """Replace ``path`` (a ``.prom`` file in the textfile directory) with ``families``; returns the text written."""
    if not path.endswith(".prom"):
        raise MetricError(f"{path}: node exporter's textfile collector reads only files named *.prom")
    text = render(families)
    _atomic.write_atomic(path, text, mode=mode, move=move)
    return text


def write_quietly(path, families):
    """``write`` for a daemon's side line: a missing directory or a write error is returned as a reason (None when
    written), never raised, so that the metrics never stop the work they describe."""
    if not path:
        return None
    try:
        if not os.path.isdir(os.path.dirname(path) or "."):
            return f"{os.path.dirname(path)} does not exist (node exporter's textfile directory)"
        write(path, families)
    except (OSError, MetricError) as exc:
        return f"metrics not written to {path}: {exc}"
    return None
