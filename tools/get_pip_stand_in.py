"""Stand in for the get-pip bootstrap script that ansible-test downloads from a host these machines cannot reach.

ansible-test runs ``python get_pip_X_Y.py <pip install options and packages>`` in each empty sanity venv. This
writes, at the cache path it looks for, a script that does the same with a pip wheel taken from the package
registry by name (``pip download pip==X.Y``): run pip from the wheel and install what was asked for.
"""

import pathlib
import subprocess
import sys

PIP_VERSION = "24.2"  # what ansible-test 2.19 bootstraps (python_requirements.get_venv_packages)
ROOT = pathlib.Path(__file__).resolve().parent.parent
WHEELS = ROOT / ".cache" / "wheels"
TARGET = pathlib.Path.home() / ".ansible" / "test" / "cache" / f"get_pip_{PIP_VERSION.replace('.', '_')}.py"

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
    wheels = sorted(WHEELS.glob(f"pip-{PIP_VERSION}-*.whl"))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(WHEELS), f"pip=={PIP_VERSION}"],
            check=True,
        )
        wheels = sorted(WHEELS.glob(f"pip-{PIP_VERSION}-*.whl"))
    content = SCRIPT.format(wheel=str(wheels[0]))
    if not TARGET.exists() or TARGET.read_text() != content:
        TARGET.parent.mkdir(parents=True, exist_ok=True)
        TARGET.write_text(content)


if __name__ == "__main__":
    main()
