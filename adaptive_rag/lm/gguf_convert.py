"""Turn a GGUF checkpoint into a plain safetensors folder, once, so that ``from_pretrained`` loads it fast.

Loading a GGUF through transformers de-quantises every tensor on every load (about 20 s for SmolLM2-135M) and
yields a model that refuses ``save_pretrained``. So a GGUF is converted once into the cache and loaded from
there. The conversion streams: each tensor is de-quantised, renamed to the transformers name and written into
safetensors shards of about :data:`SHARD_BYTES` (a bigger tensor gets a shard of its own), so memory holds one
shard, never the whole fp32 model (a 1.5B model with untied embeddings is about 7 GB in fp32). The renaming
and the q/k un-permutation are transformers' own GGUF tensor processors, the ones
``from_pretrained(..., gguf_file=...)`` runs; weights stay fp32, which represents every de-quantised GGUF value
exactly.

Architectures that transformers reads only through its newer packed-GGUF loader (``lfm2``, ``qwen35``, ...) are
loaded whole (de-quantised) and then written in shards: one fp32 copy in memory, not two.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from adaptive_rag.plumbing.errors import ModelNotFoundError
from adaptive_rag.plumbing.progress import interactive, library_bars_quiet

logger = logging.getLogger(__name__)

#: Bump when the written folder changes, so that caches made by an older converter are rebuilt.
CONVERTER_VERSION = 1
SHARD_BYTES = 256 * 2**20


def cache_dir() -> Path:
    """Where converted embedded models live: ``$ADAPTIVE_RAG_CACHE`` or ``~/.cache/adaptive_rag``."""
    root = os.environ.get("ADAPTIVE_RAG_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "adaptive_rag"
    )
    return Path(root)


def gguf_cache_folder(gguf: Path) -> Path:
    """The cache folder of one GGUF file, keyed by its name, size and modification time: a changed file
    (re-downloaded, re-quantised) gets a new folder and is converted again."""
    stat = gguf.stat()
    key = hashlib.sha256(f"{gguf.name}\0{stat.st_size}\0{stat.st_mtime_ns}\0{CONVERTER_VERSION}".encode())
    return cache_dir() / "gguf" / f"{gguf.stem}-{key.hexdigest()[:16]}"


def gguf_lm_path(gguf: str | Path) -> Path:
    """The converted folder of a local ``.gguf`` file, converting it on first use."""
    gguf = Path(gguf).expanduser()
    if not gguf.is_file():
        raise ModelNotFoundError(f"cannot load model '{gguf}': no such GGUF file ({gguf.resolve()})")
    out = gguf_cache_folder(gguf)
    if not (out / "config.json").is_file():
        convert_gguf(gguf, out)
    return out


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:300] or type(err).__name__


def gguf_architecture(gguf: Path) -> str:
    """``general.architecture`` of a GGUF file; a file that is not GGUF fails with one line."""
    from gguf import GGUFReader

    try:
        field = GGUFReader(str(gguf)).fields["general.architecture"]
        return bytes(field.parts[field.data[0]]).decode("utf-8")
    except (ValueError, KeyError, IndexError, OSError, UnicodeDecodeError) as err:
        raise ModelNotFoundError(f"cannot load model '{gguf}': not a readable GGUF file ({_one_line(err)})") from err


def _packed_loader_only(architecture: str) -> bool:
    """True for architectures that transformers reads only through its packed-GGUF loader (transformers >= 5.24)."""
    try:
        from transformers.integrations.gguf.utils import is_gguf_arch_supported
    except ImportError:
        return False
    return is_gguf_arch_supported(architecture)


def convert_gguf(gguf: Path, out: Path) -> None:
    """De-quantise ``gguf`` into ``out``: config, generation config, tokenizer and fp32 safetensors shards."""
    import transformers
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    architecture = gguf_architecture(gguf)
    logger.info("converting %s (%s) to safetensors under %s (once)", gguf.name, architecture, out)
    cannot = f"cannot load model '{gguf}': transformers {transformers.__version__} cannot read its GGUF"
    try:
        config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except (ValueError, KeyError, NotImplementedError) as err:
        raise ModelNotFoundError(f"{cannot} architecture '{architecture}' ({_one_line(err)})") from err
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except (ValueError, KeyError, NotImplementedError) as err:
        raise ModelNotFoundError(f"{cannot} tokenizer ({_one_line(err)})") from err
    if hasattr(config, "quantization_config"):  # the folder holds plain weights
        del config.quantization_config
    config.dtype = torch.float32
    out.parent.mkdir(parents=True, exist_ok=True)
    # Write to a temporary folder and rename, so an interrupted conversion never leaves half a model.
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=out.name + ".tmp"))
    try:
        writer = ShardWriter(tmp)
        if _packed_loader_only(architecture):
            model_class = _write_loaded(gguf, writer)
        else:
            model_class = _write_streamed(gguf, architecture, config, writer)
        writer.close()
        config.architectures = [model_class]
        config.save_pretrained(tmp)
        GenerationConfig.from_model_config(config).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
    except (ValueError, KeyError, NotImplementedError) as err:  # transformers' GGUF code on a file it half-reads
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelNotFoundError(f"cannot load model '{gguf}': converting the GGUF failed ({_one_line(err)})") from err
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        tmp.rename(out)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)


def _skeleton(config):
    """The model without storage (meta device): its parameter names, and which of them are tied."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config)


def _write_streamed(gguf: Path, architecture: str, config, writer: ShardWriter) -> str:
    """One tensor at a time, through the tensor processor ``from_pretrained`` would use for this architecture.
    Returns the model class name."""
    from gguf import GGUFReader, dequantize
    from transformers.modeling_gguf_pytorch_utils import (
        TENSOR_PROCESSORS,
        TensorProcessor,
        get_gguf_hf_weights_map,
        load_gguf_checkpoint,
    )

    parsed = load_gguf_checkpoint(str(gguf), return_tensors=False)
    skeleton = _skeleton(config)
    processor = TENSOR_PROCESSORS.get(architecture, TensorProcessor)(config=parsed["config"])
    names = get_gguf_hf_weights_map(skeleton, processor)
    parsed["tensors"] = {}  # processors that assemble one tensor from several (MoE experts) collect here
    for tensor in GGUFReader(str(gguf)).tensors:
        result = processor.process(weights=dequantize(tensor.data, tensor.tensor_type), name=tensor.name,
                                   tensor_key_mapping=names, parsed_parameters=parsed)
        if result.name in names:  # e.g. llama.cpp's rope_freqs has no place in the model: skipped, as transformers does
            # a de-quantised tensor is already a fresh fp32 array; only an F32 view into the file is copied
            weights = np.require(result.weights, dtype=np.float32, requirements=["C", "W"])
            writer.add(names[result.name], torch.from_numpy(weights))
    for name, value in parsed["tensors"].items():
        writer.add(name, value.to(torch.float32))
    _check_complete(gguf, skeleton, writer.names)
    return type(skeleton).__name__


def _write_loaded(gguf: Path, writer: ShardWriter) -> str:
    """The whole model de-quantised by transformers' packed-GGUF loader, then its tensors written (no copy).
    Returns the model class name."""
    from transformers import AutoModelForCausalLM
    from transformers.utils.quantization_config import GgufConfig

    with library_bars_quiet(), _gguf_bar_quiet():
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32,
                                                     quantization_config=GgufConfig(dequantize=True))
    seen: set[int] = set()
    for name, value in model.state_dict().items():
        if id(value) not in seen:  # a tied weight is written once and tied again on load
            seen.add(id(value))
            writer.add(name, value)
    return type(model).__name__


@contextlib.contextmanager
def _gguf_bar_quiet() -> Iterator[None]:
    """transformers' GGUF reader draws its per-tensor bar with plain tqdm, which no library switch reaches; in a log
    file (stderr not a TTY) it is one redraw per tenth of a second of de-quantising. Swap in a disabled bar for the
    block and put the original back."""
    if interactive():
        yield
        return
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    original = gguf_utils.tqdm
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def _check_complete(gguf: Path, skeleton, written: set[str]) -> None:
    """Every weight of the model came from the file (a tied group needs one member), else one line."""
    groups: dict[int, list[str]] = {}
    for name, value in skeleton.state_dict(keep_vars=True).items():
        groups.setdefault(id(value), []).append(name)
    missing = [names[0] for names in groups.values() if not any(n in written for n in names)]
    if missing:
        raise ModelNotFoundError(f"cannot load model '{gguf}': the GGUF file has no tensor for {len(missing)} "
                                 f"weight(s) of {type(skeleton).__name__}, e.g. {', '.join(missing[:3])}")


class ShardWriter:
    """Collects tensors and writes a safetensors shard whenever the next tensor would pass ``limit`` bytes.

    One shard is written as ``model.safetensors``; several as ``model-0000i-of-0000n.safetensors`` with the
    ``model.safetensors.index.json`` that ``from_pretrained`` reads.
    """

    def __init__(self, folder: Path, limit: int | None = None):
        self.folder, self.limit = folder, limit or SHARD_BYTES
        self.pending: dict[str, torch.Tensor] = {}
        self.pending_bytes = self.total_bytes = 0
        self.files: list[Path] = []
        self.weight_map: dict[str, str] = {}
        self.names: set[str] = set()

    def add(self, name: str, tensor: torch.Tensor) -> None:
        nbytes = tensor.numel() * tensor.element_size()
        if self.pending and self.pending_bytes + nbytes > self.limit:
            self._flush()
        self.pending[name] = tensor.contiguous()
        self.names.add(name)
        self.pending_bytes += nbytes
        self.total_bytes += nbytes

    def _flush(self) -> None:
        from safetensors.torch import save_file

        path = self.folder / f"part-{len(self.files)}.safetensors"
        save_file(self.pending, str(path), metadata={"format": "pt"})
        self.files.append(path)
        self.weight_map.update(dict.fromkeys(self.pending, len(self.files) - 1))
        self.pending, self.pending_bytes = {}, 0

    def close(self) -> None:
        if self.pending or not self.files:
            self._flush()
        n = len(self.files)
        final = ["model.safetensors"] if n == 1 else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
        for path, name in zip(self.files, final):
            path.rename(self.folder / name)
        self.weight_map = {key: final[index] for key, index in self.weight_map.items()}
        if n > 1:
            index = {"metadata": {"total_size": self.total_bytes}, "weight_map": dict(sorted(self.weight_map.items()))}
            (self.folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
