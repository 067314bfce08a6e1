"""Stand in for the get-pip bootstrap script that ansible-test downloads from a host these machines cannot reach.

ansible-test runs ``python get_pip_X_Y.py <pip install options and packages>`` in each empty sanity venv. This
writes, at the cache path it looks for, a script that does the same with a pip wheel taken from the package
registry by name (``pip download pip==X.Y``): run pip from the wheel and install what was asked for.
"""

import importlib.util
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
WHEELS = ROOT / ".cache" / "wheels"
CACHE = pathlib.Path.home() / ".ansible" / "test" / "cache"


def pip_version():
    """The pip that this Python's ansible-test bootstraps (python_requirements.get_venv_packages: 24.2 in 2.19)."""
    spec = importlib.util.find_spec("ansible_test")
    source = pathlib.Path(spec.origin).parent / "_internal" / "python_requirements.py"
    match = re.search(r"pip='([0-9.]+)'", source.read_text(encoding="utf-8"))
    if not match:
        sys.exit(f"get_pip_stand_in: no pip version found in {source}")
    return match.group(1)


SCRIPT = """\
# Written by llamarpc.cluster tools/get_pip_stand_in.py: runs pip from a wheel, like get-pip.py does.
import sys
sys.path.insert(0, {wheel!r})
from pip._internal.cli.main import main
# get-pip's own switches (it installs setuptools and wheel unless told not to); pip does not know them.
args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
sys.exit(main(["install", "--no-cache-dir"] + args))
"""


def main():
    version = pip_version()
    target = CACHE / f"get_pip_{version.replace('.', '_')}.py"
    wheels = sorted(WHEELS.glob(f"pip-{version}-*.whl"))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(WHEELS), f"pip=={version}"],
            check=True,
        )
        wheels = sorted(WHEELS.glob(f"pip-{version}-*.whl"))
    content = SCRIPT.format(wheel=str(wheels[0]))
    if not target.exists() or target.read_text() != content:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)


if __name__ == "__main__":
    main()
