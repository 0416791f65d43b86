"""The commands a user runs over the methods: evaluate, sweep, report, trace, popularity_threshold."""
