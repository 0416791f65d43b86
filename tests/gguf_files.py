"""Tiny GGUF files written by the tests themselves: a llama or qwen2 model with hidden size 16 and a byte-level
BPE vocabulary of a few dozen tokens, laid out as llama.cpp's converter writes it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

LETTERS = "abcdefghijklmnopqrstuvwxyz"
TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "Ġ", *LETTERS, "Ġt", "he", "Ġthe", "in", "Ġa", "er", "on"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n"]
_CONTROL, _NORMAL = 3, 1  # llama.cpp token types


def tiny_hf_model(arch: str = "llama", untied: bool = True, seed: int = 0):
    """A random transformers model of the kind the GGUF will describe (norm weights away from 1 so they count)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_cls, model_cls = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[arch]
    torch.manual_seed(seed)
    cfg = config_cls(vocab_size=len(TOKENS), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
                     tie_word_embeddings=not untied, bos_token_id=1, eos_token_id=2)
    model = model_cls(cfg).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
            elif name.endswith("bias"):
                param.normal_()
    return model


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf row order for llama q/k (transformers un-permutes it on load)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, path: Path, arch: str | None = None, drop: tuple[str, ...] = ()) -> Path:
    """Write ``model`` as an F32 GGUF named ``arch`` (default: its own model type), leaving out ``drop`` tensors."""
    import gguf

    cfg = model.config
    arch = arch or cfg.model_type
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_vocab_size(cfg.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2" if arch == "qwen2" else "default")
    w.add_token_list(TOKENS)
    w.add_token_types([_CONTROL] * 3 + [_NORMAL] * (len(TOKENS) - 3))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    permute = _permute if cfg.model_type == "llama" else (lambda x, n: x)
    tensors = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"]}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        tensors.update({
            f"blk.{i}.attn_norm.weight": sd[p + "input_layernorm.weight"],
            f"blk.{i}.attn_q.weight": permute(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads),
            f"blk.{i}.attn_k.weight": permute(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads),
            f"blk.{i}.attn_v.weight": sd[p + "self_attn.v_proj.weight"],
            f"blk.{i}.attn_output.weight": sd[p + "self_attn.o_proj.weight"],
            f"blk.{i}.ffn_norm.weight": sd[p + "post_attention_layernorm.weight"],
            f"blk.{i}.ffn_gate.weight": sd[p + "mlp.gate_proj.weight"],
            f"blk.{i}.ffn_up.weight": sd[p + "mlp.up_proj.weight"],
            f"blk.{i}.ffn_down.weight": sd[p + "mlp.down_proj.weight"],
        })
        for proj in "qkv":
            if p + f"self_attn.{proj}_proj.bias" in sd:
                tensors[f"blk.{i}.attn_{proj}.bias"] = sd[p + f"self_attn.{proj}_proj.bias"]
    if not cfg.tie_word_embeddings:
        tensors["output.weight"] = sd["lm_head.weight"]
    for name, value in tensors.items():
        if name not in drop:
            w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
