"""The package's build leaves the work tree clean."""

import pathlib
import shutil
import subprocess

import pytest

HERE = pathlib.Path(__file__).resolve().parents[1]


def test_what_pip_install_builds_in_the_tree_is_ignored():
    """``pip install ./clients/python`` builds in place: setuptools writes ``build/`` and the
    egg-info next to pyproject.toml. Git must ignore both (checked without running pip, which
    would need the network for its isolated build environment)."""
    if shutil.which("git") is None or not (HERE.parents[1] / ".git").exists():
        pytest.skip("not in the git work tree")
    made = ["build/lib/redislock/lock.py", "build/bdist.linux-x86_64/wheel/x",
            "redis_lock_client.egg-info/PKG-INFO"]
    ignored = subprocess.run(["git", "check-ignore", *made], cwd=HERE, capture_output=True,
                             text=True).stdout.split()
    assert ignored == made
