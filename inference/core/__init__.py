"""The foundation every layer stands on; it imports nothing else in the project (README: Layout)."""
