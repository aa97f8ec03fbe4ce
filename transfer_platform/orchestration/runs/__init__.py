"""Runs as users see them: transfers enqueued, listed and cancelled, the code locations runs are
created from, and the lifecycle (heartbeat, the sweep of expired and orphaned runs)."""
