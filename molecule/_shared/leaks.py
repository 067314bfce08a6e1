"""Where a secret shows up after Ansible ran with it: the runs' own output, the controller's ~/.ansible and the lab
hosts' journals (a module logs its arguments there, unless no_log masks them).

A secret never travels in a command sent to a lab host by these helpers: sudo logs every command it runs into the
host's journal, so such a check would find its own command line.
"""

from __future__ import annotations

from pathlib import Path

from labtest import lab

#: Files above this size under ~/.ansible are not read (nothing Ansible keeps there comes near it).
_MAX_FILE = 64 * 1024 * 1024


def journal(name, since):
    """Everything host ``name`` journaled since ``since`` (seconds of the epoch), messages only."""
    return lab(name).check_output(f"journalctl --no-pager --quiet -o cat --since @{int(since)}")


def controller_files(root=None):
    """{path: text} of every regular file under the controller's ~/.ansible (or ``root``); sockets skipped."""
    root = Path(root) if root else Path.home() / ".ansible"
    found = {}
    if not root.is_dir():
        return found
    for path in root.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink() and path.stat().st_size <= _MAX_FILE:
                found[str(path)] = path.read_bytes().decode("utf-8", "replace")
        except OSError:
            continue  # a temporary file removed while we walked
    return found


def leaks(secrets, places):
    """[(secret's label, place)] for each secret (label -> value) found in any of ``places`` (place -> text)."""
    return [(label, place) for label, value in secrets.items() for place, text in places.items() if value in text]
