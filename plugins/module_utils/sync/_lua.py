# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A small, tolerant reader of Lua source text (enough for lsyncd configurations).

Tokens, values and tables with their source offsets (the exclude rewrite edits the text in place). It never
executes anything and never raises on bad input: what it cannot read is reported, and a value it cannot
compute keeps its source text as a ``{placeholder}``.

Standard library only: this file is shipped to the managed host with the module.
"""

from __future__ import annotations

import re

# Nesting deeper than this in a config is not followed (the reader stays iterative and bounded).
MAX_DEPTH = 64


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
KEYWORDS = {
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
            i = _skip_comment(text, i, problems)
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
            token = _quoted_string(text, i, problems)
        else:
            long_open = _LONG_OPEN_RE.match(text, i) if char == "[" else None
            token = _long_string(text, i, long_open, problems) if long_open else _operator(text, i)
        tokens.append(token)
        i = token.end
    tokens.append(Token("eof", "", size, size))
    return tokens, problems


def _skip_comment(text, i, problems):
    """Offset after the comment starting at ``i`` (``--`` to the end of the line, or ``--[[ ... ]]``)."""
    long_open = _LONG_OPEN_RE.match(text, i + 2)
    if long_open:
        close = "]" + long_open.group(1) + "]"
        end = text.find(close, long_open.end())
        if end < 0:
            problems.append(f"unterminated comment at offset {i}")
            return len(text)
        return end + len(close)
    end = text.find("\n", i)
    return len(text) if end < 0 else end + 1


def _quoted_string(text, i, problems):
    """The ``"..."`` or ``'...'`` string token at ``i`` (an unterminated one ends at the line's end)."""
    quote = text[i]
    size = len(text)
    j = i + 1
    while j < size and text[j] != quote and text[j] != "\n":
        j += 2 if text[j] == "\\" else 1
    if j >= size or text[j] != quote:
        problems.append(f"unterminated string at offset {i}")
        j = min(j, size)
        return Token("string", _decode_escapes(text[i + 1 : j]), i, j)
    return Token("string", _decode_escapes(text[i + 1 : j]), i, j + 1)


def _long_string(text, i, long_open, problems):
    """The ``[[...]]`` (or ``[==[...]==]``) string token at ``i``; a first newline is not part of it."""
    size = len(text)
    close = "]" + long_open.group(1) + "]"
    end = text.find(close, long_open.end())
    body_start = long_open.end()
    if body_start < size and text[body_start] == "\n":
        body_start += 1
    if end < 0:
        problems.append(f"unterminated long string at offset {i}")
        return Token("string", text[body_start:], i, size)
    return Token("string", text[body_start:end], i, end + len(close))


def _operator(text, i):
    """The operator token at ``i``: the longest of ``...``, the two-character ones, or one character."""
    for length, ops in ((3, _OPS3), (2, _OPS2)):
        if text[i : i + length] in ops:
            return Token("op", text[i : i + length], i, i + length)
    return Token("op", text[i], i, i + 1)


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


class Reader:
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
        if token.kind == "eof":
            return LuaValue("unknown", None, "", token.start, token.end, resolved=False), pos
        if depth > MAX_DEPTH:
            self.problems.append(f"expression nested deeper than {MAX_DEPTH} levels at offset {token.start}")
            end = self.skip_balanced(pos)
            return LuaValue("unknown", None, self.span_text(pos, end), token.start, self.tok(end - 1).end, False), end
        if token.is_op(*_UNARY_OPS) or token.is_name("not"):
            return self.unary(pos, depth)
        primary = self.primary(pos, depth)
        if primary is None:
            # Something the reader does not handle here (a keyword, a stray operator): one token, unknown.
            return LuaValue("unknown", None, token.value, token.start, token.end, resolved=False), pos + 1
        value, end = primary
        return self.suffixes(pos, value, end)

    def unary(self, pos, depth):
        """``-x``, ``not x``, ``#x``, ``~x`` at ``pos``: computed for numbers and booleans, else unknown."""
        token = self.tok(pos)
        value, end = self.operand(pos + 1, depth + 1)
        text = self.span_text(pos, end)
        if token.value == "-" and value.kind == "number":
            return LuaValue("number", -value.value, text, token.start, value.end), end
        if token.value == "not" and value.kind == "bool":
            return LuaValue("bool", not value.value, text, token.start, value.end), end
        return LuaValue("unknown", None, text, token.start, value.end, resolved=False), end

    def primary(self, pos, depth):
        """(value, end) of a literal, table, function, parenthesised expression or name; None otherwise."""
        token = self.tok(pos)
        literal = self.literal(token)
        if literal is not None:
            return literal, pos + 1
        if token.is_op("{"):
            table, end = self.table(pos, depth + 1)
            return LuaValue("table", table, self.span_text(pos, end), token.start, self.tok(end - 1).end), end
        if token.is_name("function"):
            end = self.skip_block(pos)
            return LuaValue("unknown", None, self.span_text(pos, end), token.start, self.tok(end - 1).end, False), end
        if token.is_op("("):
            end = self.skip_balanced(pos)
            inner, inner_end = self.expression(pos + 1, depth + 1) if depth < MAX_DEPTH else (None, pos)
            if inner is not None and inner_end == end - 1:
                return inner, end
            return LuaValue("unknown", None, self.span_text(pos, end), token.start, self.tok(end - 1).end, False), end
        if token.kind == "name" and token.value not in KEYWORDS:
            return self.name(pos)
        return None

    def literal(self, token):
        """The value of a string, number, boolean or nil token (None for any other token)."""
        if token.kind == "string":
            return LuaValue("string", token.value, self.text[token.start : token.end], token.start, token.end)
        if token.kind == "number":
            return LuaValue("number", _lua_number(token.value), token.value, token.start, token.end)
        if token.is_name("true", "false"):
            return LuaValue("bool", token.value == "true", token.value, token.start, token.end)
        if token.is_name("nil"):
            return LuaValue("nil", None, token.value, token.start, token.end)
        return None

    def name(self, pos):
        """A (dotted) name at ``pos``: a known ``local`` takes its value, anything else is a reference."""
        token = self.tok(pos)
        names = [token.value]
        end = pos + 1
        while self.tok(end).is_op(".") and self.tok(end + 1).kind == "name":
            names.append(self.tok(end + 1).value)
            end += 2
        dotted = ".".join(names)
        text = self.span_text(pos, end)
        if len(names) == 1 and dotted in self.env:
            known = self.env[dotted]
            return LuaValue(known.kind, known.value, text, token.start, self.tok(end - 1).end, known.resolved), end
        return LuaValue("ref", dotted, text, token.start, self.tok(end - 1).end, resolved=False), end

    def suffixes(self, start, value, pos):
        """Calls, indexing and method calls after a value make it unknown (nothing is executed)."""
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
