"""No function in ``appliance`` or ``tests`` is over 80 lines, no module in ``appliance`` over 400 and none in
``tests`` over 500: a long function becomes named steps (phases, helpers), a long module several modules with one
job each. Read from the source with ``ast``; a function's length counts from its ``def`` line to its last line."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "appliance"
TESTS = Path(__file__).resolve().parent
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 400
MAX_TEST_MODULE_LINES = 500


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``file:line qualname (N lines)`` for every function or method in ``path`` longer than ``limit`` lines."""
    found: list[str] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = prefix
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                if length > limit:
                    found.append(f"{path}:{child.lineno} {name} ({length} lines)")
            visit(child, f"{name}." if name != prefix else prefix)

    visit(ast.parse(path.read_text(), str(path)), "")
    return found


def long_modules(paths: list[Path], limit: int) -> list[str]:
    """``file (N lines)`` for every one of ``paths`` longer than ``limit`` lines."""
    return [f"{path} ({n} lines)" for path in paths if (n := len(path.read_text().splitlines())) > limit]


def test_no_function_is_over_80_lines() -> None:
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in long_functions(path)]
    assert not found, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps):\n" + "\n".join(found)


def test_no_module_is_over_400_lines() -> None:
    found = long_modules(sorted(PACKAGE.rglob("*.py")), MAX_MODULE_LINES)
    assert not found, f"modules over {MAX_MODULE_LINES} lines (split them by job):\n" + "\n".join(found)


def our_tests() -> list[Path]:
    """The tests' own Python files: not the installed interop clients under them (a virtualenv, node_modules)."""
    return sorted(path for path in TESTS.rglob("*.py")
                  if not any(part.startswith(".") or part == "node_modules" for part in path.relative_to(TESTS).parts))


def test_no_test_function_is_over_80_lines() -> None:
    found = [hit for path in our_tests() for hit in long_functions(path)]
    assert not found, (f"test functions over {MAX_FUNCTION_LINES} lines (split them into helpers, or into tests "
                       "that share a fixture):\n" + "\n".join(found))


def test_no_test_module_is_over_500_lines() -> None:
    found = long_modules(our_tests(), MAX_TEST_MODULE_LINES)
    assert not found, f"test modules over {MAX_TEST_MODULE_LINES} lines (split them by topic):\n" + "\n".join(found)


def test_the_check_names_a_long_method_and_a_long_nested_function(tmp_path: Path) -> None:
    body = "".join(f"        x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    source = tmp_path / "sample.py"
    source.write_text(f"class Box:\n    def fits(self):\n{body}\n    def spills(self):\n{body}        return 0\n\n"
                      f"def outer():\n    def inner():\n{body.replace('        ', '            ')}"
                      f"            return 0\n    return inner\n")
    assert long_functions(source) == [
        f"{source}:{MAX_FUNCTION_LINES + 3} Box.spills ({MAX_FUNCTION_LINES + 1} lines)",
        f"{source}:{2 * MAX_FUNCTION_LINES + 5} outer ({MAX_FUNCTION_LINES + 3} lines)",
        f"{source}:{2 * MAX_FUNCTION_LINES + 6} outer.inner ({MAX_FUNCTION_LINES + 1} lines)",
    ]


def test_the_check_names_a_test_module_one_line_over(tmp_path: Path) -> None:
    fits, spills = tmp_path / "test_fits.py", tmp_path / "test_spills.py"
    fits.write_text("x = 0\n" * MAX_TEST_MODULE_LINES)
    spills.write_text("x = 0\n" * (MAX_TEST_MODULE_LINES + 1))
    assert long_modules([fits, spills], MAX_TEST_MODULE_LINES) == [f"{spills} ({MAX_TEST_MODULE_LINES + 1} lines)"]
