"""Kept for callers of the former single-module planner: the planner is the
`governance.planning` package now (one module per statement family)."""

from governance.planning.dispatch import Planner
from governance.planning.planned import ROW_FILTER_VIOLATION, Planned

__all__ = ["ROW_FILTER_VIOLATION", "Planned", "Planner"]
