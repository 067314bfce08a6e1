# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure helpers for sync_hazard_facts: what could delete files in a model directory, read from text.

- A small, tolerant reader of lsyncd's Lua configuration: ``sync{...}`` and ``settings{...}`` calls, string
  concatenation and simple ``local`` variables. It never executes anything and never raises on bad input:
  what it cannot read is reported (a value it cannot compute keeps its source text as a ``{placeholder}``).
- The rewrite used by the exclude mode: in every ``sync{}`` table, ``delete = false`` and the model
  directories added to ``exclude``; a rewrite of a rewritten config changes nothing.
- Parsers for lsyncd command lines, ``systemctl show`` output, unit files, ``/proc/PID/cgroup``, crontabs,
  tmpfiles.d lines, rsync command lines, syncthing folders and unison profiles.
- Path overlap with the model directories, and the readable summary.

Standard library only: this file is shipped to the managed host with the module.
"""

from __future__ import annotations

import posixpath
import re
import shlex

# lsyncd 2.x: these layers delete on the target unless the sync says ``delete = false``
# (default-rsync.lua, default-rsyncssh.lua and default-direct.lua all set ``delete = true``).
DELETING_LAYERS = ("default.rsync", "default.rsyncssh", "default.direct")
DELETE_MODES = ("startup", "running")

# Marker the role writes in front of a crontab line it disables.
CRON_DISABLED_MARKER = "# disabled by llamarpc.cluster.lsyncd_neutralize: "

# Nesting deeper than this in a config is not followed (the reader stays iterative and bounded).
MAX_DEPTH = 64
MAX_CONFIG_BYTES = 1 << 20

_RSYNC_DELETE_FLAGS = re.compile(r"^--(?:del|delete(?:-before|-during|-delay|-after|-excluded|-missing-args)?)$")
_RSYNC_REMOVE_SOURCE = "--remove-source-files"
# rsync options whose value is the next word (when not written as --option=value).
_RSYNC_VALUE_OPTIONS = {
    "-e",
    "--rsh",
    "-f",
    "--filter",
    "--exclude",
    "--include",
    "--exclude-from",
    "--include-from",
    "--files-from",
    "--rsync-path",
    "-T",
    "--temp-dir",
    "--backup-dir",
    "--bwlimit",
    "--timeout",
    "--chmod",
    "--chown",
    "--log-file",
    "--password-file",
    "--partial-dir",
    "--compare-dest",
    "--link-dest",
    "--copy-dest",
    "--suffix",
    "--max-size",
    "--min-size",
    "--port",
    "--info",
    "--debug",
    "--out-format",
    "-B",
    "--block-size",
    "-M",
    "--remote-option",
    "--usermap",
    "--groupmap",
    "--sockopts",
    "--contimeout",
}

_BLOCK_OPENERS = {"function", "do", "if", "repeat"}  # while/for open theirs with do
_BLOCK_CLOSERS = {"end", "until"}
_BINARY_OPS = {
    "..",
    "+",
    "-",
    "*",
    "/",
    "//",
    "%",
    "^",
    "==",
    "~=",
    "<",
    ">",
    "<=",
    ">=",
    "and",
    "or",
    "&",
    "|",
    "~",
    "<<",
    ">>",
}
_UNARY_OPS = {"not", "-", "#", "~"}
_KEYWORDS = {
    "and",
    "break",
    "do",
    "else",
    "elseif",
    "end",
    "false",
    "for",
    "function",
    "goto",
    "if",
    "in",
    "local",
    "nil",
    "not",
    "or",
    "repeat",
    "return",
    "then",
    "true",
    "until",
    "while",
}
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NUMBER_RE = re.compile(r"0[xX][0-9a-fA-F]*(?:\.[0-9a-fA-F]*)?(?:[pP][+-]?[0-9]+)?|[0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?")
_LONG_OPEN_RE = re.compile(r"\[(=*)\[")
_OPS3 = ("...",)
_OPS2 = ("..", "==", "~=", "<=", ">=", "::", "//", "<<", ">>")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v", "\\": "\\", '"': '"', "'": "'"}


# -- Lua tokens ------------------------------------------------------------------------------------------


class Token:
    """One Lua token: ``kind`` is name, string, number, op or eof; ``value`` is decoded for strings."""

    __slots__ = ("end", "kind", "start", "value")

    def __init__(self, kind, value, start, end):
        self.kind = kind
        self.value = value
        self.start = start
        self.end = end

    def is_op(self, *ops):
        return self.kind == "op" and self.value in ops

    def is_name(self, *names):
        return self.kind == "name" and (not names or self.value in names)

    def __repr__(self):
        return f"Token({self.kind}, {self.value!r}, {self.start}, {self.end})"


def _decode_escapes(raw):
    out = []
    i = 0
    while i < len(raw):
        char = raw[i]
        if char != "\\" or i + 1 >= len(raw):
            out.append(char)
            i += 1
            continue
        nxt = raw[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt == "\n":
            out.append("\n")
            i += 2
        elif nxt == "z":
            i += 2
            while i < len(raw) and raw[i].isspace():
                i += 1
        elif nxt == "x" and re.match(r"[0-9a-fA-F]{2}", raw[i + 2 : i + 4]):
            out.append(chr(int(raw[i + 2 : i + 4], 16)))
            i += 4
        elif nxt.isdigit():
            digits = re.match(r"[0-9]{1,3}", raw[i + 1 :]).group(0)
            out.append(chr(min(int(digits), 255)))
            i += 1 + len(digits)
        elif nxt == "u":
            match = re.match(r"\{([0-9a-fA-F]{1,6})\}", raw[i + 2 :])
            if match and int(match.group(1), 16) <= 0x10FFFF:
                out.append(chr(int(match.group(1), 16)))
                i += 2 + len(match.group(0))
            else:
                out.append(nxt)
                i += 2
        else:
            out.append(nxt)
            i += 2
    return "".join(out)


def tokenize(text):
    """Lua tokens of ``text`` and the problems met (unterminated strings or comments). Never raises."""
    tokens = []
    problems = []
    i = 0
    size = len(text)
    while i < size:
        char = text[i]
        if char.isspace():
            i += 1
            continue
        if text.startswith("--", i):
            long_open = _LONG_OPEN_RE.match(text, i + 2)
            if long_open:
                close = "]" + long_open.group(1) + "]"
                end = text.find(close, long_open.end())
                if end < 0:
                    problems.append(f"unterminated comment at offset {i}")
                    i = size
                else:
                    i = end + len(close)
            else:
                end = text.find("\n", i)
                i = size if end < 0 else end + 1
            continue
        name = _NAME_RE.match(text, i)
        if name:
            tokens.append(Token("name", name.group(0), i, name.end()))
            i = name.end()
            continue
        if char.isdigit() or (char == "." and i + 1 < size and text[i + 1].isdigit()):
            number = _NUMBER_RE.match(text, i)
            end = number.end() if number and number.end() > i else i + 1
            tokens.append(Token("number", text[i:end], i, end))
            i = end
            continue
        if char in "\"'":
            j = i + 1
            while j < size and text[j] != char and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            if j >= size or text[j] != char:
                problems.append(f"unterminated string at offset {i}")
                j = min(j, size)
                tokens.append(Token("string", _decode_escapes(text[i + 1 : j]), i, j))
                i = j
                continue
            tokens.append(Token("string", _decode_escapes(text[i + 1 : j]), i, j + 1))
            i = j + 1
            continue
        long_open = _LONG_OPEN_RE.match(text, i) if char == "[" else None
        if long_open:
            close = "]" + long_open.group(1) + "]"
            end = text.find(close, long_open.end())
            body_start = long_open.end()
            if body_start < size and text[body_start] == "\n":
                body_start += 1
            if end < 0:
                problems.append(f"unterminated long string at offset {i}")
                tokens.append(Token("string", text[body_start:], i, size))
                i = size
            else:
                tokens.append(Token("string", text[body_start:end], i, end + len(close)))
                i = end + len(close)
            continue
        for length, ops in ((3, _OPS3), (2, _OPS2)):
            if text[i : i + length] in ops:
                tokens.append(Token("op", text[i : i + length], i, i + length))
                i += length
                break
        else:
            tokens.append(Token("op", char, i, i + 1))
            i += 1
    tokens.append(Token("eof", "", size, size))
    return tokens, problems


# -- Lua values ------------------------------------------------------------------------------------------


class LuaValue:
    """A value read from the config.

    ``kind``: string, number, bool, nil, table, ref (a dotted name such as ``default.rsync`` that is not a
    known local), unknown (an expression the reader does not compute). ``resolved`` is False for strings
    with ``{placeholders}`` and for unknown values. ``start``/``end`` delimit its source text.
    """

    __slots__ = ("end", "kind", "resolved", "start", "text", "value")

    def __init__(self, kind, value, text, start, end, resolved=True):
        self.kind = kind
        self.value = value
        self.text = text
        self.start = start
        self.end = end
        self.resolved = resolved

    def as_data(self):
        """Plain data for facts: strings, numbers, booleans, lists and dicts."""
        if self.kind == "table":
            return self.value.as_data()
        if self.kind in {"ref", "unknown"}:
            return {"expression": self.text}
        return self.value


class LuaTable:
    """A table constructor: its fields in order, with the source spans the rewrite needs."""

    __slots__ = ("close", "fields", "open")

    def __init__(self, open_pos):
        self.open = open_pos
        self.close = None
        self.fields = []  # [(key or None, LuaValue, field_start, field_end)]

    def get(self, key):
        for name, value, _start, _end in self.fields:
            if name == key:
                return value
        return None

    def field_span(self, key):
        for name, _value, start, end in self.fields:
            if name == key:
                return start, end
        return None

    def positional(self):
        return [value for name, value, _s, _e in self.fields if name is None]

    def as_data(self):
        named = {}
        listed = []
        for name, value, _s, _e in self.fields:
            if name is None:
                listed.append(value.as_data())
            else:
                named[str(name)] = value.as_data()
        if named and listed:
            named["[positional]"] = listed
            return named
        return named or listed


class _Reader:
    """Recursive-descent over tokens, tolerant: every method consumes at least one token or returns."""

    def __init__(self, text, tokens, env):
        self.text = text
        self.tokens = tokens
        self.env = env
        self.problems = []

    def tok(self, pos):
        return self.tokens[min(pos, len(self.tokens) - 1)]

    def skip_balanced(self, pos):
        """Index after the bracketed group starting at ``pos`` (or after the token if it opens nothing)."""
        pairs = {"(": ")", "{": "}", "[": "]"}
        stack = []
        while True:
            token = self.tok(pos)
            if token.kind == "eof":
                return pos
            if token.kind == "op" and token.value in pairs:
                stack.append(pairs[token.value])
            elif token.kind == "op" and stack and token.value == stack[-1]:
                stack.pop()
            pos += 1
            if not stack:
                return pos

    def skip_block(self, pos):
        """Index after ``function ... end`` starting at ``pos`` (keyword counting; EOF if unbalanced)."""
        depth = 0
        while True:
            token = self.tok(pos)
            if token.kind == "eof":
                return pos
            if token.kind == "name":
                if token.value in _BLOCK_OPENERS:
                    depth += 1
                elif token.value in _BLOCK_CLOSERS:
                    depth -= 1
            pos += 1
            if depth <= 0:
                return pos

    def span_text(self, start_pos, end_pos):
        if end_pos <= start_pos:
            return ""
        return self.text[self.tok(start_pos).start : self.tok(end_pos - 1).end]

    def expression(self, pos, depth=0):
        """Parse an expression at ``pos``: (LuaValue, next position)."""
        start = pos
        value, pos = self.operand(pos, depth)
        parts = [value]
        only_concat = True
        while self.tok(pos).kind in {"op", "name"} and self.tok(pos).value in _BINARY_OPS:
            if self.tok(pos).kind == "name" and self.tok(pos).value not in {"and", "or"}:
                break
            if self.tok(pos).value != "..":
                only_concat = False
            pos += 1
            value, pos = self.operand(pos, depth)
            parts.append(value)
        if len(parts) == 1:
            return parts[0], pos
        text = self.span_text(start, pos)
        begin, end = self.tok(start).start, self.tok(pos - 1).end
        if not only_concat:
            return LuaValue("unknown", None, text, begin, end, resolved=False), pos
        pieces = []
        resolved = True
        for part in parts:
            if part.kind in {"string", "number"}:
                pieces.append(str(part.value))
                resolved = resolved and part.resolved
            else:
                pieces.append("{" + part.text + "}")
                resolved = False
        return LuaValue("string", "".join(pieces), text, begin, end, resolved=resolved), pos

    def operand(self, pos, depth=0):
        token = self.tok(pos)
        start = pos
        if token.kind == "eof":
            return LuaValue("unknown", None, "", token.start, token.end, resolved=False), pos
        if depth > MAX_DEPTH:
            self.problems.append(f"expression nested deeper than {MAX_DEPTH} levels at offset {token.start}")
            end = self.skip_balanced(pos)
            return LuaValue("unknown", None, self.span_text(pos, end), token.start, self.tok(end - 1).end, False), end
        if token.is_op(*_UNARY_OPS) or token.is_name("not"):
            value, pos = self.operand(pos + 1, depth + 1)
            text = self.span_text(start, pos)
            if token.value == "-" and value.kind == "number":
                return LuaValue("number", -value.value, text, token.start, value.end), pos
            if token.value == "not" and value.kind == "bool":
                return LuaValue("bool", not value.value, text, token.start, value.end), pos
            return LuaValue("unknown", None, text, token.start, value.end, resolved=False), pos
        if token.kind == "string":
            value = LuaValue("string", token.value, self.text[token.start : token.end], token.start, token.end)
            pos += 1
        elif token.kind == "number":
            value = LuaValue("number", _lua_number(token.value), token.value, token.start, token.end)
            pos += 1
        elif token.is_name("true", "false"):
            value = LuaValue("bool", token.value == "true", token.value, token.start, token.end)
            pos += 1
        elif token.is_name("nil"):
            value = LuaValue("nil", None, token.value, token.start, token.end)
            pos += 1
        elif token.is_op("{"):
            table, pos = self.table(pos, depth + 1)
            value = LuaValue("table", table, self.span_text(start, pos), token.start, self.tok(pos - 1).end)
        elif token.is_name("function"):
            pos = self.skip_block(pos)
            value = LuaValue("unknown", None, self.span_text(start, pos), token.start, self.tok(pos - 1).end, False)
        elif token.is_op("("):
            end = self.skip_balanced(pos)
            inner, inner_end = self.expression(pos + 1, depth + 1) if depth < MAX_DEPTH else (None, pos)
            if inner is not None and inner_end == end - 1:
                value = inner
            else:
                value = LuaValue("unknown", None, self.span_text(start, end), token.start, self.tok(end - 1).end, False)
            pos = end
        elif token.kind == "name" and token.value not in _KEYWORDS:
            names = [token.value]
            pos += 1
            while self.tok(pos).is_op(".") and self.tok(pos + 1).kind == "name":
                names.append(self.tok(pos + 1).value)
                pos += 2
            dotted = ".".join(names)
            text = self.span_text(start, pos)
            if len(names) == 1 and dotted in self.env:
                known = self.env[dotted]
                value = LuaValue(known.kind, known.value, text, token.start, self.tok(pos - 1).end, known.resolved)
            else:
                value = LuaValue("ref", dotted, text, token.start, self.tok(pos - 1).end, resolved=False)
        else:
            # Something the reader does not handle here (a keyword, a stray operator): one token, unknown.
            return LuaValue("unknown", None, token.value, token.start, token.end, resolved=False), pos + 1
        # Suffixes: calls, indexing, method calls make the value unknown (nothing is executed).
        suffixed = False
        while True:
            nxt = self.tok(pos)
            if nxt.is_op("(", "[", "{"):
                pos = self.skip_balanced(pos)
            elif nxt.kind == "string":
                pos += 1
            elif nxt.is_op(":", ".") and self.tok(pos + 1).kind == "name":
                pos += 2
            else:
                break
            suffixed = True
        if suffixed:
            value = LuaValue(
                "unknown", None, self.span_text(start, pos), self.tok(start).start, self.tok(pos - 1).end, False
            )
        return value, pos

    def table(self, pos, depth=0):
        """Parse the table constructor whose ``{`` is at ``pos``: (LuaTable, position after ``}``)."""
        table = LuaTable(self.tok(pos).start)
        if depth > MAX_DEPTH:
            end = self.skip_balanced(pos)
            table.close = self.tok(end - 1).start
            self.problems.append(f"table nested deeper than {MAX_DEPTH} levels at offset {table.open}")
            return table, end
        pos += 1
        while True:
            token = self.tok(pos)
            if token.kind == "eof":
                self.problems.append(f"unclosed table at offset {table.open}")
                table.close = token.start
                return table, pos
            if token.is_op("}"):
                table.close = token.start
                return table, pos + 1
            if token.is_op(",", ";"):
                pos += 1
                continue
            field_start = token.start
            key = None
            if token.kind == "name" and self.tok(pos + 1).is_op("=") and not self.tok(pos + 2).is_op("="):
                key = token.value
                pos += 2
            elif token.is_op("["):
                close = self.skip_balanced(pos)
                key_value, _key_end = self.expression(pos + 1, depth + 1)
                if self.tok(close).is_op("="):
                    key = key_value.value if key_value.kind in {"string", "number"} else "[" + key_value.text + "]"
                    pos = close + 1
            before = pos
            value, pos = self.expression(pos, depth)
            if pos == before:  # never loop on a token the expression parser refused
                pos += 1
            table.fields.append((key, value, field_start, self.tok(pos - 1).end))
            nxt = self.tok(pos)
            if not (nxt.is_op(",", ";", "}") or nxt.kind == "eof"):
                # Not a separator: tolerate (a missing comma) and carry on from here.
                self.problems.append(f"unexpected {nxt.value!r} in table at offset {nxt.start}")


def _lua_number(text):
    try:
        if text.lower().startswith("0x"):
            return int(text, 16)
        return int(text) if re.fullmatch(r"[0-9]+", text) else float(text)
    except ValueError:
        return text


# -- lsyncd configuration --------------------------------------------------------------------------------


def read_lsyncd_config(text):
    """Read an lsyncd config (Lua). Returns a dict with ``syncs``, ``settings`` and ``problems``.

    Every ``sync`` is a dict from :func:`describe_sync` plus its ``table`` (a LuaTable, for the rewrite),
    and ``rewritable`` (False when the call's argument is not a table constructor in this file).
    """
    if not isinstance(text, str):
        text = str(text)
    tokens, problems = tokenize(text)
    env = {}
    reader = _Reader(text, tokens, env)
    syncs = []
    settings = {}
    pos = 0
    while reader.tok(pos).kind != "eof":
        token = reader.tok(pos)
        prev = reader.tok(pos - 1) if pos > 0 else None
        after_member = prev is not None and (prev.is_op(".", ":") or prev.is_name("function"))
        if token.is_name("local") and reader.tok(pos + 1).is_name("function"):
            pos = reader.skip_block(pos + 1)
            continue
        if token.is_name("local") and reader.tok(pos + 1).kind == "name" and reader.tok(pos + 2).is_op("="):
            name = reader.tok(pos + 1).value
            value, pos = reader.expression(pos + 3)
            env[name] = value
            continue
        if token.is_name("sync", "settings") and not after_member:
            call = _call_argument(reader, pos)
            if call is not None:
                value, pos = call
                if token.value == "sync":
                    syncs.append(_sync_entry(value))
                elif value.kind == "table" and isinstance(value.value.as_data(), dict):
                    settings.update(value.value.as_data())
                continue
        if (
            token.kind == "name"
            and token.value not in _KEYWORDS
            and reader.tok(pos + 1).is_op("=")
            and not (prev is not None and prev.is_op(".", ":", ",", "{", "(", "["))
        ):
            value, pos = reader.expression(pos + 2)
            env[token.value] = value
            continue
        pos += 1
    problems.extend(reader.problems)
    return {"syncs": syncs, "settings": settings, "problems": problems}


def _call_argument(reader, pos):
    """The argument of ``sync{...}``, ``sync({...})``, ``sync(name)`` or ``settings = {...}`` at ``pos``."""
    nxt = reader.tok(pos + 1)
    if nxt.is_op("{"):
        table, end = reader.table(pos + 1)
        return LuaValue("table", table, reader.span_text(pos + 1, end), nxt.start, reader.tok(end - 1).end), end
    if nxt.is_op("("):
        close = reader.skip_balanced(pos + 1)
        value, end = reader.expression(pos + 2)
        if end != close - 1:
            value = LuaValue("unknown", None, reader.span_text(pos + 2, close - 1), nxt.start, nxt.end, False)
        return value, close
    if reader.tok(pos).value == "settings" and nxt.is_op("=") and reader.tok(pos + 2).is_op("{"):
        table, end = reader.table(pos + 2)
        return LuaValue("table", table, reader.span_text(pos + 2, end), nxt.start, reader.tok(end - 1).end), end
    return None


def _sync_entry(value):
    if value.kind == "table":
        entry = describe_sync(value.value)
        entry["table"] = value.value
        entry["rewritable"] = value.value.close is not None
        return entry
    entry = describe_sync(LuaTable(value.start))
    entry["table"] = None
    entry["rewritable"] = False
    entry["problems"].append(f"sync argument is not a table this reader can see: {value.text}")
    return entry


def _string_or_none(value):
    if value is None:
        return None
    if value.kind in {"string", "number"}:
        return str(value.value)
    return "{" + value.text + "}"


def describe_sync(table):
    """What one ``sync{}`` table does: layer, source, targets, delete (effective) and excludes."""
    problems = []
    layer = None
    for value in table.positional():
        if value.kind == "ref":
            layer = value.value
            break
        if value.kind == "table":
            layer = "custom"
            break
    source = _string_or_none(table.get("source"))
    host = table.get("host")
    targetdir = table.get("targetdir")
    target_value = table.get("target")
    if target_value is not None:
        target = _string_or_none(target_value)
    elif host is not None:
        target = f"{_string_or_none(host)}:{_string_or_none(targetdir) or ''}"
    else:
        target = None
    custom_actions = sorted(
        name
        for name, _v, _s, _e in table.fields
        if name in {"onCreate", "onModify", "onDelete", "onMove", "onStartup", "onAttrib", "action"}
    )
    if custom_actions and layer is None:
        layer = "custom"
    rsync = table.get("rsync")
    extra = []
    if rsync is not None and rsync.kind == "table":
        extra_value = rsync.value.get("_extra")
        if extra_value is not None and extra_value.kind == "table":
            extra = [str(v.value) if v.kind == "string" else "{" + v.text + "}" for v in extra_value.value.positional()]
    delete_value = table.get("delete")
    delete, delete_reason = _effective_delete(layer, delete_value, extra, custom_actions)
    excludes, excludes_resolved = _excludes(table.get("exclude"))
    exclude_from = _string_or_none(table.get("excludeFrom"))
    if not excludes_resolved:
        problems.append("exclude is an expression this reader does not compute")
    return {
        "layer": layer,
        "source": source,
        "target": target,
        "target_parts": split_target(target),
        "delete": delete,
        "delete_reason": delete_reason,
        "delete_explicit": None if delete_value is None else delete_value.text,
        "excludes": excludes,
        "excludes_resolved": excludes_resolved,
        "exclude_from": exclude_from,
        "rsync_extra": extra,
        "custom_actions": custom_actions,
        "problems": problems,
    }


def _effective_delete(layer, delete_value, extra, custom_actions):
    """(delete, reason): True, False, 'startup', 'running' or None (unknown), and why."""
    if any(_RSYNC_DELETE_FLAGS.match(arg) for arg in extra):
        return True, "rsync._extra passes a --delete option"
    if delete_value is not None:
        if delete_value.kind == "bool":
            return delete_value.value, "set in the config"
        if delete_value.kind == "string" and delete_value.resolved and delete_value.value in DELETE_MODES:
            return delete_value.value, "set in the config"
        if delete_value.kind == "nil":
            return _layer_default(layer, custom_actions)
        return None, f"set to an expression this reader does not compute ({delete_value.text})"
    return _layer_default(layer, custom_actions)


def _layer_default(layer, custom_actions):
    if custom_actions and "onDelete" not in custom_actions and layer not in DELETING_LAYERS:
        return None, "custom actions: delete behaviour unknown"
    if layer in DELETING_LAYERS:
        return True, f"not set: lsyncd 2.x {layer} deletes by default"
    return None, "not set, and the layer is not one of lsyncd's defaults: behaviour unknown"


def _excludes(value):
    if value is None:
        return [], True
    if value.kind == "string" and value.resolved:
        return [value.value], True
    if value.kind == "table":
        items = value.value.positional()
        if all(v.kind == "string" and v.resolved for v in items) and len(items) == len(value.value.fields):
            return [v.value for v in items], True
        return [v.value for v in items if v.kind == "string" and v.resolved], False
    return [], False


def split_target(target):
    """``{kind, host, path}`` of an rsync/lsyncd target: local path, ``[user@]host:path``, rsync daemon."""
    if target is None:
        return {"kind": "unknown", "host": None, "path": None}
    if target.startswith("rsync://"):
        rest = target[len("rsync://") :]
        host, _slash, module = rest.partition("/")
        return {"kind": "rsyncd", "host": host.rpartition("@")[2], "path": None, "module": module}
    match = re.match(r"^(?:[^/@:]+@)?([^/:\[]+|\[[^\]]+\])::(.*)$", target)
    if match:
        return {"kind": "rsyncd", "host": match.group(1), "path": None, "module": match.group(2)}
    match = re.match(r"^(?:[^/@:]+@)?([^/:\[]+|\[[^\]]+\]):(.*)$", target)
    if match and not target.startswith("/"):
        return {"kind": "ssh", "host": match.group(1), "path": match.group(2)}
    return {"kind": "local", "host": None, "path": target}


# -- lsyncd command lines --------------------------------------------------------------------------------

_LSYNCD_VALUE_OPTIONS = {"delay", "log", "logfile", "pidfile", "runner"}
_LSYNCD_SYNC_OPTIONS = {"rsync": 2, "rsyncssh": 3, "direct": 2}


DEBIAN_INIT_CONFIG = "/etc/lsyncd/lsyncd.conf.lua"


def lsyncd_index(argv):
    """Index of the word that runs lsyncd in ``argv`` (also behind ``sh -c``, ``nice``...), or None."""
    for index, word in enumerate(argv or []):
        base = posixpath.basename(word)
        if base == "lsyncd" or (word.startswith("/etc/init.d/") and base.startswith("lsyncd")):
            return index
    return None


def is_lsyncd_argv(argv):
    """True when ``argv`` runs lsyncd (directly, through a wrapper, or via /etc/init.d/lsyncd)."""
    return lsyncd_index(argv) is not None


def lsyncd_argv(argv):
    """Config file and command-line syncs of an lsyncd command line (``-rsync SRC TGT`` and friends).

    Debian's /etc/init.d/lsyncd script starts lsyncd with /etc/lsyncd/lsyncd.conf.lua.
    """
    index = lsyncd_index(argv)
    if index is None:
        return {"config": None, "syncs": [], "init_script": False}
    if argv[index].startswith("/etc/init.d/"):
        return {"config": DEBIAN_INIT_CONFIG, "syncs": [], "init_script": True}
    argv = argv[index:]
    config = None
    syncs = []
    i = 1
    while i < len(argv):
        arg = argv[i]
        option = arg.lstrip("-") if arg.startswith("-") else None
        if option in _LSYNCD_VALUE_OPTIONS:
            i += 2
            continue
        if option in _LSYNCD_SYNC_OPTIONS:
            count = _LSYNCD_SYNC_OPTIONS[option]
            values = argv[i + 1 : i + 1 + count]
            if option == "rsyncssh" and len(values) == 3:
                target = f"{values[1]}:{values[2]}"
            else:
                target = values[1] if len(values) > 1 else None
            syncs.append(
                {
                    "layer": f"default.{option}",
                    "source": values[0] if values else None,
                    "target": target,
                    "target_parts": split_target(target),
                    "delete": True,
                    "delete_reason": "command-line sync: lsyncd deletes by default",
                    "excludes": [],
                    "excludes_resolved": True,
                    "rsync_extra": [],
                    "problems": [],
                }
            )
            i += 1 + count
            continue
        if option is None and config is None:
            config = arg
        i += 1
    return {"config": config, "syncs": syncs, "init_script": False}


# -- systemd ---------------------------------------------------------------------------------------------


def parse_systemctl_show(text):
    """Units from ``systemctl show -p ... UNIT...``: one dict per blank-line separated block.

    ``ExecStart`` (and other ``Exec*``) become lists of argv lists (split on whitespace, as systemctl
    prints them).
    """
    units = []
    current = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                units.append(current)
                current = {}
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key.startswith("Exec"):
            current.setdefault(key, []).extend(parse_exec_property(value))
        else:
            current[key] = value
    if current:
        units.append(current)
    return units


def parse_exec_property(value):
    """argv lists from a ``{ path=... ; argv[]=... ; ... }`` property value of ``systemctl show``."""
    commands = []
    for match in re.finditer(r"argv\[\]=(.*?) ; (?:ignore_errors|flags)=", value):
        commands.append(match.group(1).split())
    return commands


def parse_unit_file(text):
    """``{section: {key: [values]}}`` of a unit file (continuation lines joined, an empty value resets)."""
    sections = {}
    section = None
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            section = sections.setdefault(line[1:-1], {})
            continue
        if section is None:
            continue
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key = key.strip()
        value = value.strip()
        if value == "":
            section[key] = []
        else:
            section.setdefault(key, []).append(value)
    return sections


def unit_exec_argv(value, specifiers=None):
    """argv of one ``ExecStart=`` value of a unit file: prefixes dropped, specifiers expanded."""
    value = value.lstrip()
    while value[:1] in {"-", "@", ":", "+", "!"}:
        value = value[1:]
    for key, replacement in (specifiers or {}).items():
        value = value.replace("%" + key, replacement)
    value = value.replace("%%", "%")
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def cgroup_unit(text):
    """``{scope, uid, unit}`` of the service a process runs in, from ``/proc/PID/cgroup``.

    ``scope`` is system or user; ``unit`` is the innermost ``.service`` (None for session scopes and
    processes outside a service).
    """
    path = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "" and parts[2] not in {"", "/"}:
            path = parts[2]
            break
        if parts[1] == "name=systemd":
            path = parts[2]
    if not path:
        return {"scope": None, "uid": None, "unit": None}
    segments = [s for s in path.split("/") if s]
    user_manager = next((i for i, s in enumerate(segments) if re.fullmatch(r"user@\d+\.service", s)), None)
    if user_manager is not None:
        uid = int(segments[user_manager][5:-8])
        inner = [s for s in segments[user_manager + 1 :] if s.endswith(".service")]
        return {"scope": "user", "uid": uid, "unit": inner[-1] if inner else None}
    services = [s for s in segments if s.endswith(".service")]
    return {"scope": "system", "uid": None, "unit": services[-1] if services else None}


# -- rsync, cron, tmpfiles, syncthing, unison ------------------------------------------------------------


def rsync_deletes(argv):
    """When ``argv`` contains an rsync call that deletes on its destination: {source, destination, flags}."""
    for start, arg in enumerate(argv):
        if posixpath.basename(arg) != "rsync":
            continue
        flags = []
        operands = []
        skip = False
        for item in argv[start + 1 :]:
            if skip:
                skip = False
                continue
            if item in {"&&", "||", ";", "|"} or item.endswith(";"):
                break
            if item in _RSYNC_VALUE_OPTIONS:
                skip = True
                continue
            if item.startswith("--"):
                name = item.split("=", 1)[0]
                if _RSYNC_DELETE_FLAGS.match(name) or name == _RSYNC_REMOVE_SOURCE:
                    flags.append(name)
            elif item.startswith("-") and len(item) > 1:
                continue
            else:
                operands.append(item)
        deleting = [f for f in flags if f != _RSYNC_REMOVE_SOURCE]
        if deleting and operands:
            return {"source": operands[:-1], "destination": operands[-1], "flags": deleting}
    return None


def shell_words(command):
    """Words of a shell command line, tolerant of unbalanced quotes."""
    try:
        return shlex.split(command, comments=False)
    except ValueError:
        return command.split()


def parse_crontab(text, system=False, owner=None):
    """Entries of a crontab: ``{line_no, line, user, command, disabled}``.

    ``system`` crontabs (/etc/crontab, /etc/cron.d) have a user field; user crontabs belong to ``owner``.
    Lines disabled by the role (prefixed with CRON_DISABLED_MARKER) come back with ``disabled: True``.
    """
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        disabled = False
        if line.startswith(CRON_DISABLED_MARKER.strip()):
            disabled = True
            line = line[len(CRON_DISABLED_MARKER.strip()) :].strip()
        if not line or line.startswith("#"):
            continue
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*\s*=", line):
            continue  # environment assignment
        fields = line.split(None, 6 if system else 5)
        if line.startswith("@"):
            fields = line.split(None, 2 if system else 1)
            schedule_len = 1
        else:
            schedule_len = 5
        need = schedule_len + (2 if system else 1)
        if len(fields) < need:
            continue
        user = fields[schedule_len] if system else owner
        command = fields[-1] if len(fields) == need else " ".join(fields[need - 1 :])
        entries.append({"line_no": number, "line": raw, "user": user, "command": command, "disabled": disabled})
    return entries


_TMPFILES_CLEANING = {"d", "D", "e", "v", "q", "Q", "C"}
_TMPFILES_REMOVING = {"r", "R"}


def parse_tmpfiles(text):
    """Lines of a tmpfiles.d file: ``{line_no, type, path, age, line}`` (specifier-free paths only)."""
    entries = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = shell_words(line)
        if len(fields) < 2:
            continue
        kind = fields[0].rstrip("!+-=~^$")[:1]
        age = fields[5] if len(fields) > 5 else "-"
        entries.append({"line_no": number, "type": fields[0], "base_type": kind, "path": fields[1], "age": age})
    return entries


def tmpfiles_effect(entry):
    """What a tmpfiles line does to files below its path: 'ages' (cleanup by age), 'empties', 'removes'."""
    kind = entry["base_type"]
    if kind in _TMPFILES_REMOVING:
        return "removes"
    if kind == "D":
        # D: contents removed whenever systemd-tmpfiles runs with --remove (at every boot).
        return "empties"
    if kind in _TMPFILES_CLEANING and entry["age"] not in {"-", "", "0"}:
        return "ages"
    return None


def syncthing_folders(text):
    """``[{id, path, type}]`` of the folders in a syncthing config.xml (regex, no XML parser needed)."""
    folders = []
    for match in re.finditer(r"<folder\b([^>]*)>", text):
        attributes = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
        if "path" in attributes:
            folders.append(
                {
                    "id": attributes.get("id"),
                    "path": attributes["path"],
                    "type": attributes.get("type", "sendreceive"),
                }
            )
    return folders


def unison_roots(text):
    """Roots of a unison profile (``root = /path`` or ``root = ssh://host//path``)."""
    roots = []
    for line in text.splitlines():
        match = re.match(r"^\s*root\s*=\s*(.+?)\s*$", line)
        if match:
            roots.append(match.group(1))
    return roots


def unison_root_path(root):
    """``(host, path)`` of a unison root: ``ssh://host//abs``, ``ssh://host/rel`` or a local path."""
    match = re.match(r"^(?:ssh|socket|rsh)://(?:[^@/]+@)?([^/]+)/(.*)$", root)
    if match:
        path = match.group(2)
        return match.group(1), path if path.startswith("/") else None
    return None, root


# -- paths -----------------------------------------------------------------------------------------------


def normalize(path):
    """Normalised absolute path, or None for paths this module cannot place (relative, placeholders)."""
    if not isinstance(path, str) or not path.startswith("/") or "{" in path:
        return None
    return posixpath.normpath(path)


def relation(path, model_dir):
    """How ``path`` relates to ``model_dir``: 'same', 'contains' (an ancestor), 'inside' or None."""
    path = normalize(path)
    model_dir = normalize(model_dir)
    if path is None or model_dir is None:
        return None
    if path == model_dir:
        return "same"
    if path == "/" or model_dir.startswith(path + "/"):
        return "contains"
    if model_dir == "/" or path.startswith(model_dir + "/"):
        return "inside"
    return None


def reached(path, model_dirs):
    """Model directories ``path`` reaches; every one when the path is unknown (conservative)."""
    if normalize(path) is None:
        return list(model_dirs)
    return [m for m in model_dirs if relation(path, m)]


def exclude_regex(pattern):
    """Python regex of an lsyncd exclude pattern, as lsyncd's own toLuaPattern reads it."""
    out = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    body = "".join(out)
    return ("^" + body) if pattern.startswith("/") else ("/" + body)


def excluded(patterns, relative):
    """True when a directory at ``relative`` (below the sync root) is excluded by one of ``patterns``."""
    candidate = "/" + relative.strip("/") + "/"
    for pattern in patterns:
        try:
            if re.search(exclude_regex(pattern), candidate):
                return True
        except re.error:
            continue
    return False


def exclude_pattern(root, model_dir):
    """The anchored exclude pattern that keeps ``model_dir`` out of a sync rooted at ``root`` (or None)."""
    if relation(root, model_dir) != "contains":
        return None
    relative = normalize(model_dir)[len(normalize(root)) :].strip("/")
    return "/" + relative + "/"


def sync_protection(sync, model_dirs):
    """Which model directories a sync can delete in, and whether each is protected.

    Deletion happens on the target side. A model directory inside the target is protected when delete is
    off, or when an exclude pattern covers it (rsync does not delete excluded files without
    --delete-excluded). A target at or inside a model directory is protected only by delete = false.
    """
    target_path = (sync.get("target_parts") or {}).get("path")
    source = sync.get("source")
    findings = []
    delete = sync.get("delete")
    delete_excluded = any(a.startswith("--delete-excluded") for a in sync.get("rsync_extra", []))
    for model_dir in model_dirs:
        rel = relation(target_path, model_dir) if normalize(target_path) else None
        if rel is None and normalize(target_path) is None:
            # Unknown target path: judge by the source (lsyncd mirrors the source's layout).
            rel = relation(source, model_dir) if normalize(source) else "unknown"
            root = source
        else:
            root = target_path
        if rel is None:
            continue
        covered = False
        if rel == "contains" and not delete_excluded and sync.get("excludes_resolved", True):
            covered = excluded(sync.get("excludes", []), normalize(model_dir)[len(normalize(root)) :])
        protected = delete is False or covered
        findings.append({"model_dir": model_dir, "relation": rel, "excluded": covered, "protected": protected})
    return findings


# -- exclude mode rewrite --------------------------------------------------------------------------------


def _lua_string(value):
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


def sync_reaches(sync, model_dirs):
    """Model directories a sync's deletions could reach (all of them when its target path is unknown)."""
    target_path = (sync.get("target_parts") or {}).get("path")
    if normalize(target_path) is not None:
        return [m for m in model_dirs if relation(target_path, m)]
    if normalize(sync.get("source")) is not None:
        return [m for m in model_dirs if relation(sync["source"], m)]
    return list(model_dirs)


def exclude_rewrite(text, model_dirs, extra_patterns=()):
    """The config with, in every ``sync{}`` that could reach a model directory: ``delete = false`` and the
    model directories (and ``extra_patterns``) added to ``exclude``. Other syncs are left as they are.

    Returns ``{content, changed, problems, notes, syncs}``: ``syncs`` says per sync what is added;
    ``problems`` what prevents protecting a sync (that sync is then left unchanged). Rewriting a rewritten
    config changes nothing.
    """
    config = read_lsyncd_config(text)
    edits = []  # (start, end, replacement)
    problems = []
    notes = []
    report = []
    seen_tables = set()
    for index, sync in enumerate(config["syncs"], start=1):
        table = sync["table"]
        label = f"sync #{index} ({sync['source']} -> {sync['target']})"
        reaches = sync_reaches(sync, model_dirs)
        if not reaches:
            report.append({"sync": label, "touched": False, "delete": False, "excludes": []})
            continue
        if table is None or not sync["rewritable"]:
            problems.append(f"{label}: its table is not written out in this file, so it cannot be edited")
            continue
        if any(_RSYNC_DELETE_FLAGS.match(a.split("=", 1)[0]) for a in sync["rsync_extra"]):
            problems.append(f"{label}: rsync._extra passes {sync['rsync_extra']}; remove its --delete options")
            continue
        if id(table) in seen_tables:
            continue  # one table used by several sync calls: edited once
        seen_tables.add(id(table))
        target_path = (sync["target_parts"] or {}).get("path")
        wanted = []
        for model_dir in model_dirs:
            for root in (sync["source"], target_path):
                pattern = exclude_pattern(root, model_dir) if normalize(root) else None
                if pattern and pattern not in wanted:
                    wanted.append(pattern)
            for root in (sync["source"], target_path):
                if relation(root, model_dir) in {"same", "inside"}:
                    notes.append(
                        f"{label}: it syncs into {model_dir} itself; delete = false stops deletions, but files "
                        "of the same name are still overwritten (the disable mode stops that too)"
                    )
        wanted.extend(p for p in extra_patterns if p not in wanted)
        missing = [p for p in wanted if p not in sync["excludes"]]
        exclude_value = table.get("exclude")
        delete_value = table.get("delete")
        insert = []
        if sync["delete"] is not False:
            if delete_value is not None:
                edits.append((delete_value.start, delete_value.end, "false"))
            else:
                insert.append("delete = false")
        if missing:
            addition = ", ".join(_lua_string(p) for p in missing)
            if exclude_value is None:
                insert.append("exclude = { " + addition + " }")
            elif exclude_value.kind == "string" and exclude_value.resolved:
                edits.append(
                    (exclude_value.start, exclude_value.end, "{ " + exclude_value.text + ", " + addition + " }")
                )
            elif exclude_value.kind == "table" and sync["excludes_resolved"] and exclude_value.value.close is not None:
                inner = exclude_value.value
                existing = text[inner.open + 1 : inner.close].rstrip()
                sep = "" if not existing.strip() or existing.endswith((",", ";")) else ","
                edits.append((inner.open + 1, inner.close, f"{existing}{sep} {addition} "))
            else:
                problems.append(
                    f"{label}: exclude is an expression ({exclude_value.text}); list the patterns literally"
                )
                continue
        if insert:
            edits.append((table.open + 1, table.open + 1, _insertion(text, table, insert)))
        report.append({"sync": label, "touched": True, "delete": sync["delete"] is not False, "excludes": missing})
    content = _apply_edits(text, edits)
    return {"content": content, "changed": content != text, "problems": problems, "notes": notes, "syncs": report}


def _insertion(text, table, items):
    """Text inserted right after a table's ``{``: one field per line, or inline for a one-line table."""
    first = table.fields[0][2] if table.fields else table.close
    if first is not None and "\n" in text[table.open : first]:
        line_start = text.rfind("\n", 0, first) + 1
        indent = text[line_start:first] if text[line_start:first].strip() == "" else "  "
        return "".join(f"\n{indent}{item}," for item in items)
    return " " + " ".join(f"{item}," for item in items) + " "


def _apply_edits(text, edits):
    result = text
    for start, end, replacement in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        result = result[:start] + replacement + result[end:]
    return result


# -- summary ---------------------------------------------------------------------------------------------


def summary_lines(hazards, model_dirs):
    """Readable lines, one per finding, overlapping and unneutralised first."""
    if not hazards:
        return [f"no deleting syncer found that could reach {', '.join(model_dirs)}"]

    def rank(h):
        return (not h["overlaps_model_dir"] or h["neutralised"], not h["overlaps_model_dir"], h["id"])

    lines = []
    for hazard in sorted(hazards, key=rank):
        if hazard["overlaps_model_dir"] and not hazard["neutralised"]:
            state = "HAZARD"
        elif hazard["overlaps_model_dir"]:
            state = "neutralised"
        else:
            state = "elsewhere"
        reach = ", ".join(hazard["model_dirs_reached"]) or "no model directory"
        lines.append(f"[{state}] {hazard['where']}: {hazard['detail']} (reaches {reach})")
    return lines
