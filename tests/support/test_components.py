"""A missing test component skips a test on a developer's machine and fails it under CI=true."""

from __future__ import annotations

import pytest

from tests.support.components import in_ci, require_program

_ABSENT = "streamscope-no-such-program"


def test_missing_program_skips_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"{_ABSENT} is not installed.*apt-get install"):
        require_program(_ABSENT, "some-package")


@pytest.mark.parametrize("value", ["true", "TRUE", "1"])
def test_missing_program_fails_under_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci()
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        require_program(_ABSENT, "some-package")


def test_present_program_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    assert require_program("sh", "dash").endswith("/sh")


@pytest.mark.parametrize(
    ("program", "package"), [("prometheus", "prometheus"), ("promtool", "prometheus"), ("tmux", "tmux"), ("npm", "npm")]
)
def test_components_are_installed_when_ci_runs(program: str, package: str) -> None:
    """Under CI=true this fails if ./run.sh test did not install a component (elsewhere it skips)."""
    require_program(program, package)
