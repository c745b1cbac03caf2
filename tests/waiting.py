"""Waiting for state in tests: poll a condition with a deadline, never sleep
for a fixed time and hope."""
from __future__ import annotations

import time


def wait_for(condition, timeout: float = 10.0, interval: float = 0.002, what: str = "the condition"):
    """Call ``condition()`` until it returns something truthy and return that;
    fail the test (AssertionError, saying ``what``) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(interval)
