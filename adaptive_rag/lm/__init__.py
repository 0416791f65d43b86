"""The model side of the foundation: loading (hub, local, GGUF), dtype, tokenization, the batched KV-cache decoder
with attention capture, plain generation, and the base model a training job starts from (``base_model.py``).
Imports only adaptive_rag.plumbing."""
