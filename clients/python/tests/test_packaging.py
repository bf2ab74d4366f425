"""The two ways the package is built stay one package: ``pip install ./clients/python`` (pure
Python) and ``pip install .`` from the repository's root (the same sources plus the server binary,
built with maturin) declare the same name, version, dependencies, extras and commands."""

from __future__ import annotations

from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[3]
SAME = ("name", "version", "requires-python", "license", "dependencies", "optional-dependencies")


def test_the_wheel_with_the_server_declares_what_the_client_declares() -> None:
    client = tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text())["project"]
    wheel = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert {k: wheel["project"].get(k) for k in SAME} == {k: client.get(k) for k in SAME}
    maturin = wheel["tool"]["maturin"]
    assert maturin["bindings"] == "bin"
    assert (ROOT / maturin["python-source"] / "stepwise" / "__init__.py").is_file()
    assert (ROOT / maturin["manifest-path"]).is_file()
    # Binary wheels cannot declare scripts: each of the client's is a data script of the wheel
    # that runs the same entry point.
    for name, target in client["scripts"].items():
        script = (ROOT / maturin["data"] / "scripts" / name).read_text()
        module, function = target.split(":")
        assert script.startswith("#!python\n")
        assert f"from {module} import {function}" in script
