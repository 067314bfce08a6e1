# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Pure helpers of ``sshfs_masked_mount``: sshfs options, the systemd unit, mountinfo and /proc parsing, health.

Standard library only and side-effect free, so every piece can be unit-tested; the module does the I/O.
"""

from __future__ import annotations

import re
import signal

UNIT_PREFIX = "llamarpc-sshfs-"
UNIT_DIR = "/etc/systemd/system"

# The seed's workaround for the libfuse3 3.17.2 signal-handler deadlock: libfuse installs its own handler only
# for a signal whose disposition is still SIG_DFL, so ignoring these before exec keeps its handler out.
DEFAULT_MASKED_SIGNALS = ("HUP", "TERM", "INT", "QUIT")

# A process state that never answers FUSE requests: stopped (T), traced (t), zombie (Z), dead (X).
_STOPPED_STATES = frozenset("TtZX")

_HOST_RE = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9](?:[A-Za-z0-9._-]{0,252}))$")
_USER_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$")
# Characters systemd-escape --path keeps as they are.
_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:_.")


class SshfsError(ValueError):
    """A request that cannot be honoured; the message is meant for the user."""


def systemd_escape_path(path):
    """What ``systemd-escape --path PATH`` prints: ``/data/shards`` -> ``data-shards``, ``/`` -> ``-``."""
    parts = [p for p in path.split("/") if p]
    if not parts:
        return "-"
    out = []
    for index, char in enumerate("/".join(parts)):
        if char == "/":
            out.append("-")
        elif char in _SAFE and not (index == 0 and char == "."):
            out.append(char)
        else:
            out.extend(f"\\x{byte:02x}" for byte in char.encode("utf-8"))
    return "".join(out)


def unit_name(path):
    """The systemd service that supervises the mount at ``path``."""
    return f"{UNIT_PREFIX}{systemd_escape_path(path)}.service"


def normalize_mount_path(path):
    """An absolute mount point without trailing or duplicate slashes and without ``.`` or ``..`` parts."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise SshfsError(f"path must be absolute, got {path!r}")
    parts = [p for p in path.split("/") if p]
    if any(p in {".", ".."} for p in parts):
        raise SshfsError(f"path must not contain '.' or '..' components: {path!r}")
    if not parts:
        raise SshfsError("path must not be /")
    if any(c in path for c in "\n\t\\"):
        raise SshfsError(f"path must not contain newlines, tabs or backslashes: {path!r}")
    return "/" + "/".join(parts)


def parse_src(src):
    """``[user@]host:path`` -> (user or None, host, remote path). The path may be empty (the login directory)."""
    if not isinstance(src, str) or ":" not in src:
        raise SshfsError(f"src must look like host:path, got {src!r}")
    if src.startswith("[") or "@[" in src:
        close = src.index("]")
        if src[close + 1 : close + 2] != ":":
            raise SshfsError(f"src must look like host:path, got {src!r}")
        login, remote = src[: close + 1], src[close + 2 :]
    else:
        login, remote = src.split(":", 1)
    user = None
    if "@" in login:
        user, login = login.rsplit("@", 1)
        if not _USER_RE.match(user):
            raise SshfsError(f"invalid user {user!r} in src {src!r}")
    if not _HOST_RE.match(login):
        raise SshfsError(f"invalid host {login!r} in src {src!r}")
    if any(c in remote for c in "\n\t,"):
        raise SshfsError(f"remote path in src must not contain newlines, tabs or commas: {src!r}")
    return user, login, remote


def mount_source(src, user=None):
    """The source as sshfs is given it (and as /proc/self/mountinfo shows it): ``user@host:path``."""
    src_user, host, remote = parse_src(src)
    if user and src_user and user != src_user:
        raise SshfsError(f"user {user!r} differs from the user in src {src!r}")
    login_user = user or src_user
    return f"{login_user}@{host}:{remote}" if login_user else f"{host}:{remote}"


def _option_value(name, value):
    text = str(value)
    if any(c in text for c in ",\n\t"):
        raise SshfsError(f"{name} must not contain commas, newlines or tabs: {text!r}")
    return text


#: sshfs options that build_options sets from its own arguments (refused in extra_opts).
_OWN_OPTIONS = frozenset({"rw", "ro", "direct_io", "auto_cache", "reconnect", "allow_other", "port", "IdentityFile"})


def build_options(
    *,
    read_only=True,
    reconnect=True,
    server_alive_interval=15,
    server_alive_count_max=3,
    allow_other=False,
    identity_file=None,
    known_hosts_file=None,
    port=None,
    direct_io=False,
    auto_cache=False,
    extra_opts=(),
):
    """The ``-o`` options of sshfs, in a stable order (the unit file and ``changed`` depend on it)."""
    opts = []
    if read_only:
        opts.append("ro")
    if reconnect:
        opts.append("reconnect")
    if server_alive_interval:
        if server_alive_interval < 0:
            raise SshfsError("server_alive_interval must be >= 0")
        opts.append(f"ServerAliveInterval={int(server_alive_interval)}")
        opts.append(f"ServerAliveCountMax={int(server_alive_count_max)}")
    if allow_other:
        opts.append("allow_other")
    # Never prompt: a unit has no terminal, a prompt would hang the start.
    opts.append("BatchMode=yes")
    if identity_file:
        opts.append(f"IdentityFile={_option_value('identity_file', identity_file)}")
        opts.append("IdentitiesOnly=yes")
    if known_hosts_file:
        opts.append(f"UserKnownHostsFile={_option_value('known_hosts_file', known_hosts_file)}")
        opts.append("StrictHostKeyChecking=yes")
    if port:
        if not 0 < int(port) < 65536:
            raise SshfsError(f"port must be 1-65535, got {port}")
        opts.append(f"port={int(port)}")
    if direct_io:
        opts.append("direct_io")
    elif auto_cache:
        # Keep the page cache across opens while the file's mtime and size are unchanged: without it every open
        # (each llama-server reload) reads the whole shard over the network again. With direct_io there is no
        # page cache to keep.
        opts.append("auto_cache")
    for item in extra_opts or ():
        extra = _option_value("extra_opts item", item).strip()
        if not extra:
            raise SshfsError("extra_opts items must not be empty")
        if extra.split("=", 1)[0] in _OWN_OPTIONS:
            raise SshfsError(f"use the module's own option instead of extra_opts item {extra!r}")
        if extra not in opts:
            opts.append(extra)
    return opts


def sshfs_argv(sshfs_bin, source, path, options):
    """``sshfs -f -o a,b,c SOURCE PATH`` (foreground: systemd supervises it)."""
    return [sshfs_bin, "-f", "-o", ",".join(options), source, path]


def signal_names(names):
    """Validated signal names without the SIG prefix, upper case, de-duplicated in order."""
    out = []
    for given in names:
        upper = str(given).upper()
        name = upper[3:] if upper.startswith("SIG") else upper
        if not hasattr(signal, f"SIG{name}") or name in {"KILL", "STOP"}:
            raise SshfsError(f"cannot ignore signal {name!r}: use names like HUP, TERM, INT, QUIT")
        if name not in out:
            out.append(name)
    return out


def masked_argv(argv, signals):
    """``argv`` started by ``/bin/sh`` with ``signals`` ignored: ``trap "" SIGS; exec "$@"`` (no quoting of argv).

    The arguments travel as positional parameters, so nothing in them is parsed by the shell.
    """
    if not signals:
        return list(argv)
    script = f'trap "" {" ".join(signals)}; exec "$@"'
    return ["/bin/sh", "-c", script, "sshfs-masked", *argv]


def systemd_quote(arg):
    """One ExecStart= word: ``%`` and ``$`` doubled (specifiers, variables); quoted when it holds blanks,
    quotes, backslashes or ``;``."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if arg and not any(c in arg for c in " \t\"'\\;"):
        return arg
    if "'" not in arg and "\\" not in arg:
        return f"'{arg}'"
    return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_unit(*, path, source, argv, fusermount_bin, mkdir_bin="/bin/mkdir", signals=(), restart_sec=5):
    """The systemd service that keeps sshfs mounted at ``path``; ``argv`` is the (masked) sshfs command line."""
    quoted_path = systemd_quote(path)
    exec_start = " ".join(systemd_quote(a) for a in argv)
    ignored = " ".join(f"SIG{s}" for s in signals) if signals else "none"
    lines = [
        "# Managed by llamarpc.cluster.sshfs_masked_mount: edits are overwritten.",
        "[Unit]",
        f"Description=SSHFS mount of {source} at {path} (llamarpc.cluster)",
        "Documentation=man:sshfs(1)",
        "After=network-online.target",
        "Wants=network-online.target",
        "# Keep restarting however often it fails: the coordinator waits for its shards.",
        "StartLimitIntervalSec=0",
        "",
        "[Service]",
        "Type=simple",
        "# A stale mount left by a killed sshfs would make the new one fail: detach it first.",
        f"ExecStartPre=-{fusermount_bin} -u -z {quoted_path}",
        "# The mount point's parents must stay traversable for the model's readers despite UMask=0077 below.",
        "ExecStartPre="
        + " ".join(systemd_quote(a) for a in ("/bin/sh", "-c", 'umask 022 && exec "$0" -p "$1"', mkdir_bin, path)),
        f"# sshfs runs in the foreground with these signals ignored: {ignored}.",
        f"ExecStart={exec_start}",
        "# sshfs ignores SIGTERM (above), so it is stopped by unmounting, which ends its FUSE session cleanly;",
        "# whatever is left (a busy mount) gets SIGKILL and a lazy unmount.",
        f"ExecStop=-{fusermount_bin} -u {quoted_path}",
        f"ExecStopPost=-{fusermount_bin} -u -z {quoted_path}",
        "KillMode=control-group",
        "KillSignal=SIGKILL",
        "TimeoutStopSec=15s",
        "Restart=always",
        f"RestartSec={int(restart_sec)}s",
        "# No PrivateTmp/ProtectSystem/ProtectKernel*/ProtectControlGroups/...: they give the service its own mount",
        "# namespace and hide the mount. What needs no mount namespace is on (systemd-analyze security: 4.0 OK).",
        "NoNewPrivileges=yes",
        "CapabilityBoundingSet=CAP_SYS_ADMIN",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
        "RestrictNamespaces=yes",
        "RestrictRealtime=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        "MemoryDenyWriteExecute=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
        "KeyringMode=private",
        "DevicePolicy=closed",
        "DeviceAllow=/dev/fuse rw",
        "UMask=0077",
        "SystemCallArchitectures=native",
        "SystemCallFilter=@system-service @mount",
        "SystemCallErrorNumber=EPERM",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def _unescape_mountinfo(field):
    """Octal escapes of /proc/self/mountinfo (``\\040`` for a blank) decoded."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text):
    """Entries of /proc/self/mountinfo as dicts (mount_point, fstype, source, options, super_options, ...)."""
    entries = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if sep < 6 or len(fields) < sep + 3:
            continue
        entries.append(
            {
                "mount_id": int(fields[0]),
                "parent_id": int(fields[1]),
                "device": fields[2],
                "root": _unescape_mountinfo(fields[3]),
                "mount_point": _unescape_mountinfo(fields[4]),
                "options": fields[5].split(","),
                "fstype": fields[sep + 1],
                "source": _unescape_mountinfo(fields[sep + 2]),
                "super_options": fields[sep + 3].split(",") if len(fields) > sep + 3 else [],
            }
        )
    return entries


def find_mount(entries, path):
    """The topmost entry mounted at ``path`` (the last one listed), or None."""
    found = None
    for entry in entries:
        if entry["mount_point"] == path:
            found = entry
    return found


def mounts_at(entries, path):
    """How many entries are stacked at ``path``."""
    return sum(1 for e in entries if e["mount_point"] == path)


def parse_proc_stat(text):
    """State letter of /proc/PID/stat (the field after the parenthesised command, which may hold blanks)."""
    rest = text[text.rindex(")") + 1 :].split()
    return rest[0] if rest else None


def parse_status_mask(status_text, field="SigIgn"):
    """Signal numbers set in a mask line of /proc/PID/status (SigIgn, SigBlk, SigCgt)."""
    for line in status_text.splitlines():
        if line.startswith(f"{field}:"):
            mask = int(line.split(":", 1)[1].strip(), 16)
            return {n + 1 for n in range(64) if mask >> n & 1}
    raise SshfsError(f"no {field} line in status")


def signal_numbers(names):
    return {int(getattr(signal, f"SIG{n}")) for n in signal_names(names)}


def numbers_to_names(numbers):
    """Signal numbers -> names (HUP, ...) for those Python knows, sorted by number."""
    names = []
    for number in sorted(numbers):
        try:
            names.append(signal.Signals(number).name[3:])
        except ValueError:
            names.append(str(number))
    return names


def classify_health(*, mount, source, probe_result, proc_states, unit_active):
    """Health of a mount from what was observed; returns (health, detail).

    - ``mount``: the mountinfo entry at the path or None; ``source`` the expected source.
    - ``probe_result``: ``"ok"``, ``"timeout"`` or an error string from the statvfs of the mount point in a child
      process (None if not tried). A statvfs, because nothing caches it: it reaches sshfs and the server.
    - ``proc_states``: state letters of the sshfs process sampled a few times ([] when there is no process).
    - ``unit_active``: whether the unit's main process runs.

    Health values: ``ok``, ``not_mounted``, ``foreign`` (something else is mounted there), ``hung`` (the probe
    timed out), ``stale`` (the probe failed, e.g. transport endpoint not connected), ``stopped`` (sshfs stopped or
    dead), ``blocked`` (sshfs in D state in every sample), ``unsupervised`` (mounted but not by the unit).
    """
    if mount is None:
        return "not_mounted", "nothing is mounted at the path"
    if mount["fstype"] != "fuse.sshfs" or mount["source"] != source:
        return "foreign", f"{mount['fstype']} {mount['source']} is mounted there, not fuse.sshfs {source}"
    if not unit_active or not proc_states:
        return "unsupervised", "mounted, but the unit's sshfs process is not running"
    if any(s in _STOPPED_STATES for s in proc_states):
        return "stopped", f"the sshfs process is stopped or dead (state {''.join(proc_states)})"
    if all(s == "D" for s in proc_states):
        return "blocked", "the sshfs process stays in uninterruptible sleep (D)"
    if probe_result == "timeout":
        return "hung", "a statvfs of the mount point did not return in time"
    if probe_result not in (None, "ok"):
        return "stale", f"a statvfs of the mount point failed: {probe_result}"
    return "ok", "mounted and answering"
