"""Every CUDA path of the project, on tiny models built from configs, in under 3 minutes: run it on a GPU machine
before trusting the GPU recipes (``make gpu-check``).

    python bench/gpu_check.py                 # prints one line per check and a summary; exit 1 if any failed

Checks (each a real command of the project, or the library path it uses):
1. bf16 LoRA training of ADAPT-LLM on an untied model (Llama-2's layout): the adapter holds the ``<RET>`` rows of
   both the input embedding and the LM head (the job's own adapter check).
2. 4-bit (QLoRA, bitsandbytes NF4) loading and training of the same model.
3. faiss-gpu: an inner-product index built on the GPU returns the CPU index's neighbours.
4. The dynamic-RAG engine in bf16 on CUDA with last-layer attention capture (DRAGIN, RIND + QFS) over BM25.
5. Data-parallel evaluation with 2 processes (torchrun; needs 2 GPUs: NCCL refuses two ranks on one GPU), merged
   into one predictions.jsonl equal to a single process's.

Without CUDA every check is skipped and the script exits 0 (this is what the CPU test suite runs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what the checks run on; the CPU test suite sets cpu / float32 / auto to run the same code without a GPU
DEVICE, DTYPE, PRECISION = "cuda", "bfloat16", "bf16"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


class Skip(Exception):
    pass


def run(args: list[str], timeout: int = 120, env: dict | None = None) -> str:
    done = subprocess.run([sys.executable, *args], cwd=ROOT, env=env or ENV, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(args[:4])} ...` exited {done.returncode}: {done.stderr.strip()[-800:]}")
    return done.stdout


def tiny_untied_model(folder: Path) -> Path:
    """A 2-layer Llama with its own LM head (as Llama-2), SmolLM2's tokenizer: loadable by path like any model."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from adaptive_rag.lm.models import load_tokenizer

    tokenizer = load_tokenizer("smollm2-135m")
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                      tie_word_embeddings=False, pad_token_id=tokenizer.pad_token_id)
    LlamaForCausalLM(cfg).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def train(model: Path, out: Path, **extra) -> dict:
    import yaml

    recipe = {"base_model": str(model), "dataset": "world-adapt-train", "limit": 16, "data_dir": str(out / "data"),
              "output_dir": str(out / "model"), "precision": PRECISION, "max_steps": 2, "micro_batch_size": 4,
              "effective_batch_size": 4, "save_steps": 1, "logging_steps": 1, "eval_steps": None,
              "evaluate": False, "closed_book_max_new_tokens": 8, **extra}
    (out / "recipe.yaml").parent.mkdir(parents=True, exist_ok=True)
    (out / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    run(["training/adapt_llm.py", str(out / "recipe.yaml")], timeout=150)
    results = json.loads((out / "model" / "train_results.json").read_text())
    if results["global_step"] != 2:
        raise RuntimeError(f"trained {results['global_step']} steps, expected 2")
    return results


def check_bf16_training(tmp: Path) -> str:
    results = train(tiny_untied_model(tmp / "tiny"), tmp / "bf16")
    return f"loss {results['train_loss']:.3f}; adapter check {results['adapter']}"


def check_4bit_training(tmp: Path) -> str:
    try:
        import bitsandbytes  # noqa: F401
    except ImportError as err:
        raise Skip("bitsandbytes is not installed (pip install -e '.[gpu]')") from err
    model = tmp / "tiny" if (tmp / "tiny").is_dir() else tiny_untied_model(tmp / "tiny")
    results = train(model, tmp / "4bit", load_in_4bit=True)
    return f"loss {results['train_loss']:.3f}"


def check_faiss_gpu(tmp: Path) -> str:
    import faiss
    import numpy as np

    if not hasattr(faiss, "StandardGpuResources") or faiss.get_num_gpus() == 0:
        raise RuntimeError("faiss has no GPU support here (faiss-cpu installed instead of faiss-gpu?)")
    rng = np.random.default_rng(0)
    passages = rng.standard_normal((20_000, 64)).astype("float32")
    queries = rng.standard_normal((100, 64)).astype("float32")
    cpu = faiss.IndexFlatIP(64)
    cpu.add(passages)
    gpu = faiss.index_cpu_to_gpu(faiss.StandardGpuResources(), 0, cpu)
    _, ids_cpu = cpu.search(queries, 5)
    _, ids_gpu = gpu.search(queries, 5)
    agree = float((ids_cpu[:, 0] == ids_gpu[:, 0]).mean())
    if agree < 0.99:
        raise RuntimeError(f"GPU top-1 equals the CPU's for only {agree:.0%} of queries")
    return f"top-1 agreement {agree:.0%} over 100 queries, 20k passages"


def _evaluate_args(model: Path, out: Path, index: Path) -> list[str]:
    return ["-m", "inference.commands.evaluate", "--model", str(model), "--method", "dragin", "--theta", "0.01",
            "--dataset", "world-two-hop", "--limit", "8", "--max_new_tokens", "16", "--index", str(index),
            "--device", DEVICE, "--dtype", DTYPE, "--show_progress", "false", "--output_dir", str(out)]


def _index(tmp: Path) -> Path:
    index = tmp / "bm25"
    if not index.is_dir():
        run(["-m", "retrieval_adapt.build_index", "--corpus", "world", "--kind", "bm25", "--out", str(index)])
    return index


def check_engine_bf16(tmp: Path) -> str:
    model = tmp / "tiny" if (tmp / "tiny").is_dir() else tiny_untied_model(tmp / "tiny")
    run(_evaluate_args(model, tmp / "engine", _index(tmp)))
    records = [json.loads(line) for line in (tmp / "engine" / "predictions.jsonl").read_text().splitlines()]
    retrievals = sum(len(r.get("retrievals", [])) for r in records)
    if len(records) != 8 or retrievals == 0:
        raise RuntimeError(f"{len(records)} records, {retrievals} retrievals (θ 0.01 should fire)")
    return f"8 questions, {retrievals} retrievals fired by RIND on captured attention"


def check_data_parallel(tmp: Path) -> str:
    import torch

    if torch.cuda.device_count() < 2:
        raise Skip(f"{torch.cuda.device_count()} GPU: NCCL needs one GPU per process (the CPU suite runs the "
                   "2-process check with gloo)")
    model = tmp / "tiny" if (tmp / "tiny").is_dir() else tiny_untied_model(tmp / "tiny")
    index = _index(tmp)
    run(["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         *_evaluate_args(model, tmp / "dp2", index)], timeout=150)
    if not (tmp / "engine").is_dir():
        run(_evaluate_args(model, tmp / "engine", index))
    shards = sorted(p.name for p in (tmp / "dp2").glob("predictions*"))
    ids = [json.loads(line)["id"] for line in (tmp / "dp2" / "predictions.jsonl").read_text().splitlines()]
    single = [json.loads(line)["id"] for line in (tmp / "engine" / "predictions.jsonl").read_text().splitlines()]
    if shards != ["predictions.jsonl"] or ids != single:
        raise RuntimeError(f"files {shards}; ids {ids} vs one process {single}")
    return "2 processes, shards merged in question order"


CHECKS = [("bf16 training, untied <RET> rows", check_bf16_training), ("4-bit load + training", check_4bit_training),
          ("faiss-gpu build + search", check_faiss_gpu), ("engine bf16 + attention capture", check_engine_bf16),
          ("data-parallel evaluation, 2 processes", check_data_parallel)]


def main() -> int:
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: every GPU check skipped (run this on a GPU machine)")
        return 0
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    failed = 0
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as folder:
        tmp = Path(folder)
        for name, check in CHECKS:
            t0 = time.perf_counter()
            try:
                status, detail = "PASS", check(tmp)
            except Skip as why:
                status, detail = "SKIP", str(why)
            except Exception as err:  # every failure is reported; the other checks still run
                status, detail = "FAIL", f"{type(err).__name__}: {err}"
                failed += 1
            print(f"{status}  {name:40} {time.perf_counter() - t0:6.1f}s  {detail}", flush=True)
    print(f"{len(CHECKS) - failed} of {len(CHECKS)} not failed in {time.perf_counter() - start:.0f}s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
