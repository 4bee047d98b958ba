"""Suite-wide hooks. The ``attack`` marker and its results file: see
``tests/_support/attack_report.py``."""

from tests._support.attack_report import pytest_configure, pytest_runtest_makereport

__all__ = ["pytest_configure", "pytest_runtest_makereport"]
