"""Plumbing of the foundation: records, configs and the command-line runner, metrics, record logs, cards, progress.
Imports nothing else in the project."""
