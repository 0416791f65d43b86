"""The dynamic-RAG engine (DRAGIN and the baselines) with its plug-ins: triggers/ decide when to retrieve, queries/
what to ask; methods.py names the presets."""
