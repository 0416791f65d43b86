"""The model side of the foundation: loading (hub, local, GGUF), dtype, tokenization, the batched KV-cache decoder
with attention capture, plain generation. Imports only adaptive_rag.plumbing."""
