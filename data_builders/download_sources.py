"""Where the papers' datasets come from: one :class:`Source` per name of ``python -m data_builders.download``.

Each source is the file its authors released (or, where the authors' own copy is on the Hugging Face Hub, that
repository at a pinned revision), in the format the project's readers parse, so ``read_qa`` / ``read_corpus`` take
the downloaded files as they are. ``verified`` says whether the address was checked against a public page that
names it (hub commit listings, the authors' or other projects' download scripts) while this table was written;
none could be fetched from the machine that wrote it, so the first real download is what records each file's
sha256 in the manifest (later runs check against it). ``sha256`` pins a file whose bytes were checked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Extract = Literal["zip", "tgz", "gunzip"]


@dataclass(frozen=True)
class RemoteFile:
    url: str
    save_as: str  # file name inside the source's folder (the archive's, when extracted)
    sha256: str | None = None  # pinned bytes; None: recorded at the first download
    extract: Extract | None = None  # unpacked into the source's folder after the checksum


@dataclass(frozen=True)
class Source:
    name: str
    paper_use: str  # which paper uses it, and how
    files: tuple[RemoteFile, ...]
    questions: tuple[tuple[str, str], ...] = ()  # (file name inside the folder, read_qa format)
    corpus: tuple[tuple[str, str], ...] = ()  # (file name inside the folder, read_corpus format)
    hub: dict[str, str] = field(default_factory=dict)  # repo_id, revision, split: where the copy is a hub repo
    license: str = ""
    verified: bool = True
    note: str = ""


HF = "https://huggingface.co/datasets"
NQ_COMMIT = "fb26a3073b1fe636c97302890a27b491d6530130"  # google-research-datasets/natural-questions
NQ_RAW = f"https://raw.githubusercontent.com/google-research-datasets/natural-questions/{NQ_COMMIT}/nq_open"
POPQA_REVISION = "098765c79ea10a2cb19c828324e33281b8336ec0"  # akariasai/PopQA: the commit that holds test.tsv

SOURCES: dict[str, Source] = {s.name: s for s in (
    Source(
        "popqa", "ADAPT-LLM: evaluation (14,267 questions with subject popularity s_pop)",
        (RemoteFile(f"{HF}/akariasai/PopQA/resolve/{POPQA_REVISION}/test.tsv", "test.tsv"),),
        questions=(("test.tsv", "popqa_tsv"),),
        hub={"repo_id": "akariasai/PopQA", "revision": POPQA_REVISION, "split": "test"},
        license="MIT", note="the authors' hub copy (the same rows as popQA.tsv in AlexTMallen/adaptive-retrieval)"),
    Source(
        "nq-open", "ADAPT-LLM: training set (train) and an evaluation set (dev, the 'NQ test' of ODQA papers)",
        (RemoteFile(f"{NQ_RAW}/NQ-open.dev.jsonl", "NQ-open.dev.jsonl",
                    sha256="f15567f38099f3615f5b8a685c0aef449c11ad90d3da3735e8d1b98115b40616"),
         RemoteFile(f"{NQ_RAW}/NQ-open.train.jsonl", "NQ-open.train.jsonl")),
        questions=(("NQ-open.dev.jsonl", "nq_open"), ("NQ-open.train.jsonl", "nq_open")),
        license="CC BY-SA 3.0", note=f"google-research-datasets/natural-questions at commit {NQ_COMMIT}"),
    Source(
        "squad", "ADAPT-LLM: training set (train; its gold paragraphs are the context passages) and dev",
        (RemoteFile("https://rajpurkar.github.io/SQuAD-explorer/dataset/train-v1.1.json", "train-v1.1.json"),
         RemoteFile("https://rajpurkar.github.io/SQuAD-explorer/dataset/dev-v1.1.json", "dev-v1.1.json")),
        questions=(("dev-v1.1.json", "squad"), ("train-v1.1.json", "squad")),
        corpus=(("dev-v1.1.json", "squad"),), license="CC BY-SA 4.0", note="the official SQuAD v1.1 files"),
    Source(
        "hotpotqa", "DRAGIN: evaluation (dev, distractor setting); Iter-RetGen: evaluation and retriever adaptation",
        (RemoteFile("http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_dev_distractor_v1.json",
                    "hotpot_dev_distractor_v1.json"),
         RemoteFile("http://curtis.ml.cmu.edu/datasets/hotpot/hotpot_train_v1.1.json", "hotpot_train_v1.1.json")),
        questions=(("hotpot_dev_distractor_v1.json", "hotpotqa"), ("hotpot_train_v1.1.json", "hotpotqa")),
        corpus=(("hotpot_dev_distractor_v1.json", "hotpotqa"),), license="CC BY-SA 4.0",
        note="the official release (hotpotqa.github.io)"),
    Source(
        "2wikimultihopqa", "DRAGIN and Iter-RetGen: evaluation (dev)",
        (RemoteFile("https://www.dropbox.com/s/ms2m13252h6xubs/data_ids_april7.zip?dl=1", "data_ids_april7.zip",
                    extract="zip"),),
        questions=(("dev.json", "2wikimultihopqa"),), corpus=(("dev.json", "2wikimultihopqa"),),
        license="Apache-2.0", note="the authors' release (Alab-NII/2wikimultihop README); dev.json, train.json, "
                                   "test.json and id_aliases.json"),
    Source(
        "strategyqa", "DRAGIN: evaluation (strategyqa_train.json, as its authors evaluate)",
        (RemoteFile("https://storage.googleapis.com/ai2i/strategyqa/data/strategyqa_dataset.zip",
                    "strategyqa_dataset.zip", extract="zip"),),
        questions=(("strategyqa_train.json", "strategyqa"),), license="MIT", note="the authors' release (allenai)"),
    Source(
        "iirc", "DRAGIN: evaluation (dev)",
        (RemoteFile("https://iirc-dataset.s3.us-west-2.amazonaws.com/iirc_train_dev.tgz", "iirc_train_dev.tgz",
                    extract="tgz"),),
        questions=(("dev.json", "iirc"),), license="see the release",
        note="the authors' release (allenai); the linked articles (context_articles.tar.gz) are not fetched: "
             "DRAGIN retrieves from the DPR passages (dpr-wiki)"),
    Source(
        "musique", "Iter-RetGen: evaluation (MuSiQue-Ans dev)",
        (RemoteFile("https://drive.usercontent.google.com/download?id=1tGdADlNjWFaHLeZZGShh2IRcpO6Lv24h"
                    "&export=download&confirm=t", "musique_v1.0.zip", extract="zip"),),
        questions=(("musique_ans_v1.0_dev.jsonl", "musique"),), corpus=(("musique_ans_v1.0_dev.jsonl", "musique"),),
        license="CC BY 4.0", verified=False,
        note="the authors' Google Drive file (id from StonyBrookNLP/musique download_data.sh); the direct-download "
             "address form was not checked"),
    Source(
        "dpr-wiki", "DRAGIN and ADAPT-LLM: the retrieval corpus (21M 100-word Wikipedia passages, Dec. 2018)",
        (RemoteFile("https://dl.fbaipublicfiles.com/dpr/wikipedia_split/psgs_w100.tsv.gz", "psgs_w100.tsv.gz",
                    extract="gunzip"),),
        corpus=(("psgs_w100.tsv", "dpr_tsv"),), license="CC BY-SA 3.0",
        note="facebookresearch/DPR; 13 GB unpacked (the .gz is kept until the unpacked file is complete)"),
)}
