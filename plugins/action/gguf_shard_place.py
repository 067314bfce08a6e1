# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Controller side of gguf_shard_place: resolve the shards, gather every host's free space, plan, fetch.

Every host of the batch runs this in its own worker process. They meet in a directory under Ansible's
per-run local temp directory (removed when ansible-playbook exits): the first one resolves the source
(one hub query for all), each writes its host's report there, and once all reports are in each computes the
same plan and runs the module on its own host to fetch its shards.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import json
import os
import re
import time
import urllib.parse

from ansible import constants as C
from ansible import context
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.formatters import human_to_bytes
from ansible.module_utils.urls import open_url
from ansible.plugins.action import ActionBase

from ansible_collections.llamarpc.cluster.plugins.module_utils import _cluster_plan as cluster_plan
from ansible_collections.llamarpc.cluster.plugins.module_utils import _gguf_header as gguf_header
from ansible_collections.llamarpc.cluster.plugins.module_utils import _shard_fetch as shard_fetch
from ansible_collections.llamarpc.cluster.plugins.module_utils import _shard_plan as shard_plan
from ansible_collections.llamarpc.cluster.plugins.modules.gguf_shard_place import TASK_OPTIONS

MODULE = "llamarpc.cluster.gguf_shard_place"
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class _NoCallbacks:
    """Stands in for the strategy's result queue in nested task executors (their callbacks are not shown)."""

    def send_callback(self, *args, **kwargs):
        return None


class ActionModule(ActionBase):
    TRANSFERS_FILES = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        if "_request" in self._task.args:
            # One host's part, asked for by a driving task on the coordinator (candidates mode).
            result.update(self._run_host(dict(self._task.args), task_vars))
            result.pop("invocation", None)
            return result
        validation, args = self.validate_argument_spec(argument_spec=TASK_OPTIONS)
        host = task_vars["inventory_hostname"]
        if args.get("candidates"):
            return self._drive(args, task_vars, result)
        batch = list(task_vars.get("ansible_play_batch") or [host])
        meet = os.path.join(C.DEFAULT_LOCAL_TMP, f"gguf_shard_place-{self._task._uuid}")
        os.makedirs(meet, exist_ok=True)
        try:
            request = self._check(args, batch, meeting=True, known=task_vars.get("groups", {}).get("all"))
            shards, source_info = self._shared_source(meet, args)
            report = self._stat(args, shards, request["caches"].get(host), task_vars)
        except AnsibleActionFail as exc:
            self._write(meet, f"host-{host}.json", {"error": str(exc)})
            raise
        except Exception as exc:
            self._write(meet, f"host-{host}.json", {"error": f"{type(exc).__name__}: {exc}"})
            raise
        self._write(meet, f"host-{host}.json", {"report": report})
        reports = self._wait(meet, batch, args["plan_timeout"])
        if not args["fetch"]:
            result.update(self._plan_only(args, host, shards, reports, request, source_info))
            return result
        placement, planned = self._plan(shards, reports, request)
        module_args = self._apply_args(args, host, placement, reports[host], request, source_info)
        applied = self._run_host(module_args, task_vars)
        self._remove_tmp_path(self._connection._shell.tmpdir)
        result.update(applied)
        result.pop("invocation", None)
        result.update(self._summary(args, host, shards, placement, planned, reports, request, source_info))
        if applied.get("diff") and result.get("diff"):  # the host's repairs of corrupt shards, after the placement
            result["diff"] = [result["diff"], applied["diff"]]
        for key in ("fetched", "verified", "refetched", "actions"):
            result.setdefault(key, [])
        return result

    # -- candidates mode: this task, on the coordinator, drives every candidate host -------------------------

    def _drive(self, args, task_vars, result):
        host = task_vars["inventory_hostname"]
        candidates = list(dict.fromkeys(args["candidates"]))
        known = set(task_vars.get("groups", {}).get("all", []))
        unknown = [name for name in candidates if name not in known]
        if unknown:
            raise AnsibleActionFail(f"candidates not in the inventory: {', '.join(unknown)}")
        coordinator = args.get("coordinator") or host
        if coordinator not in candidates:
            candidates.insert(0, coordinator)
        request = self._check(args, candidates, coordinator=coordinator, known=known)
        shards, source_info = self._resolve(args)
        reports = {}
        for name in candidates:
            stat_args = {"model_dir": args["model_dir"], "_request": _stat_request(shards, request["caches"].get(name))}
            reply = self._on(name, stat_args, task_vars)
            if reply.get("failed") or reply.get("unreachable") or "report" not in reply:
                raise AnsibleActionFail(f"{name}: could not inspect the model directory: {reply.get('msg', reply)}")
            reports[name] = reply["report"]
        if not args["fetch"]:
            result.update(self._plan_only(args, coordinator, shards, reports, request, source_info))
            return result
        placement, planned = self._plan(shards, reports, request)
        per_host = {}
        changed = False
        failures = []
        repairs = []  # each host's diff of its corrupt shards
        for name in candidates:
            module_args = self._apply_args(args, name, placement, reports[name], request, source_info)
            reply = self._on(name, module_args, task_vars)
            if reply.get("diff"):
                repairs.append({**reply["diff"], "before_header": f"{name}: {reply['diff']['before_header']}"})
            per_host[name] = {key: reply.get(key, []) for key in ("fetched", "verified", "refetched", "actions")}
            per_host[name]["assigned"] = [shard["name"] for shard in placement if shard["host"] == name]
            changed = changed or bool(reply.get("changed"))
            if reply.get("failed") or reply.get("unreachable"):
                failures.append(f"{name}: {reply.get('msg', 'failed')}")
                break
        mine = per_host.get(coordinator, {})
        result.update({key: mine.get(key, []) for key in ("fetched", "verified", "refetched", "actions")})
        result.update(self._summary(args, coordinator, shards, placement, planned, reports, request, source_info))
        result["per_host"] = per_host
        result["changed"] = changed
        if repairs and result.get("diff"):
            result["diff"] = [result["diff"], *repairs]
        if failures:
            result.update(failed=True, msg="; ".join(failures))
        return result

    def _on(self, name, module_args, task_vars):
        """Run this action for one host's part: on the task's own host directly, on another one delegated."""
        if name == task_vars["inventory_hostname"] and not self._task.delegate_to:
            reply = self._run_host(module_args, task_vars)
            self._remove_tmp_path(self._connection._shell.tmpdir)
            return reply
        from ansible.executor.task_executor import TaskExecutor  # noqa: PLC0415 - only this mode needs it

        hostvars = task_vars["hostvars"]
        variable_manager = hostvars._variable_manager  # noqa: SLF001 - delegation needs the play's variables
        task = self._task.copy(exclude_parent=False, exclude_tasks=True)
        task.args = module_args
        task.delegate_to = name
        task.loop = None
        task.loop_with = None
        task.register = None
        executor = TaskExecutor(
            host=variable_manager._inventory.get_host(task_vars["inventory_hostname"]),  # noqa: SLF001
            task=task,
            job_vars=dict(task_vars),
            play_context=self._play_context,
            loader=self._loader,
            shared_loader_obj=self._shared_loader_obj,
            final_q=_NoCallbacks(),
            variable_manager=variable_manager,
        )
        return executor.run()

    def _plan_only(self, args, host, shards, reports, request, source_info):
        """fetch=false: the plan (or the refusal site.yml would give) and the model read from the shards' headers;
        nothing changes on any host."""
        try:
            model, reads = shard_fetch.read_headers(
                shards,
                headers=source_info.get("headers", {}),
                timeout=args["timeout"],
                validate_certs=args["validate_certs"],
            )
            summary = cluster_plan.summarize(model)
        except (shard_fetch.FetchError, gguf_header.GGUFError, cluster_plan.PlanError, OSError) as exc:
            raise AnsibleActionFail(f"cannot read the model's GGUF headers: {exc}") from None
        out = {"changed": False, "model": summary, "header_reads": reads, "refusal": None, "reports": {}}
        out.update({key: [] for key in ("fetched", "verified", "refetched", "actions")})
        for name, report in reports.items():
            out["reports"][name] = {key: report[key] for key in ("free", "partial_bytes", "complete", "exists")}
            if report.get("tensor_cache"):
                out["reports"][name]["tensor_cache"] = report["tensor_cache"]
        out["shards"] = [{key: shard.get(key) for key in ("name", "size", "sha256", "url")} for shard in shards]
        try:
            placement, planned = self._plan(shards, reports, request)
        except AnsibleActionFail as exc:
            out["refusal"] = str(exc)
            return out
        out.update(self._summary(args, host, shards, placement, planned, reports, request, source_info))
        return out

    # -- one host's part -------------------------------------------------------------------------------------

    def _run_host(self, module_args, task_vars):
        """Copy controller files the host needs, run the module (stat or apply); a second run copies the rest."""
        request = dict(module_args.get("_request") or {})
        if request.get("phase") != "apply":
            return self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)
        given = request.get("shards", [])
        request["shards"] = self._with_sources(given)
        module_args = {**module_args, "_request": request}
        applied = self._execute_module(module_name=MODULE, module_args=module_args, task_vars=task_vars)
        if applied.get("need_source"):
            need = set(applied["need_source"])
            request["shards"] = self._with_sources([shard for shard in given if shard["name"] in need], force=True)
            again = self._execute_module(
                module_name=MODULE, module_args={**module_args, "_request": request}, task_vars=task_vars
            )
            for key in ("fetched", "actions"):
                applied[key] = applied.get(key, []) + again.get(key, [])
            # A corrupt shard is found by both runs (the first one only asks for its source): name it once.
            applied["refetched"] = list(dict.fromkeys(applied.get("refetched", []) + again.get("refetched", [])))
            applied["changed"] = applied.get("changed") or again.get("changed")
            applied.pop("need_source", None)
            if again.get("failed"):
                applied.update(failed=True, msg=again.get("msg"))
        return applied

    # -- planning, shared by both modes ------------------------------------------------------------------------

    @staticmethod
    def _plan(shards, reports, request):
        hosts_input = {}
        for name, rep in reports.items():
            hosts_input[name] = {key: rep[key] for key in ("free", "partial_bytes", "complete")}
            cache = rep.get("tensor_cache")
            if cache and cache["same_filesystem"] and name in request["caches"]:
                hosts_input[name]["tensor_cache"] = {
                    "path": cache["path"],
                    "cap": request["caches"][name]["cap"],
                    "cached": cache["cached"],
                }
        try:
            planned = shard_plan.plan(
                shards, hosts_input, request["coordinator"], request["reserve"], request["model_dir"]
            )
        except shard_plan.PlanError as exc:
            raise AnsibleActionFail(f"nothing was downloaded: {exc}") from None
        return planned["placement"], planned

    def _apply_args(self, args, host, placement, report, request, source_info):
        coordinator = request["coordinator"]
        mine = [shard for shard in placement if shard["host"] == host]
        elsewhere = [shard["name"] for shard in placement if shard["host"] != host]
        links = {}
        if host == coordinator and args["link"]:
            for shard in placement:
                if shard["host"] != host:
                    links[shard["name"]] = os.path.join(request["mounts"][shard["host"]], shard["name"])
        shards = []
        for shard in mine:
            entry = {key: shard[key] for key in ("name", "size", "sha256", "etag", "url") if key in shard}
            if "src_controller" in shard:
                entry["src_controller"] = shard["src_controller"]
                entry["present"] = report["complete"].get(shard["name"]) == shard["size"]
            shards.append(entry)
        return {
            "model_dir": args["model_dir"],
            "verify": args["verify"],
            "timeout": args["timeout"],
            "retries": args["retries"],
            "validate_certs": args["validate_certs"],
            "_request": {
                "phase": "apply",
                "links": links,
                "drop": [name for name in elsewhere if "partial" in report["files"].get(name, {})],
                "shards": shards,
            },
            "_headers": source_info.get("headers", {}),
        }

    def _summary(self, args, host, shards, placement, planned, reports, request, source_info):
        coordinator = request["coordinator"]
        elsewhere = {shard["name"] for shard in placement if shard["host"] != host}
        links = {}
        if host == coordinator and args["link"]:
            links = {
                shard["name"]: os.path.join(request["mounts"][shard["host"]], shard["name"])
                for shard in placement
                if shard["host"] != host
            }
        summary = {
            "plan": [
                {
                    **{key: shard[key] for key in ("name", "size", "sha256", "host")},
                    "path": os.path.join(args["model_dir"], shard["name"]),
                }
                for shard in placement
            ],
            "hosts": planned["hosts"],
            "assigned": [shard["name"] for shard in placement if shard["host"] == host],
            "links": links,
            "redundant": sorted(name for name in reports[host]["complete"] if name in elsewhere),
            "model_path": os.path.join(args["model_dir"], placement[0]["name"]),
        }
        if "revision" in source_info:
            summary["revision"] = source_info["revision"]
        if self._task.diff:
            summary["diff"] = {
                "before_header": "shard placement (now)",
                "after_header": "shard placement (plan)",
                "before": _describe_now(shards, reports, coordinator),
                "after": "".join(f"{shard['name']}: {shard['host']}\n" for shard in placement),
            }
        return summary

    # -- validation ---------------------------------------------------------------------------------------

    def _check(self, args, batch, coordinator=None, meeting=False, known=None):
        if not os.path.isabs(args["model_dir"]):
            raise AnsibleActionFail(f"model_dir must be an absolute path, got {args['model_dir']!r}")
        sources = [key for key in ("hf_repo", "urls", "files") if args.get(key)]
        if len(sources) != 1:
            raise AnsibleActionFail(f"give exactly one source of hf_repo, urls and files (got {sources or 'none'})")
        if args.get("hf_repo") and not args.get("hf_pattern"):
            raise AnsibleActionFail("hf_pattern is required with hf_repo (for example '*q4_k_m*.gguf')")
        coordinator = coordinator or args.get("coordinator") or batch[0]
        if coordinator not in batch:
            raise AnsibleActionFail(
                f"unknown coordinator {coordinator!r}: it must be one of the hosts running this task "
                f"({', '.join(batch)})"
            )
        forks = (context.CLIARGS or {}).get("forks") or C.DEFAULT_FORKS
        if meeting and len(batch) > int(forks):
            raise AnsibleActionFail(
                f"{len(batch)} hosts plan together but forks is {forks}: raise forks to at least {len(batch)}"
            )
        mounts = {}
        for name, path in (args.get("mount_paths") or {}).items():
            if name not in batch:
                raise AnsibleActionFail(f"mount_paths names unknown host {name!r} (hosts: {', '.join(batch)})")
            if not isinstance(path, str) or not os.path.isabs(path):
                raise AnsibleActionFail(f"mount_paths[{name}] must be an absolute path, got {path!r}")
        if not os.path.isabs(args["mount_root"]):
            raise AnsibleActionFail(f"mount_root must be an absolute path, got {args['mount_root']!r}")
        for name in batch:
            mounts[name] = (args.get("mount_paths") or {}).get(name) or os.path.join(args["mount_root"], name)
        try:
            reserve = human_to_bytes(args["reserve"]) if str(args["reserve"]).strip() else 0
        except ValueError as exc:
            raise AnsibleActionFail(f"reserve: {exc}") from None
        caches = tensor_caches(args.get("tensor_caches") or {}, batch, known)
        return {
            "coordinator": coordinator,
            "mounts": mounts,
            "reserve": reserve,
            "caches": caches,
            "model_dir": args["model_dir"],
        }

    # -- the source, resolved once for all hosts ---------------------------------------------------------

    def _shared_source(self, meet, args):
        path = os.path.join(meet, "source.json")
        with open(os.path.join(meet, "source.lock"), "w", encoding="utf-8") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not os.path.exists(path):
                try:
                    data = {"ok": self._resolve(args)}
                except AnsibleActionFail as exc:
                    data = {"error": str(exc)}
                self._write(meet, "source.json", data)
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        if "error" in data:
            raise AnsibleActionFail(data["error"])
        shards, info = data["ok"]
        return shards, info

    def _resolve(self, args):
        if args.get("hf_repo"):
            return resolve_hf(args)
        if args.get("urls"):
            return resolve_urls(args["urls"], args["timeout"], args["validate_certs"]), {}
        files = []
        for entry in args["files"]:
            try:
                found = self._find_needle("files", entry)
            except Exception as exc:  # noqa: BLE001 - Ansible raises several kinds for a missing file
                raise AnsibleActionFail(f"controller file {entry!r} not found: {exc}") from None
            files.append(found)
        return resolve_files(files, digest=args["fetch"]), {}

    def _stat(self, args, shards, cache, task_vars):
        reply = self._execute_module(
            module_name=MODULE,
            module_args={"model_dir": args["model_dir"], "_request": _stat_request(shards, cache)},
            task_vars=task_vars,
        )
        if reply.get("failed") or reply.get("unreachable") or "report" not in reply:
            raise AnsibleActionFail(f"could not inspect the model directory: {reply.get('msg', reply)}")
        return reply["report"]

    def _with_sources(self, shards, force=False):
        """Copy controller files to the host (remote tmp) unless the host holds them at the right size already."""
        out = []
        for given in shards:
            shard = dict(given)
            src = shard.pop("src_controller", None)
            present = shard.pop("present", False)
            if src is not None and (force or not present):
                if self._connection._shell.tmpdir is None:
                    self._make_tmp_path()
                remote = self._connection._shell.join_path(self._connection._shell.tmpdir, shard["name"])
                self._transfer_file(src, remote)
                self._fixup_perms2((self._connection._shell.tmpdir, remote))
                shard["src"] = remote
            out.append(shard)
        return out

    # -- meeting the other hosts --------------------------------------------------------------------------

    @staticmethod
    def _write(meet, name, data):
        tmp = os.path.join(meet, f".{name}.{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        os.replace(tmp, os.path.join(meet, name))

    @staticmethod
    def _wait(meet, batch, timeout):
        deadline = time.monotonic() + timeout
        reports = {}
        while True:
            errors = []
            for name in batch:
                if name in reports:
                    continue
                try:
                    with open(os.path.join(meet, f"host-{name}.json"), encoding="utf-8") as handle:
                        data = json.load(handle)
                except (OSError, ValueError):
                    continue
                if "error" in data:
                    errors.append(f"{name}: {data['error']}")
                else:
                    reports[name] = data["report"]
            if errors:
                raise AnsibleActionFail("planning needs every host; " + "; ".join(errors))
            if len(reports) == len(batch):
                return reports
            if time.monotonic() > deadline:
                missing = sorted(set(batch) - set(reports))
                raise AnsibleActionFail(
                    f"no report from {', '.join(missing)} within {timeout} s (all hosts must run the task together: "
                    "linear strategy, forks >= hosts)"
                )
            time.sleep(0.2)


def _stat_request(shards, cache):
    """The module's stat request: the shard names, and this host's tensor cache directory if it has one."""
    request = {"phase": "stat", "names": [shard["name"] for shard in shards]}
    if cache:
        request["tensor_cache"] = cache["path"]
    return request


def tensor_caches(given, hosts, known=None):
    """``{host: {"path", "cap" (bytes)}}`` of the O(tensor_caches) entries for ``hosts`` (others, and empty entries,
    are ignored).

    Raises AnsibleActionFail for a host not in the inventory (``known``, when given) or a bad path or size.
    """
    if not isinstance(given, dict):
        raise AnsibleActionFail(f"tensor_caches must be a dict of host: {{path, max_size}}, got {given!r}")
    caches = {}
    for name, entry in given.items():
        if entry == {}:
            continue  # a host whose worker keeps no cache
        if known is not None and name not in known:
            raise AnsibleActionFail(f"tensor_caches names {name!r}, which is not in the inventory")
        if not isinstance(entry, dict) or set(entry) != {"path", "max_size"}:
            raise AnsibleActionFail(f"tensor_caches[{name}] must be a dict with path and max_size, got {entry!r}")
        path = entry["path"]
        if not isinstance(path, str) or not os.path.isabs(path):
            raise AnsibleActionFail(f"tensor_caches[{name}].path must be an absolute path, got {path!r}")
        try:
            cap = human_to_bytes(str(entry["max_size"]).strip())
        except ValueError as exc:
            raise AnsibleActionFail(f"tensor_caches[{name}].max_size: {exc}") from None
        if cap < 0:
            raise AnsibleActionFail(f"tensor_caches[{name}].max_size must not be negative, got {entry['max_size']!r}")
        if name in hosts:
            caches[name] = {"path": os.path.normpath(path), "cap": cap}
    return caches


def _describe_now(shards, reports, coordinator):
    lines = []
    for shard in shards:
        where = [name for name in sorted(reports) if reports[name]["complete"].get(shard["name"]) is not None]
        state = reports.get(coordinator, {}).get("files", {}).get(shard["name"], {})
        if state.get("state") == "link":
            where.append(f"link on {coordinator} -> {state['target']}")
        lines.append(f"{shard['name']}: {', '.join(where) if where else 'absent'}\n")
    return "".join(lines)


def resolve_hf(args):
    """Shards, URLs, sizes and sha256 of an HF repo matching the pattern; pinned to the resolved commit."""
    try:
        from huggingface_hub import HfApi, get_hf_file_metadata, get_token, hf_hub_url  # noqa: PLC0415
        from huggingface_hub.errors import HfHubHTTPError  # noqa: PLC0415
        from huggingface_hub.hf_api import RepoFile  # noqa: PLC0415
    except ImportError:
        raise AnsibleActionFail(
            "hf_repo needs the huggingface_hub Python package on the controller (pip install huggingface_hub)"
        ) from None
    endpoint = (args.get("hf_endpoint") or os.environ.get("HF_ENDPOINT") or "").rstrip("/") or None
    token = args.get("hf_token") or get_token()
    repo, revision, pattern = args["hf_repo"], args["hf_revision"], args["hf_pattern"]
    api = HfApi(endpoint=endpoint, token=token)
    try:
        entries = list(api.list_repo_tree(repo, revision=revision, recursive=True))
    except HfHubHTTPError as exc:
        raise AnsibleActionFail(f"cannot list {repo}@{revision}: {_first_line(exc)}") from None
    except OSError as exc:
        raise AnsibleActionFail(f"cannot reach the hub for {repo}@{revision}: {exc}") from None
    matched = sorted(
        (
            entry
            for entry in entries
            if isinstance(entry, RepoFile) and fnmatch.fnmatchcase(entry.path.lower(), pattern.lower())
        ),
        key=lambda entry: entry.path,
    )
    if not matched:
        raise AnsibleActionFail(f"pattern {pattern!r} matches no file in {repo}@{revision}")
    shards = []
    commit = None
    for entry in matched:
        if entry.lfs is None or not getattr(entry.lfs, "sha256", None):
            raise AnsibleActionFail(f"{entry.path} in {repo} has no sha256 in the hub's metadata (not an LFS file)")
        url = hf_hub_url(repo, entry.path, revision=commit or revision, endpoint=endpoint)
        try:
            meta = get_hf_file_metadata(url, token=token)
        except HfHubHTTPError as exc:
            raise AnsibleActionFail(f"cannot resolve {entry.path}: {_first_line(exc)}") from None
        if commit is None and meta.commit_hash:
            commit = meta.commit_hash
            url = hf_hub_url(repo, entry.path, revision=commit, endpoint=endpoint)
        if meta.size is not None and int(meta.size) != int(entry.size):
            raise AnsibleActionFail(f"{entry.path}: the hub reports {meta.size} and {entry.size} bytes")
        shards.append(
            {
                "name": os.path.basename(entry.path),
                "size": int(entry.size),
                "sha256": entry.lfs.sha256.lower(),
                "etag": meta.etag,
                "url": url,
            }
        )
    _check_names(shards)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return shards, {"headers": headers, "revision": commit or revision}


def _first_line(exc):
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def resolve_urls(entries, timeout, validate_certs=True):
    shards = []
    for entry in entries:
        url = entry["url"]
        parsed = urllib.parse.urlparse(url)
        if parsed.scheme not in {"http", "https"}:
            raise AnsibleActionFail(f"only http(s) URLs are supported, got {url!r}")
        sha = str(entry["sha256"]).lower()
        if not SHA256_RE.match(sha):
            raise AnsibleActionFail(f"sha256 of {url} must be 64 hex digits, got {entry['sha256']!r}")
        name = entry.get("name") or os.path.basename(urllib.parse.unquote(parsed.path))
        size = entry.get("size")
        etag = None
        if size is None:
            try:
                with open_url(url, method="HEAD", timeout=timeout, validate_certs=validate_certs) as response:
                    size = int(response.headers["Content-Length"])
                    etag = response.headers.get("ETag")
            except (OSError, TypeError, ValueError) as exc:
                raise AnsibleActionFail(f"cannot get the size of {url} (give size): {exc}") from None
        shards.append({"name": name, "size": int(size), "sha256": sha, "etag": etag, "url": url})
    _check_names(shards)
    return shards


def resolve_files(paths, digest=True):
    """Controller files as shards; ``digest=False`` (a plan only) leaves their sha256 out instead of reading them."""
    shards = []
    for path in paths:
        sha256 = None
        if digest:
            hasher = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda handle=handle: handle.read(1 << 20), b""):
                    hasher.update(block)
            sha256 = hasher.hexdigest()
        shards.append(
            {
                "name": os.path.basename(path),
                "size": os.path.getsize(path),
                "sha256": sha256,
                "etag": None,
                "src_controller": path,
            }
        )
    _check_names(shards)
    return shards


def _check_names(shards):
    for shard in shards:
        name = shard["name"]
        if not name or name.startswith(".") or "/" in name:
            raise AnsibleActionFail(f"not a usable shard file name: {name!r}")
    shards.sort(key=lambda shard: shard["name"])
    try:
        shard_plan.check_split_names([shard["name"] for shard in shards])
    except shard_plan.PlanError as exc:
        raise AnsibleActionFail(str(exc)) from None
