"""ansible-playbook as the integration tests run it: this virtualenv's, from the checkout's top, with the checkout as
the collection (ansible.cfg, .collections) and no colours, so that its output can be matched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def ansible_playbook(*args, env=None, timeout=300):
    """The finished run (returncode, stdout, stderr) of ``ansible-playbook ARGS``; ``env`` adds to the environment."""
    return subprocess.run(
        [str(PLAYBOOK), *(str(arg) for arg in args)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={
            **os.environ,
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".collections"),
            "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0",
            **(env or {}),
        },
    )
