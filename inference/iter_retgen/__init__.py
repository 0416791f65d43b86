"""Iter-RetGen: iterate retrieval and generation (loop.py) with its prompts."""
