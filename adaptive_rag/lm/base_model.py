"""The causal LM a training job starts from: a model setting, kept apart from the data it is trained on.

ADAPT-LLM's job (``training/adapt_llm.py``) parses :class:`BaseModelConfig` next to its data, training and evaluation
configs; field names are unique across them, so one flat YAML holds them all (``base_model: ...``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class BaseModelConfig:
    """The base model of a training job."""

    base_model: str = "smollm2-135m"  # answers closed-book; the model the gate is then trained on
