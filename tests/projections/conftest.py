"""Fixtures shared by the projections' tests: the real sources the promoter reads."""

from tests.support.promotion_sources import chart_repository, git_repositories, registry  # noqa: F401
