"""Cards for the artifacts this project writes, and pushing an artifact folder to the Hugging Face Hub.

A card is the folder's ``README.md`` as the Hub reads it: YAML front matter (base model, library, tags; for a
dataset, which files hold which split) and a body saying what produced the artifact (command, commit, library
versions), from which data (with its sha256), the metrics, how to load it back and the resolved configuration.

* :func:`write_dataset_card` — a builder's ``data_dir``: the card sits beside ``dataset/`` (the DatasetDict that
  ``save_to_disk`` wrote), so ``load_from_disk(data_dir/dataset)`` is untouched and ``load_dataset(data_dir)``, or
  the Hub repo after a push, reads the same splits;
* :func:`write_adapter_card` — the LoRA adapter folder (replacing the placeholder card peft's ``save_pretrained``
  writes);
* :func:`write_encoder_card` — the distilled query encoder folder;
* :func:`push_to_hub` — ``create_repo(exist_ok=True)`` then ``upload_folder``; without the Hub (``HF_HUB_OFFLINE=1``,
  no network, not logged in) it fails in one line (:class:`PushToHubError`) saying where the artifact is saved
  and the command that pushes it later.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import importlib.metadata
import json
import logging
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml

from adaptive_rag.plumbing.atomic_files import write_text_atomic
from adaptive_rag.plumbing.errors import ConfigError

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
CARD = "README.md"
# Hub ids of the embedded models (what they were made from; the LM is its Q4_1 GGUF, de-quantised).
EMBEDDED_HUB_IDS = {"smollm2-135m": "HuggingFaceTB/SmolLM2-135M-Instruct",
                    "minilm": "sentence-transformers/all-MiniLM-L6-v2"}
# Never pushed: trainer checkpoints (optimizer state, several times the artifact), staging and lock files.
PUSH_IGNORE = ["checkpoint-*", "checkpoint-*/**", "*.tmp", "*.tmp/**", "*.old", "*.old/**", ".*", "**/.*"]
DatasetKind = Literal["adapt_llm", "retrieval_adapt"]
_DATASETS = {
    "adapt_llm": ("ADAPT-LLM training data (Algorithm 1)", "text-generation", ["adapt-llm", "sft"],
                  "Prompt/completion pairs (trl's SFT columns `prompt`, `completion`, plus `kind` and `question_id`) "
                  "built by ADAPT-LLM's Algorithm 1: the base model answers every question closed-book; a correct "
                  "answer gives one instance answering it, a wrong one an instance answering `<RET>` and one with "
                  "the gold passage in the prompt. `mode` nr / ar are the paper's never- and always-retrieve "
                  "baselines on the same questions."),
    "retrieval_adapt": ("Iter-RetGen retrieval-adaptation data", "text-retrieval", ["iter-retgen", "distillation"],
                        "Per question: the first iteration's output y1, the dense index's candidate passages "
                        "(`candidate_ids`, `candidate_positions`) and the re-ranker's teacher scores, for "
                        "distilling the re-ranker into the query encoder."),
}


class PushToHubError(ConfigError):
    """The artifact is saved locally but could not be pushed to the Hub (offline, no network, not logged in)."""


def check_repo_id(repo_id: str) -> None:
    """A ``push_to_hub`` value the Hub would reject fails here, before hours of work, as a ValueError."""
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except ValueError as err:
        raise ValueError(f"push_to_hub '{repo_id}' is not a Hub repo id (ORG/NAME or NAME): {err}") from err


def hub_id(name: str | None) -> str | None:
    """The Hub id of a model name, or None where it is a local path (which the Hub cannot link to)."""
    if not name:
        return None
    if name in EMBEDDED_HUB_IDS:
        return EMBEDDED_HUB_IDS[name]
    local = name.startswith(("/", ".", "~")) or name.count("/") > 1 or name.endswith(".gguf") or Path(name).exists()
    return None if local else name


def _as_dict(config: Any) -> dict[str, Any]:
    """A dataclass, several of them (merged), or a mapping, as a plain dict."""
    if isinstance(config, Mapping):
        return dict(config)
    if dataclasses.is_dataclass(config):
        return dataclasses.asdict(config)
    merged: dict[str, Any] = {}
    for part in config:
        merged.update(_as_dict(part))
    return merged


def invoked_command() -> str:
    """The command line this process was started with, as someone would type it again."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name and spec.name != "__main__":
        head = ["python", "-m", spec.name.removesuffix(".__main__")]
    else:
        script = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
        inside = script is not None and script.is_relative_to(REPO_ROOT)
        head = ["python", str(script.relative_to(REPO_ROOT) if inside else sys.argv[0] if sys.argv else "?")]
    return shlex.join(head + sys.argv[1:])


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def provenance(command: str | None = None) -> dict[str, str]:
    """Command, code version, library versions and time of writing."""
    commit = _git("rev-parse", "--short=12", "HEAD")
    if commit and _git("status", "--porcelain", "--untracked-files=no"):
        commit += " (with uncommitted changes)"
    versions = []
    for dist in ("torch", "transformers", "datasets", "peft", "trl", "accelerate"):
        try:
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    return {"command": command or invoked_command(), "code": f"adaptive-rag, commit {commit or 'unknown'}",
            "libraries": ", ".join(versions),
            "written": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return (json.dumps(v) if isinstance(v, (list, dict)) else str(v)).replace("|", "\\|")


def _flat(d: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _table(d: Mapping[str, Any]) -> str:
    rows = _flat(d)
    if not rows:
        return "(none recorded)"
    return "| | |\n|---|---|\n" + "\n".join(f"| {k} | {_value(v)} |" for k, v in rows.items())


def _source(config: Mapping[str, Any], stats: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("dataset", "dataset_format", "split", "start", "limit", "shuffle_seed", "data_dir", "index",
            "base_model", "model", "reranker", "reranker_model")
    found = {k: config[k] for k in keys if config.get(k) is not None}
    found.update({k: v for k, v in _flat(stats).items() if "sha256" in k})
    return found


def _card(meta: dict[str, Any], title: str, summary: str, made: dict[str, str], source: Mapping[str, Any],
          metrics: Mapping[str, Any], load: str, config: Mapping[str, Any]) -> str:
    front = yaml.safe_dump({k: v for k, v in meta.items() if v is not None}, sort_keys=False).strip()
    produced = "\n".join(f"* {k}: `{v}`" if k == "command" else f"* {k}: {v}" for k, v in made.items())
    return (f"---\n{front}\n---\n\n# {title}\n\n{summary}\n\n## What produced it\n\n{produced}\n\n"
            f"## Source data\n\n{_table(source)}\n\n## Metrics\n\n{_table(metrics)}\n\n"
            f"## How to load it\n\n```python\n{load.strip()}\n```\n\n"
            f"## Resolved configuration\n\n```yaml\n{yaml.safe_dump(dict(config), sort_keys=False).strip()}\n```\n")


def _save(folder: Path, text: str) -> Path:
    write_text_atomic(folder / CARD, text)
    return folder / CARD


def _size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M")):
        if n < limit:
            return name
    return "n>1M"


def write_dataset_card(folder: str | Path, stats: Mapping[str, Any], config: Any, *,
                       kind: DatasetKind = "adapt_llm", command: str | None = None,
                       repo_id: str | None = None) -> Path:
    """``folder/README.md`` for the DatasetDict in ``folder/dataset``; returns the card's path."""
    from datasets import load_from_disk

    folder, config = Path(folder), _as_dict(config)
    data = load_from_disk(str(folder / "dataset"))  # also proves it still loads with the card beside it
    title, task, tags, summary = _DATASETS[kind]
    if stats.get("mode") not in (None, "adapt"):
        title += f", mode {stats['mode']}"
    files = [{"split": name, "path": f"dataset/{name}/*.arrow"} for name in data]
    meta = {"pretty_name": title, "task_categories": [task], "tags": ["adaptive-rag", *tags],
            "size_categories": [_size_category(sum(d.num_rows for d in data.values()))],
            "configs": [{"config_name": "default", "data_files": files}]}
    splits = ", ".join(f"{name} ({d.num_rows} row{'' if d.num_rows == 1 else 's'})" for name, d in data.items())
    summary += f"\n\nSplits: {splits}; columns: {', '.join(next(iter(data.values())).column_names)}."
    hub = f'load_dataset("{repo_id}")' if repo_id else 'load_dataset("ORG/NAME")'
    load = (f'from datasets import load_dataset, load_from_disk\n\ndata = load_from_disk("{folder / "dataset"}")'
            f"  # this folder\ndata = {hub}  # the same splits from the Hub, once pushed")
    metrics = {k: v for k, v in stats.items() if "sha256" not in k}
    return _save(folder, _card(meta, title, summary, provenance(command), _source(config, stats), metrics, load,
                               config))


def write_adapter_card(folder: str | Path, config: Any, metrics: Mapping[str, Any], *, command: str | None = None,
                       repo_id: str | None = None) -> Path:
    """``folder/README.md`` for a LoRA adapter folder (adapter, tokenizer, config.yaml, train_results.json)."""
    folder, config = Path(folder), _as_dict(config)
    base = str(config.get("base_model") or "")
    hub_base = hub_id(base)
    search = "search_chat" in config  # training/search_sft.py: the Search-R1 policy's warm start
    added = config.get("ret_token", "special") == "special" and not search
    title = f"{'Search-R1 warm-start' if search else 'ADAPT-LLM'} LoRA adapter on {base or 'its base model'}"
    if search:
        summary = ("A LoRA adapter (peft) that teaches the base model Search-R1's protocol from ADAPT-LLM's "
                   "Algorithm 1 labels: `<answer> ... </answer>` from memory, or `<search> query </search>` first; "
                   "nothing is added to the tokenizer.")
    else:
        summary = ("A LoRA adapter (peft) that teaches the base model ADAPT-LLM's gate: answer from memory, or emit "
                   "`<RET>` to ask for retrieval; " + ("the tokenizer here carries the added `<RET>` token." if added
                                                       else "`<RET>` is written as plain text (nothing added)."))
    if base in EMBEDDED_HUB_IDS:
        summary += (f" It was trained on `{base}`, the Q4_1 GGUF of {hub_base} de-quantised to fp32: on the "
                    "original full-precision weights it applies, but not to the very weights it was trained on.")
    repo = repo_id or str(folder)
    base_load = f'resolve_model("{base}")' if base in EMBEDDED_HUB_IDS else f'"{hub_base or base}"'
    load = ("from peft import PeftModel\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n"
            + ("from adaptive_rag.lm.models import resolve_model  # this project: the embedded base\n"
               if base in EMBEDDED_HUB_IDS else "")
            + f'\ntokenizer = AutoTokenizer.from_pretrained("{repo}"){"  # with <RET>" if added else ""}\n'
            f"base = AutoModelForCausalLM.from_pretrained({base_load})\n"
            "base.resize_token_embeddings(len(tokenizer))\n"
            f'model = PeftModel.from_pretrained(base, "{repo}")\n'
            f'# in this project, the same in one call: adaptive_rag.lm.models.load_causal_lm("{repo}")')
    meta = {"base_model": hub_base, "library_name": "peft", "pipeline_tag": "text-generation",
            "tags": ["adaptive-rag", "search-r1" if search else "adapt-llm", "lora", "peft"]}
    stats_path = folder / "data_stats.json"  # the training data's stats, copied in by the training job
    stats = json.loads(stats_path.read_text()) if stats_path.is_file() else {}
    source = {**_source(config, stats), **({"source_sha256": config["source_sha256"]}
                                           if config.get("source_sha256") else {})}
    return _save(folder, _card(meta, title, summary, provenance(command), source, metrics, load, config))


def write_encoder_card(folder: str | Path, config: Any, metrics: Mapping[str, Any], *,
                       base_encoder: str | None = None, stats: Mapping[str, Any] | None = None,
                       command: str | None = None, repo_id: str | None = None) -> Path:
    """``folder/README.md`` for a distilled query encoder (a transformers encoder folder with ``pooling.json``)."""
    folder, config = Path(folder), _as_dict(config)
    pooling_path = folder / "pooling.json"
    pooling = json.loads(pooling_path.read_text()) if pooling_path.is_file() else {}
    normalize, max_length = bool(pooling.get("normalize", False)), int(pooling.get("max_length", 256))
    title = "Iter-RetGen adapted query encoder"
    summary = ("The dense retriever's query encoder after distilling the re-ranker's candidate distribution into it "
               "(KL, Iter-RetGen §3). Only queries go through it: passages keep the index's own encoder "
               f"(`{base_encoder or 'unknown'}`) and embeddings, so it is used with that index. Pooling: mean over "
               f"the attention mask{', then L2-normalised' if normalize else ''}; max_length {max_length}.")
    repo = repo_id or str(folder)
    load = ("import torch\nfrom transformers import AutoModel, AutoTokenizer\n\n"
            f'tokenizer = AutoTokenizer.from_pretrained("{repo}")\nmodel = AutoModel.from_pretrained("{repo}")\n'
            f'batch = tokenizer(["a question"], padding=True, truncation=True, max_length={max_length}, '
            'return_tensors="pt")\nhidden = model(**batch).last_hidden_state  # (B, T, D)\n'
            'mask = batch["attention_mask"].unsqueeze(-1).float()\nquery = (hidden * mask).sum(1) / mask.sum(1)\n'
            + ("query = torch.nn.functional.normalize(query, dim=-1)\n" if normalize else "")
            + f'# in this project: DenseRetriever.load(INDEX_DIR, query_encoder="{repo}")')
    meta = {"base_model": hub_id(base_encoder), "library_name": "transformers", "pipeline_tag": "feature-extraction",
            "tags": ["adaptive-rag", "iter-retgen", "dense-retrieval", "query-encoder", "distillation"]}
    source = {**_source(config, stats or {}), **({"passage_encoder": base_encoder} if base_encoder else {})}
    return _save(folder, _card(meta, title, summary, provenance(command), source, metrics, load, config))


def _http_errors() -> tuple[type[BaseException], ...]:
    """The transport errors huggingface_hub lets through (httpx's, which are not OSErrors)."""
    found: list[type[BaseException]] = []
    for module in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(module).HTTPError)
        except (ImportError, AttributeError):
            pass
    return tuple(found)


def _why(err: BaseException) -> str:
    name = type(err).__name__
    if name == "OfflineModeIsEnabled":
        return "HF_HUB_OFFLINE=1 is set"
    if name == "LocalTokenNotFoundError":
        return "not logged in to the Hub (`hf auth login`, or set HF_TOKEN)"
    first = " ".join(str(err).split())[:200]
    return f"{name}: {first}" if first else name


def push_to_hub(folder: str | Path, repo_id: str, *, repo_type: Literal["model", "dataset"] = "model",
                private: bool | None = None, ignore_patterns: list[str] | None = None) -> str:
    """Upload ``folder`` (card included) to the Hub repo ``repo_id``, creating it if needed; returns its URL.
    Raises :class:`PushToHubError` (one line: why, where the artifact is, how to push it later) when it cannot."""
    import huggingface_hub as hub

    folder = Path(folder).resolve()
    ignore = PUSH_IGNORE if ignore_patterns is None else ignore_patterns
    later = f"hf upload {shlex.quote(repo_id)} {shlex.quote(str(folder))} . --repo-type {repo_type}"
    if any(p.startswith("checkpoint-") for p in ignore) and any(folder.glob("checkpoint-*")):
        later += " --exclude 'checkpoint-*/**'"
    try:
        check_repo_id(repo_id)
        url = hub.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True)
        hub.upload_folder(repo_id=repo_id, folder_path=str(folder), repo_type=repo_type, ignore_patterns=ignore,
                          commit_message=f"Upload {folder.name} (adaptive-rag)")
    except (OSError, ValueError, *_http_errors()) as err:
        raise PushToHubError(f"could not push to the Hub {repo_type} repo {repo_id} ({_why(err)}); the artifact is "
                             f"saved locally at {folder}; push it later where there is network: {later}") from err
    logger.info("pushed %s to %s", folder, url)
    return str(url)
