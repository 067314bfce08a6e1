# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What an lsyncd configuration or command line does, and the rewrite used by the exclude mode.

- ``read_lsyncd_config``: the ``sync{...}`` and ``settings{...}`` calls of a config (read with ``_lua``),
  each described by layer, source, target, effective delete and excludes.
- ``lsyncd_argv``: config file and command-line syncs of an lsyncd command line.
- ``sync_protection``: which model directories a sync can delete in, and whether each is protected.
- ``exclude_rewrite``: in every ``sync{}`` table, ``delete = false`` and the model directories added to
  ``exclude``; a rewrite of a rewritten config changes nothing.

Standard library only: this file is shipped to the managed host with the module.
"""

from __future__ import annotations

import posixpath
import re

from ansible_collections.llamarpc.cluster.plugins.module_utils.sync._lua import (
    KEYWORDS,
    LuaTable,
    LuaValue,
    Reader,
    tokenize,
)
from ansible_collections.llamarpc.cluster.plugins.module_utils.sync._sync_paths import normalize, relation, split_target
from ansible_collections.llamarpc.cluster.plugins.module_utils.sync._syncers import RSYNC_DELETE_FLAGS

# lsyncd 2.x: these layers delete on the target unless the sync says ``delete = false``
# (default-rsync.lua, default-rsyncssh.lua and default-direct.lua all set ``delete = true``).
DELETING_LAYERS = ("default.rsync", "default.rsyncssh", "default.direct")
DELETE_MODES = ("startup", "running")

MAX_CONFIG_BYTES = 1 << 20


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
    reader = Reader(text, tokens, env)
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
            and token.value not in KEYWORDS
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
    if any(RSYNC_DELETE_FLAGS.match(arg) for arg in extra):
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


# -- lsyncd command lines --------------------------------------------------------------------------------

_LSYNCD_VALUE_OPTIONS = {"delay", "log", "logfile", "pidfile", "runner"}
_LSYNCD_SYNC_OPTIONS = {"rsync": 2, "rsyncssh": 3, "direct": 2}


DEBIAN_INIT_CONFIG = "/etc/lsyncd/lsyncd.conf.lua"


# Commands that run the command after them (with their own options first): lsyncd behind them is lsyncd run.
_WRAPPERS = frozenset(
    (
        *("sh", "bash", "dash", "env", "nice", "ionice", "nohup", "setsid", "chrt", "taskset", "timeout"),
        *("stdbuf", "sudo", "runuser", "exec", "flock", "chpst", "daemon", "start-stop-daemon"),
    )
)
# Options of those wrappers whose value is the next word (sudo -u USER, nice -n 10, ionice -c 3, flock -w 5 ...).
_WRAPPER_VALUE_OPTIONS = frozenset(("-u", "-g", "-n", "-c", "-p", "-w", "-k", "-s", "-C", "--user", "--group"))
# Shell words after which a new command starts (a cron line: cd /srv && lsyncd conf.lua).
_COMMAND_SEPARATORS = frozenset(("&&", "||", ";", "|", "&"))


def lsyncd_index(argv):
    """Index of the word that runs lsyncd in ``argv``, or None: lsyncd (or /etc/init.d/lsyncd*) in a command's place -
    the first word, behind a wrapper and its options (``sh -c``, ``nice -n 10``, ``sudo -u pool``...), or after a
    shell separator. A word ``lsyncd`` anywhere else is an argument (``molecule test -s lsyncd``, ``vim
    /etc/lsyncd``), not lsyncd running."""
    command_place = True
    wrapper = False
    value_next = False
    for index, word in enumerate(argv or []):
        base = posixpath.basename(word)
        if word in _COMMAND_SEPARATORS or word.endswith(";"):
            command_place, wrapper, value_next = True, False, False
            continue
        if not command_place:
            continue
        if base == "lsyncd" or (word.startswith("/etc/init.d/") and base.startswith("lsyncd")):
            return index
        if value_next:  # the value of a wrapper's option (sudo -u pool)
            value_next = False
            continue
        if base in _WRAPPERS:
            wrapper = True
            continue
        if wrapper and (word.startswith("-") or "=" in word):
            # sh -c runs its next word: not an option value.
            value_next = word in _WRAPPER_VALUE_OPTIONS and word != "-c"
            continue
        if wrapper and word[:1].isdigit():  # timeout 5m, taskset 0x3, nice's old -10 form's value
            continue
        command_place = wrapper = False
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
        if not sync_reaches(sync, model_dirs):
            report.append({"sync": label, "touched": False, "delete": False, "excludes": []})
            continue
        problem = _unrewritable(sync, label)
        if problem:
            problems.append(problem)
            continue
        if id(table) in seen_tables:
            continue  # one table used by several sync calls: edited once
        seen_tables.add(id(table))
        missing = _missing_excludes(sync, model_dirs, extra_patterns, label, notes)
        table_edits, problem = _table_edits(text, sync, missing, label)
        edits.extend(table_edits)
        if problem:
            problems.append(problem)
            continue
        report.append({"sync": label, "touched": True, "delete": sync["delete"] is not False, "excludes": missing})
    content = _apply_edits(text, edits)
    return {"content": content, "changed": content != text, "problems": problems, "notes": notes, "syncs": report}


def _unrewritable(sync, label):
    """Why a sync that reaches a model directory cannot be protected by editing this file (or None)."""
    if sync["table"] is None or not sync["rewritable"]:
        return f"{label}: its table is not written out in this file, so it cannot be edited"
    if any(RSYNC_DELETE_FLAGS.match(a.split("=", 1)[0]) for a in sync["rsync_extra"]):
        return f"{label}: rsync._extra passes {sync['rsync_extra']}; remove its --delete options"
    return None


def _missing_excludes(sync, model_dirs, extra_patterns, label, notes):
    """Exclude patterns the sync lacks: each model directory below its source or target, and ``extra_patterns``.

    A sync into a model directory itself gets a note in ``notes`` (an exclude cannot cover it).
    """
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
    return [p for p in wanted if p not in sync["excludes"]]


def _table_edits(text, sync, missing, label):
    """(edits, problem) that turn delete off in a sync's table and add the ``missing`` excludes.

    With a problem (an exclude this reader cannot extend) only the delete edit is in ``edits``.
    """
    table = sync["table"]
    exclude_value = table.get("exclude")
    delete_value = table.get("delete")
    edits = []
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
            edits.append((exclude_value.start, exclude_value.end, "{ " + exclude_value.text + ", " + addition + " }"))
        elif exclude_value.kind == "table" and sync["excludes_resolved"] and exclude_value.value.close is not None:
            inner = exclude_value.value
            existing = text[inner.open + 1 : inner.close].rstrip()
            sep = "" if not existing.strip() or existing.endswith((",", ";")) else ","
            edits.append((inner.open + 1, inner.close, f"{existing}{sep} {addition} "))
        else:
            return edits, f"{label}: exclude is an expression ({exclude_value.text}); list the patterns literally"
    if insert:
        edits.append((table.open + 1, table.open + 1, _insertion(text, table, insert)))
    return edits, None


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
