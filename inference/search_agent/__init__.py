"""A policy that searches in turns (Search-R1's protocol): the protocol, the loop, and the evaluation method."""
