"""The package's layout: no module imports another module's private names (issue 41)."""

from __future__ import annotations

import ast
from pathlib import Path

import stepwise

PACKAGE = Path(stepwise.__file__).resolve().parent


def _private_names_crossing_a_module(root: Path) -> list[str]:
    """``from X import _name`` with X a module of the package (a private *module* imported by
    name is fine), and ``module._name`` where ``module`` was imported from the package."""
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        modules: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("stepwise")):
                base = path.parent
                for _ in range(max(node.level - 1, 0)):
                    base = base.parent
                if not node.level:
                    base = root.parent
                where = base.joinpath(*(node.module or "").split("."))
                for alias in node.names:
                    name = alias.name
                    if (where / name).with_suffix(".py").exists() or (where / name / "__init__.py").exists():
                        modules.add(alias.asname or name)
                    elif name.startswith("_") and not name.startswith("__"):
                        found.append(f"{path.relative_to(root)}:{node.lineno}: import of {name}")
            elif isinstance(node, ast.Import):
                modules.update((a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("stepwise"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in modules
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_private_name_crosses_a_module() -> None:
    assert _private_names_crossing_a_module(PACKAGE) == []


def test_the_check_finds_a_private_import(tmp_path: Path) -> None:
    package = tmp_path / "stepwise"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "_a.py").write_text("_hidden = 1\nvisible = 2\n")
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "b.py").write_text(
        "from .._a import _hidden, visible\nfrom .. import _a\nx = _a._hidden\n"
    )
    assert _private_names_crossing_a_module(package) == [
        "sub/b.py:1: import of _hidden",
        "sub/b.py:3: _a._hidden",
    ]
