"""Tools over the whole pipeline: the demo lakehouse, `lakegate policy test`, `lakegate policy
impact`."""
