"""Contriever-style text encoder: a transformer, masked mean pooling, optional L2 normalisation."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from adaptive_rag.lm.models import load_encoder, resolve_model
from adaptive_rag.plumbing.progress import bar_options


def mean_pool(last_hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Masked mean over tokens: (B, T, D), (B, T) -> (B, D). Padding never contributes."""
    mask = attention_mask.unsqueeze(-1).to(last_hidden.dtype)
    return (last_hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


def wants_normalize(name: str) -> bool:
    """Sentence-transformers folders declare a Normalize module (MiniLM does); Contriever does not.
    A folder this project saved says so in ``pooling.json``."""
    folder = Path(resolve_model(name))
    if (folder / "pooling.json").is_file():
        return bool(json.loads((folder / "pooling.json").read_text())["normalize"])
    modules = folder / "modules.json"
    if not modules.is_file():
        return False
    return any(m.get("type", "").endswith("Normalize") for m in json.loads(modules.read_text()))


class MeanPoolingEncoder(torch.nn.Module):
    """``encode(texts) -> (N, D) float32``; ``forward`` keeps gradients for retriever training."""

    def __init__(self, model, tokenizer, *, normalize: bool = False, max_length: int = 256, name: str = ""):
        super().__init__()
        self.model, self.tokenizer = model, tokenizer
        self.normalize, self.max_length, self.name = normalize, max_length, name

    @classmethod
    def from_name(cls, name: str, *, normalize: bool | None = None, max_length: int = 256,
                  device: str = "auto") -> MeanPoolingEncoder:
        model, tokenizer = load_encoder(name, device=device)
        return cls(model, tokenizer, normalize=wants_normalize(name) if normalize is None else normalize,
                   max_length=max_length, name=str(name))

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    def forward(self, texts: list[str]) -> torch.Tensor:
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_length,
                               return_tensors="pt").to(self.device)
        out = self.model(**batch).last_hidden_state  # (B, T, D)
        emb = mean_pool(out, batch["attention_mask"])
        return torch.nn.functional.normalize(emb, dim=-1) if self.normalize else emb

    @torch.no_grad()
    def encode(self, texts: list[str], batch_size: int = 64, show_progress: bool = False) -> np.ndarray:
        was_training = self.training
        self.eval()
        # Sorting by length keeps padding small; the output is put back in input order.
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        starts = range(0, len(texts), batch_size)
        for s in tqdm(starts, desc="encoding", unit="batch", **bar_options(inner=True, disable=not show_progress)):
            idx = order[s:s + batch_size]
            out[idx] = self.forward([texts[i] for i in idx]).float().cpu().numpy()
        self.train(was_training)
        return out

    def save(self, out_dir: str | Path) -> None:
        """Save as a plain transformers folder (loadable by name/path), plus the pooling settings."""
        out = Path(out_dir)
        self.model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        (out / "pooling.json").write_text(json.dumps({"normalize": self.normalize, "max_length": self.max_length}))
