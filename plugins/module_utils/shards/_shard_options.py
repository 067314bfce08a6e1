# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The option specs of the three shard placement modules, in one place: gguf_shard_facts (each host reports its
model directory), gguf_shard_plan (the controller plans) and gguf_shard_place (each host fetches, verifies, links).
Their DOCUMENTATION says the same; ansible-test sanity checks that they agree."""

from __future__ import annotations

FACTS = {
    "model_dir": {"type": "path", "required": True},
    "tensor_cache": {"type": "path"},
}

PLAN = {
    "model_dir": {"type": "path", "required": True},
    "coordinator": {"type": "str"},
    "candidates": {"type": "list", "elements": "str", "default": []},
    "hf_repo": {"type": "str"},
    "hf_revision": {"type": "str", "default": "main"},
    "hf_pattern": {"type": "str"},
    "hf_token": {"type": "str", "no_log": True},
    "hf_endpoint": {"type": "str"},
    "urls": {
        "type": "list",
        "elements": "dict",
        "options": {
            "url": {"type": "str", "required": True},
            "sha256": {"type": "str", "required": True},
            "size": {"type": "int"},
            "name": {"type": "str"},
        },
    },
    "files": {"type": "list", "elements": "path"},
    "reserve": {"type": "str", "default": "1G"},
    "tensor_caches": {"type": "dict", "default": {}},
    "mount_root": {"type": "path", "default": "/mnt/llamarpc"},
    "mount_paths": {"type": "dict", "default": {}},
    "link": {"type": "bool", "default": True},
    "timeout": {"type": "int", "default": 60},
    "validate_certs": {"type": "bool", "default": True},
    "fetch": {"type": "bool", "default": True},
    "keep_previous": {"type": "int", "default": 1},
    "replace": {"type": "str", "choices": ["staged", "in_place"], "default": "staged"},
}

PLACE = {
    "model_dir": {"type": "path", "required": True},
    "shards": {
        "type": "list",
        "elements": "dict",
        "default": [],
        "options": {
            "name": {"type": "str", "required": True},
            "size": {"type": "int", "required": True},
            "sha256": {"type": "str", "required": True},
            "etag": {"type": "str"},
            "url": {"type": "str"},
            "src": {"type": "path"},
            "hub": {"type": "bool", "default": False},
        },
    },
    "links": {"type": "dict", "default": {}},
    "drop": {"type": "list", "elements": "str", "default": []},
    "hf_token": {"type": "str", "no_log": True},
    "verify": {"type": "str", "choices": ["quick", "full"], "default": "quick"},
    "metrics_file": {"type": "path"},
    "timeout": {"type": "int", "default": 60},
    "retries": {"type": "int", "default": 5},
    "validate_certs": {"type": "bool", "default": True},
    "model": {"type": "str"},
    "keep_models": {"type": "list", "elements": "str", "default": []},
}

SERVED = {
    "model_dir": {"type": "path", "required": True},
    "model": {"type": "str", "required": True},
    "source": {"type": "dict", "default": {}},
    "keep_previous": {"type": "int", "default": 1},
}
