"""Where the papers' datasets come from: one :class:`Source` per name of ``python -m data_builders.download``.

Each source is the file its authors released (or, where the authors' own copy is on the Hugging Face Hub, that
repository at a pinned revision), in the format the project's readers parse, so ``read_qa`` / ``read_corpus`` take
the downloaded files as they are. ``verified`` says whether the address was checked against a public page that
names it (hub commit listings, the authors' or other projects' download scripts) while this table was written;
none could be fetched from the machine that wrote it.

``sha256`` and ``size`` pin a file where a checksum is published (SQuAD's and HotpotQA's, in the checksum files of
TensorFlow Datasets and Hugging Face ``datasets``) or where a byte copy was checked (NQ-open dev); elsewhere they
are None and the first download records the sha256 in the manifest (later downloads are checked against it) and
prints it, so it can be pinned here. ``mirrors`` are other addresses of the same bytes, tried after the authors'
host; only addresses known to serve the very file are listed (a pinned sha256 checks them too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from data_builders.dragin_code import DRAGIN_COMMIT, DRAGIN_RAW

Extract = Literal["zip", "tgz", "gunzip"]


@dataclass(frozen=True)
class RemoteFile:
    url: str  # the authors' address, tried first (after any mirror the user names)
    save_as: str  # file name inside the source's folder (the archive's, when extracted)
    sha256: str | None = None  # pinned bytes; None: recorded at the first download
    extract: Extract | None = None  # unpacked into the source's folder after the checksum
    size: int | None = None  # published size in bytes: a body of another length is refused before it is kept
    mirrors: tuple[str, ...] = ()  # byte-identical copies elsewhere, tried in order when the authors' host fails


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
SQUAD = "https://rajpurkar.github.io/SQuAD-explorer/dataset"
# rajpurkar.github.io/SQuAD-explorer is GitHub Pages over the rajpurkar/SQuAD-explorer repository: its master branch
# holds the same files (the published sha256 below is reproduced from that repository's blobs)
SQUAD_RAW = "https://raw.githubusercontent.com/rajpurkar/SQuAD-explorer/master/dataset"
HOTPOT = "http://curtis.ml.cmu.edu/datasets/hotpot"
ADAPT_LLM_COMMIT = "68f68f8a67ecb9d20721a8db89622380312efbb2"  # tLabruna/Adapt-LLM
ADAPT_LLM_RAW = f"https://raw.githubusercontent.com/tLabruna/Adapt-LLM/{ADAPT_LLM_COMMIT}"

SOURCES: dict[str, Source] = {s.name: s for s in (
    Source(
        "popqa", "ADAPT-LLM: evaluation (14,267 questions with subject popularity s_pop)",
        (RemoteFile(f"{HF}/akariasai/PopQA/resolve/{POPQA_REVISION}/test.tsv", "test.tsv"),),
        questions=(("test.tsv", "popqa_tsv"),),
        hub={"repo_id": "akariasai/PopQA", "revision": POPQA_REVISION, "split": "test"},
        license="MIT", note="the authors' hub copy (the same rows as popQA.tsv in AlexTMallen/adaptive-retrieval)"),
    Source(
        "popqa-adapt-llm", "ADAPT-LLM: the authors' PopQA evaluation file (3,567 questions, each with its "
        "precomputed Contriever passage: --gate_context_source file)",
        # size and sha256 of the blob at the pinned commit, checked against a clone of the repository
        (RemoteFile(f"{ADAPT_LLM_RAW}/retrieve-token/generate_dataset/evaluate_format/popqa_test_test.json",
                    "popqa_test_test.json", size=3485365,
                    sha256="c50dbff9fde41aa4e50851c268f9e479257faaf1e21038afba28167060d6e9c0"),),
        questions=(("popqa_test_test.json", "adapt_llm_popqa"),), license="see the repository",
        note=f"tLabruna/Adapt-LLM at commit {ADAPT_LLM_COMMIT}"),
    Source(
        "nq-open", "ADAPT-LLM: training set (train) and an evaluation set (dev, the 'NQ test' of ODQA papers)",
        (RemoteFile(f"{NQ_RAW}/NQ-open.dev.jsonl", "NQ-open.dev.jsonl",  # checked against a byte copy
                    sha256="f15567f38099f3615f5b8a685c0aef449c11ad90d3da3735e8d1b98115b40616", size=391316),
         RemoteFile(f"{NQ_RAW}/NQ-open.train.jsonl", "NQ-open.train.jsonl")),
        questions=(("NQ-open.dev.jsonl", "nq_open"), ("NQ-open.train.jsonl", "nq_open")),
        license="CC BY-SA 3.0", note=f"google-research-datasets/natural-questions at commit {NQ_COMMIT}"),
    Source(
        "squad", "ADAPT-LLM: training set (train; its gold paragraphs are the context passages) and dev",
        # sha256 and size as published in tensorflow/datasets url_checksums/squad.txt and huggingface/datasets
        # datasets/squad/url_checksums/checksums.txt (the two agree; dmlc/gluon-nlp lists the same sizes)
        (RemoteFile(f"{SQUAD}/train-v1.1.json", "train-v1.1.json", size=30288272,
                    sha256="3527663986b8295af4f7fcdff1ba1ff3f72d07d61a20f487cb238a6ef92fd955",
                    mirrors=(f"{SQUAD_RAW}/train-v1.1.json",)),
         RemoteFile(f"{SQUAD}/dev-v1.1.json", "dev-v1.1.json", size=4854279,
                    sha256="95aa6a52d5d6a735563366753ca50492a658031da74f301ac5238b03966972c9",
                    mirrors=(f"{SQUAD_RAW}/dev-v1.1.json",))),
        questions=(("dev-v1.1.json", "squad"), ("train-v1.1.json", "squad")),
        corpus=(("dev-v1.1.json", "squad"),), license="CC BY-SA 4.0", note="the official SQuAD v1.1 files"),
    Source(
        "hotpotqa", "DRAGIN: evaluation (dev, distractor setting); Iter-RetGen: evaluation and retriever adaptation",
        # sha256 and size as published in huggingface/datasets datasets/hotpot_qa/dataset_infos.json
        # (download_checksums; dmlc/gluon-nlp url_checksums/hotpotqa.txt lists the same sizes). No byte-identical
        # mirror is known (the hub's hotpotqa/hotpot_qa holds converted files, not these): when curtis.ml.cmu.edu is
        # down, --mirror names a copy (a folder or an address), and these pins check it
        (RemoteFile(f"{HOTPOT}/hotpot_dev_distractor_v1.json", "hotpot_dev_distractor_v1.json", size=46320117,
                    sha256="4e9ecb5c8d3b719f624d66b60f8d56bf227f03914f5f0753d6fa1b359d7104ea"),
         RemoteFile(f"{HOTPOT}/hotpot_train_v1.1.json", "hotpot_train_v1.1.json", size=566426227,
                    sha256="26650cf50234ef5fb2e664ed70bbecdfd87815e6bffc257e068efea5cf7cd316")),
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
        note="facebookresearch/DPR; 13 GB unpacked (the .gz is deleted once the unpacked file is complete, unless "
             "--keep-archives)"),
    Source(
        "dragin-code", "DRAGIN: the authors' code, read but never stored in this project (their exemplars and "
        "templates for --prompt_source authors; their loop for bench/agreement_dragin.py)",
        # sha256 and size of each blob at the pinned commit, checked against a clone of the repository
        tuple(RemoteFile(f"{DRAGIN_RAW}/{name}", name, sha256=sha, size=size) for name, sha, size in (
            ("data.py", "ca221d01d5106dc065329905edec444f7fd63743c309bd2f7aaa567ad66635c1", 29694),
            ("generate.py", "c6761db6ea72ec897ba4f65edda8eaf2e5392b7e77ff6d65a2df0b7fdc7bb989", 29403),
            ("retriever.py", "b3020b9a6b14ed8fb048d295bb80ad7ea5335b27b38415c3581e3d72140bb5c0", 12785),
            ("main.py", "5bb80a43092b8e80478ea05758f534a6ee332c857cec89b9aec8f7294d424ac3", 3136),
            ("eval.py", "165b3a1da919cc4b41d6a831ebb203628f3c399ca48781b33f77192d108c6d41", 4846))),
        license="Apache-2.0", note=f"oneal2000/DRAGIN src/ at commit {DRAGIN_COMMIT}"),
)}
