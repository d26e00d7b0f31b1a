"""Steps 1-4 for one statement, without Spark: what runs, what it reads, what is recorded.

One module per statement family (`queries`, `writes`, `ddl`, `metadata`) over one shared
`PlanningContext`; `dispatch` maps each statement type to its planner. Planning returns
data (`planned.Planned`, with DDL effects as declarative actions) that the session
executes; it never imports the session or Spark.
"""
