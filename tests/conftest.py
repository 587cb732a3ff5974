"""Shared test set-up.

With RESGRAD_REQUIRE_TORCH=1 (``.ci/run`` sets it) a skipped test fails the
run: CI installs PyTorch, so a test that skips there proves nothing.
"""

import os

import pytest

REQUIRE = os.environ.get("RESGRAD_REQUIRE_TORCH") == "1"


def pytest_sessionfinish(session, exitstatus):
    if not REQUIRE:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter else []
    if skipped:
        if reporter:
            reporter.write_line(
                f"RESGRAD_REQUIRE_TORCH=1: {len(skipped)} test(s) skipped; "
                "a skipped test is not a pass here",
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture
def torch():
    """PyTorch, the outside referee; the test skips where it is not installed."""
    t = pytest.importorskip("torch")
    t.set_default_dtype(t.float64)
    yield t
    t.set_default_dtype(t.float32)


@pytest.fixture
def text_file(tmp_path):
    """A small training text (a pangram, 40 times) as a path; modules with their own
    text define their own ``text_file``."""
    p = tmp_path / "data.txt"
    p.write_text("the quick brown fox jumps over the lazy dog. " * 40, encoding="utf-8")
    return str(p)
