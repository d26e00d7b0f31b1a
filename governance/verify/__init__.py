"""Step 5, verify: Spark runs the text Lakegate checked (guard), and the plan Spark analyzed
reads only what the rewrite built (plan); analysis errors name only what the caller saw."""
