"""The foundation every layer stands on (README: Layout): plumbing/ and the model side, lm/. It imports nothing
else in the project."""
