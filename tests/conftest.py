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
