"""Linear layers of a CPU bf16 model through oneDNN with their weights reordered once, not at every call.

``torch.nn.functional.linear`` on a bf16 CPU tensor already runs oneDNN's kernel, but it reorders the weight
into the kernel's blocked layout at every call, a sizeable part of each product at SmolLM2 size (SmolLM2's MLP
shapes on a 2-core AVX512-bf16 EPYC: 1.6-1.7x faster at 1-4 rows, 1.2x at 64, 1.05-1.14x at 1,400).
:class:`PackedLinears` reorders each ``nn.Linear`` weight once and, inside ``with``, sends the layers' calls to the
prepacked kernel.
The outputs are bit-identical to ``F.linear`` (same kernel, same accumulation order): the constructor checks that
on the model's own first layer and packs nothing if they differ. Only bf16 is packed: in float32 ``F.linear``
runs MKL's sgemm, and oneDNN's float32 kernel rounds differently.

Outside ``with`` the model is untouched (the baseline in ``bench/dynamic_rag.py`` runs the stock layers on the same
model object). A layer whose weight was changed or replaced since it was packed is packed again on entry.
"""

from __future__ import annotations

import os
import weakref
from functools import partial

import torch
import torch.nn.functional as F

# The packed copies may take at most this share of the free memory (a 7B model on a CPU would double its weights).
MAX_SHARE_OF_FREE_MEMORY = 0.5


# Rows the packed layout is chosen for: a decode step's batch. Prefill products (hundreds of rows) gain about the
# same with any choice; 1-4-row products gained x1.59-1.68 with this hint against x1.43-1.49 with none.
ROWS_HINT = 64


def _reorder(weight: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), ROWS_HINT)


def _packed_call(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _free_memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _eligible(module: torch.nn.Module) -> bool:
    w = getattr(module, "weight", None)
    # exactly nn.Linear: quantized subclasses (bitsandbytes Linear4bit) keep their own forward
    return (type(module) is torch.nn.Linear and isinstance(w, torch.Tensor) and w.device.type == "cpu"
            and w.dtype == torch.bfloat16 and w.layout == torch.strided and not w.is_meta)


def _kernel_available() -> bool:
    ops = torch.ops.mkldnn
    return (torch.backends.mkldnn.is_available() and hasattr(ops, "_reorder_linear_weight")
            and hasattr(ops, "_linear_pointwise") and bool(getattr(ops, "_is_mkldnn_bf16_supported", lambda: False)()))


def _same_as_stock(module: torch.nn.Linear, packed: torch.Tensor) -> bool:
    """The prepacked kernel gives ``F.linear``'s exact bits on this layer (one decode-like, one prefill-like input)."""
    gen = torch.Generator().manual_seed(0)
    for shape in ((3, module.in_features), (2, 5, module.in_features)):
        x = torch.randn(shape, generator=gen).to(module.weight.dtype)
        with torch.no_grad():
            if not torch.equal(_packed_call(x, packed, module.bias), F.linear(x, module.weight, module.bias)):
                return False
    return True


class PackedLinears:
    """Prepacked weights of ``model``'s bf16 CPU ``nn.Linear`` layers; ``with packed:`` runs the model on them.

    ``len(packed)`` is the number of layers packed: 0 where the kernel is missing, the model is not bf16 on a CPU,
    the copies would not fit in memory, or the check against ``F.linear`` fails."""

    def __init__(self, model: torch.nn.Module, enabled: bool = True):
        # layer -> (its forward on the packed weight, the weight's (data_ptr, version) when packed)
        self._packed: dict[torch.nn.Linear, tuple[partial, tuple[int, int]]] = {}
        self._depth = 0
        self.reason = ""  # why nothing was packed
        layers = [m for m in model.modules() if _eligible(m)] if enabled else []
        if not enabled:
            self.reason = "disabled"
        elif not layers:
            self.reason = "no bf16 nn.Linear layers on a CPU"
        elif not _kernel_available():
            self.reason = "this torch build has no oneDNN bf16 linear kernel"
        if self.reason:
            return
        need = sum(m.weight.numel() * m.weight.element_size() for m in layers)
        free = _free_memory_bytes()
        if free is not None and need > MAX_SHARE_OF_FREE_MEMORY * free:
            self.reason = (f"packed copies ({need / 2**30:.1f} GiB) would not fit in free memory "
                           f"({free / 2**30:.1f} GiB)")
            return
        try:
            if not _same_as_stock(layers[0], self._pack(layers[0])):
                self._packed.clear()
                self.reason = "the prepacked kernel's results differ from F.linear here"
                return
            for m in layers[1:]:
                self._pack(m)
        except RuntimeError as err:  # a kernel that rejects a shape: keep the stock layers
            self._packed.clear()
            self.reason = f"oneDNN refused: {err}"

    def _pack(self, module: torch.nn.Linear) -> torch.Tensor:
        w = module.weight
        packed = _reorder(w)
        self._packed[module] = (partial(_forward, module, packed), (w.data_ptr(), w._version))
        return packed

    def __len__(self) -> int:
        return len(self._packed)

    def __enter__(self) -> PackedLinears:
        self._depth += 1
        if self._depth > 1:
            return self
        try:
            for module, (_, stamp) in list(self._packed.items()):
                w = module.weight
                if (w.data_ptr(), w._version) != stamp:  # changed since packing (a merged adapter, a new load)
                    if not _eligible(module):  # no longer bf16 on a CPU: the stock layer from now on
                        del self._packed[module]
                        continue
                    self._pack(module)
                module.forward = self._packed[module][0]
        except BaseException:  # a repack that fails leaves every layer stock, as ``with`` never began
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._depth -= 1
        if self._depth == 0:
            for module in self._packed:
                module.__dict__.pop("forward", None)


_PER_MODEL: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def linear_packing(model: torch.nn.Module, enabled: bool = True) -> PackedLinears:
    """The model's :class:`PackedLinears`, packed on first use and shared by every caller after (a sweep builds
    an engine per method over one model: each would otherwise pack the weights again)."""
    packing = _PER_MODEL.get(model) if enabled else None
    if packing is None:
        packing = PackedLinears(model, enabled=enabled)
        if packing:
            _PER_MODEL[model] = packing
    return packing


def _forward(module: torch.nn.Linear, packed: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    if x.dtype != packed.dtype or x.device.type != "cpu" or torch.is_grad_enabled():
        return F.linear(x, module.weight, module.bias)
    return _packed_call(x, packed, module.bias)
