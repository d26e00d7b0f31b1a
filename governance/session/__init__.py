"""Step 7 and the order of all: the governed session (governed), its audit lines (recorder), the
policy set in force, and recovery of intents whose outcome never reached the log."""
