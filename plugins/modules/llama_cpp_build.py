#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llamarpc.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: llama_cpp_build
short_description: Build llama.cpp once from a source archive and cache the binaries
version_added: 0.1.0
description:
  - Builds llama.cpp (by default the RPC server, C(llama-server) and C(llama-gguf-split)) from a local source archive
    with CMake and caches the executables and the C(lib*.so) they load under O(cache_dir), one entry per cache key. A
    later run with the same key changes nothing.
  - The key covers the archive's sha256, O(subdir), O(cmake_flags), O(targets), the machine architecture, the
    compilers' versions, the O(helpers) (name and source sha256 of each) and the O(patches) (name and sha256 of each,
    in order). An entry is C(<cache_dir>/<key>/bin/)
    (RUNPATH C($ORIGIN), so it can be copied anywhere) and C(manifest.json).
  - Runs on the build host, usually the controller (C(delegate_to), C(run_once)); an interrupted build never leaves an
    entry that looks complete, and concurrent runs for one key wait on a lock.
  - O(src) may be an upstream source release or the C(llama-cpp-python) sdist (it vendors the tree and builds
    offline); C(ggml-rpc-server) or C(rpc-server) in O(targets) builds whichever the tree defines.
author:
  - llamarpc.cluster contributors (@llamarpc)
requirements:
  - cmake (3.15 or later), a C and C++ compiler (gcc/g++ or clang), on the build host
  - ninja is used when present, make otherwise
  - readelf (binutils) and ldd to check the cached binaries' libraries
  - GNU patch, with O(patches)
options:
  src:
    description:
      - Path on the build host of the llama.cpp source archive (C(.tar.gz), C(.tgz), C(.tar.xz),
        C(.tar.bz2), C(.tar) or C(.zip)).
    type: path
    required: true
  checksum:
    description:
      - Expected sha256 of O(src) (hex, optionally prefixed C(sha256:)). Verified before anything else,
        also in check mode; a mismatch fails the task.
    type: str
  subdir:
    description:
      - Path inside the archive of the llama.cpp tree.
      - By default the shallowest directory holding C(CMakeLists.txt) and C(ggml/) is used, for example
        C(llama-cpp-python-0.3.36/vendor/llama.cpp) in the sdist or the top directory of an upstream release.
    type: str
  cmake_flags:
    description:
      - Arguments passed to the CMake configure step, in this order.
      - "The default is C(-DGGML_RPC=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF
        -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
        -DCMAKE_INSTALL_RPATH=$ORIGIN) and, on x86_64, aarch64, ppc64le, s390x and riscv64,
        C(-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON)."
      - C(GGML_NATIVE=OFF) because the binaries run on other nodes, whose CPU may lack instructions the
        build host has (C(-march=native) would crash them with an illegal instruction).
        C(GGML_CPU_ALL_VARIANTS) builds one CPU backend per instruction-set level and picks the best
        at run time, so no node runs a lowest-common-denominator build (this is how upstream builds its
        Linux releases). The RPATH flags let the binaries find their libraries beside them.
      - When you set this option you replace the whole list.
    type: list
    elements: str
  cpu:
    description:
      - Which CPUs the default O(cmake_flags) build for. V(portable) runs on any CPU of the architecture
        (one CPU backend per instruction-set level, the best picked at run time). V(native) is tuned to the build
        host's CPU (C(-DGGML_NATIVE=ON), one backend) and builds in about half the time; use it only when every
        node has the build host's CPU, such as the local lab.
      - Ignored when O(cmake_flags) is set.
    type: str
    choices: [portable, native]
    default: portable
  targets:
    description:
      - CMake targets to build and cache (executables). C(ggml-rpc-server) and C(rpc-server) both mean
        the tree's RPC server, whatever it is called there.
    type: list
    elements: str
    default: [ggml-rpc-server, llama-server, llama-gguf-split]
  helpers:
    description:
      - C++ programs of one source file each (paths on the build host), compiled with the C++ compiler of the build
        and C(-O2 -Wall) after the CMake configure step, and shipped in RV(bin_dir) beside the llama.cpp binaries.
        A program is named after its file, without the suffix and with C(_) as C(-) - C(llamarpc_fnv1a.cpp) builds
        C(llamarpc-fnv1a).
      - The name and the sha256 of each source are part of the cache key, so a changed source is a new entry.
        Without helpers the key is the one of a build before this option existed.
      - A helper that does not compile fails the build, with the end of the build log.
    type: list
    elements: path
    default: []
  patches:
    description:
      - Unified diffs (paths on the build host, named C(*.patch) or C(*.diff)) applied in this order to the llama.cpp
        tree before CMake configures it, each with GNU patch (C(-p1), the C(a/) and C(b/) of C(git diff)) and no fuzz,
        after a dry run has shown that it applies.
      - A patch that does not apply (a source it was not written for) is left out, the build goes on without it and
        the task warns once; RV(patches) and the entry's C(manifest.json) say which were applied and why one was not.
      - The name and the sha256 of each, in order, are part of the cache key. Without patches the key is the one of a
        build before this option existed.
    type: list
    elements: path
    default: []
  jobs:
    description: Parallel build jobs. Defaults to the number of CPUs the module may use.
    type: int
  priority:
    description:
      - The CPU and I/O priority of the build's steps (CMake's configure and build, the compilers they start, the
        helpers' compiles).
      - C(idle) runs them in a session of their own whose autogroup has the lowest weight (nice 19 in
        C(/proc/self/autogroup)), in the CPU's idle scheduling class (C(SCHED_IDLE)) and the idle I/O class, through
        util-linux's C(chrt --idle 0) and C(ionice -c 3) - on a build host that also serves, the build takes only the
        time the services leave, and runs at full speed while they are idle. The kernel shares the CPU between
        sessions' autogroups before classes count (a systemd service is a session of its own), hence the autogroup;
        where systemd has enabled the CPU controller (a unit sets C(CPUWeight=) or C(CPUQuota=)) cgroups share it
        first, and the build's priority counts only within its own. The I/O class counts only under an I/O scheduler
        that knows classes (BFQ).
      - C(normal) runs them at the module's own priority.
      - Not part of the cache key (the same binaries either way).
    type: str
    choices: [normal, idle]
    default: normal
  cache_dir:
    description: Directory holding the cache entries.
    type: path
    default: /var/cache/llamarpc/llama-cpp
  log_file:
    description:
      - File receiving the extraction, configure and build output (truncated when a build starts,
        untouched when the cache is used). Tail it to watch a build run with C(async).
      - Without it the output goes to a temporary file that is removed; its tail is in any failure message.
    type: path
  force:
    description: Build even when a valid cache entry exists, then replace it.
    type: bool
    default: false
extends_documentation_fragment: [llamarpc.cluster.attributes, llamarpc.cluster.attributes.check_no_diff]
attributes:
  check_mode:
    details: Reports whether a build would happen (C(changed=true) when the cache entry is missing or invalid).
notes:
  - The checksum of O(src) is computed on every run (about a second for the 75 MB sdist), the archive is opened only
    when a build happens.
  - A build of the three default targets takes about 10 to 30 minutes on two cores; run the task with C(async) and
    poll, and watch O(log_file).
  - The cached binaries need C(libgomp1), C(libstdc++6) and C(libgcc-s1) on the host that runs them;
    RV(manifest.external_libraries) lists what they load from the system.
  - The cache key and the entry's layout in detail - C(docs/modules.md).
seealso:
  - name: llama.cpp build documentation
    description: CMake options of llama.cpp.
    link: https://github.com/ggml-org/llama.cpp/blob/master/docs/build.md
"""

EXAMPLES = r"""
- name: Build llama.cpp from the llama-cpp-python sdist (once)
  llamarpc.cluster.llama_cpp_build:
    src: /var/cache/llamarpc/sources/llama_cpp_python-0.3.36.tar.gz
    checksum: 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
    log_file: /var/log/llamarpc/llama-build.log
  delegate_to: localhost
  run_once: true
  async: 3600
  poll: 15
  register: llama_build

- name: Show where the binaries are
  ansible.builtin.debug:
    msg: "{{ llama_build.rpc_server_path }} speaks RPC protocol {{ llama_build.rpc_protocol.version }}"

- name: Build an upstream release with CUDA for one GPU node type, only the RPC server
  llamarpc.cluster.llama_cpp_build:
    src: /srv/src/llama.cpp-b6500.tar.gz
    targets: [ggml-rpc-server]
    cmake_flags:
      - -DGGML_RPC=ON
      - -DGGML_CUDA=ON
      - -DLLAMA_CURL=OFF
      - -DLLAMA_OPENSSL=OFF
      - -DCMAKE_BUILD_TYPE=Release
      - -DGGML_NATIVE=OFF
      - -DBUILD_SHARED_LIBS=ON
      - -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON
      - -DCMAKE_INSTALL_RPATH=$ORIGIN
  delegate_to: localhost
  run_once: true

- name: Build llama.cpp and ship a small C++ tool of one's own in the same bin directory
  llamarpc.cluster.llama_cpp_build:
    src: /var/cache/llamarpc/sources/llama_cpp_python-0.3.36.tar.gz
    checksum: 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
    helpers: [/var/cache/llamarpc/helpers/llamarpc_fnv1a.cpp]  # bin/llamarpc-fnv1a
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
key:
  description: Cache key (sha256 hex) of the requested build.
  returned: always
  type: str
  sample: 3f1c0d0c2b6f9f8a4e1f3b0a6c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d
cache_state:
  description: What was found in the cache before this run.
  returned: always
  type: str
  choices: [hit, missing, invalid, forced]
  sample: hit
cache_reason:
  description: Why an existing entry was not used (empty for C(hit) and C(missing)).
  returned: always
  type: str
  sample: "bin/llama-server: missing"
entry_dir:
  description: The cache entry directory (holds C(bin/) and C(manifest.json)).
  returned: always
  type: str
  sample: /var/cache/llamarpc/llama-cpp/3f1c0d0c2b6f9f8a4e1f3b0a6c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d
bin_dir:
  description: Directory holding the executables and their libraries (copy it whole to a node).
  returned: always
  type: str
  sample: /var/cache/llamarpc/llama-cpp/3f1c0d0c2b6f9f8a4e1f3b0a6c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d/bin
source_sha256:
  description: sha256 of O(src).
  returned: always
  type: str
  sample: 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
archive:
  description:
    - C(<entry_dir>/bin.tar.gz), the contents of RV(bin_dir) in one archive to ship to the nodes (for example
      with M(ansible.builtin.unarchive)); created once per entry.
  returned: when the entry exists
  type: str
  sample: /var/cache/llamarpc/llama-cpp/3f1c0d0c2b6f9f8a4e1f3b0a6c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d/bin.tar.gz
cmake_flags:
  description: The configure flags of the key (the default list when O(cmake_flags) is not set).
  returned: always
  type: list
  elements: str
  sample: [-DGGML_RPC=ON, -DCMAKE_BUILD_TYPE=Release]
build_seconds:
  description: Seconds this run spent building (0 when the cache was used or in check mode).
  returned: always
  type: float
  sample: 812.4
priority:
  description: The priority the build's steps ran at (O(priority)).
  returned: when this run built
  type: str
  sample: idle
log_file:
  description: The build log, when O(log_file) was given.
  returned: when O(log_file) is set
  type: str
  sample: /tmp/llama-build.log
patches:
  description: Each of O(patches) with C(name), C(sha256), C(applied) and C(reason) (why it was not, or empty).
  returned: when the entry exists
  type: list
  elements: dict
  sample: [{name: rpc-tensor-hashes.patch, sha256: 5d41402abc4b2a76b9719d911017c592ae1f4d3a9c5e6b7a8f9e0d1c2b3a4f5e,
            applied: true, reason: ""}]
rpc_server:
  description: File name of the RPC server in RV(bin_dir) (C(ggml-rpc-server) or C(rpc-server)).
  returned: when the entry exists and the RPC server is among its targets
  type: str
  sample: ggml-rpc-server
rpc_server_path:
  description: Full path of the cached RPC server.
  returned: when the entry exists and the RPC server is among its targets
  type: str
  sample: /var/cache/llamarpc/llama-cpp/3f1c0d0c2b6f9f8a4e1f3b0a6c1d2e3f4a5b6c7d/bin/ggml-rpc-server
rpc_protocol:
  description:
    - RPC protocol version of the tree (from C(ggml/include/ggml-rpc.h)).
    - Null for trees older than the versioned RPC protocol.
  returned: when the entry exists
  type: dict
  sample: {major: 7, minor: 0, patch: 0, version: 7.0.0}
manifest:
  description: Content of C(manifest.json) of the entry (the entry exists after the run).
  returned: when the entry exists (not in check mode on a cache miss)
  type: dict
  contains:
    format:
      description: Layout version of the entry.
      type: int
    key:
      description: Cache key.
      type: str
    source:
      description: C(path) and C(sha256) of the archive, C(subdir) used, C(subdir_requested).
      type: dict
    cmake_flags:
      description: Flags of the key.
      type: list
      elements: str
    configure_args:
      description: Flags really passed to CMake (the key's plus derived ones such as the commit).
      type: list
      elements: str
    targets:
      description: Targets as requested.
      type: list
      elements: str
    built_targets:
      description: Targets as built (RPC server name resolved).
      type: list
      elements: str
    helpers:
      description: The O(helpers) built, each with C(name) (its file in C(bin/)), C(source) and C(sha256).
      type: list
      elements: dict
    patches:
      description: The O(patches), as RV(patches).
      type: list
      elements: dict
    arch:
      description: Machine architecture of the build host.
      type: str
    compiler:
      description: C(c) and C(cxx) compiler version lines.
      type: dict
    cmake_version:
      description: CMake version line.
      type: str
    generator:
      description: CMake generator used.
      type: str
    llama_cpp:
      description: C(commit), C(commit_source) and C(build_number) when discoverable (null otherwise).
      type: dict
    rpc_protocol:
      description: RPC protocol version, as RV(rpc_protocol).
      type: dict
    rpc_server:
      description: RPC server file name, as RV(rpc_server).
      type: str
    files:
      description: Every file of the entry with C(path), C(size), C(sha256) and C(mode) (symlinks with C(link)).
      type: list
      elements: dict
    runpath:
      description: DT_RUNPATH (or DT_RPATH) of each ELF file, C($ORIGIN) with the default flags.
      type: dict
    needed:
      description: DT_NEEDED libraries of each ELF file.
      type: dict
    external_libraries:
      description: Libraries the entry loads from the host system (everything not shipped in bin/).
      type: list
      elements: str
    smoke_test:
      description: Usage line the RPC server printed for C(--help), run from the staged entry (proof that it starts).
      type: str
    build_seconds:
      description: Seconds the build took.
      type: float
    jobs:
      description: Parallel build jobs used.
      type: int
    built_at:
      description: UTC time the entry was written (ISO 8601).
      type: str
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_build import DEFAULT_TARGETS, BuildError
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_build_run import run_module
from ansible_collections.llamarpc.cluster.plugins.module_utils.llama_cpp._llama_build_stage import StepFailed


def main():
    module = AnsibleModule(
        argument_spec={
            "src": {"type": "path", "required": True},
            "checksum": {"type": "str"},
            "cpu": {"type": "str", "choices": ["portable", "native"], "default": "portable"},
            "subdir": {"type": "str"},
            "cmake_flags": {"type": "list", "elements": "str"},
            "targets": {"type": "list", "elements": "str", "default": list(DEFAULT_TARGETS)},
            "helpers": {"type": "list", "elements": "path", "default": []},
            "patches": {"type": "list", "elements": "path", "default": []},
            "jobs": {"type": "int"},
            "priority": {"type": "str", "choices": ["normal", "idle"], "default": "normal"},
            "cache_dir": {"type": "path", "default": "/var/cache/llamarpc/llama-cpp"},
            "log_file": {"type": "path"},
            "force": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    try:
        result = run_module(module)
    except StepFailed as exc:
        details = {"log_tail": exc.tail}
        if module.params["log_file"]:
            details["log_file"] = module.params["log_file"]
        module.fail_json(msg=f"{exc}\n--- end of the build log ---\n{exc.tail}", **details)
    except BuildError as exc:
        module.fail_json(msg=str(exc))
    except OSError as exc:
        module.fail_json(msg=f"llama.cpp build failed: {exc}")
    module.exit_json(**result)


if __name__ == "__main__":
    main()
