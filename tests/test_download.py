"""The data command end to end, offline: a local HTTP server (with range requests, as the real hosts have) serves
small files written here in each source's released format and packaging; the command fetches, checks, unpacks and
records them, and the project's readers take the folder. Where the development copies of real files exist beside
the checkout, they go through the same path (skipped elsewhere)."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import tarfile
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from adaptive_rag.plumbing.errors import DataError
from data_builders import download as dl
from data_builders.corpus import find_shared_data_dir
from data_builders.download_sources import SOURCES
from data_builders.readers import read_corpus, read_qa

POPQA_HEADER = ("id subj prop obj subj_id prop_id obj_id s_aliases o_aliases s_uri o_uri s_wiki_title o_wiki_title "
                "s_pop o_pop question possible_answers").split()


class RangeHandler(SimpleHTTPRequestHandler):
    """Static files with ``Range: bytes=N-`` (206), as the real hosts answer; ``ignore_range`` plays a server
    that always sends the whole file (200)."""

    ignore_range = False
    requests: list[str] = []

    def log_message(self, *args):  # quiet test output
        pass

    def do_GET(self):
        path = Path(self.translate_path(self.path.split("?")[0]))
        type(self).requests.append(self.headers.get("Range") or "")
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = 0
        ranged = self.headers.get("Range", "")
        if ranged.startswith("bytes=") and not self.ignore_range:
            start = int(ranged[6:].rstrip("-"))
            if start >= len(data):
                self.send_error(416)
                return
            self.send_response(206)
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        self.wfile.write(data[start:])


@pytest.fixture()
def server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    RangeHandler.requests = []
    RangeHandler.ignore_range = False
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(RangeHandler, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _serve(monkeypatch, base: str, name: str, **pins) -> None:
    """Point one source's files at the local server (same file names), optionally with other pinned sha256 (a
    file whose pin is replaced loses its published size too), and without the listed mirrors."""
    source = SOURCES[name]
    files = tuple(dataclasses.replace(f, url=f"{base}/{f.save_as}", sha256=pins.get(f.save_as, f.sha256),
                                      size=None if f.save_as in pins else f.size, mirrors=())
                  for f in source.files)
    monkeypatch.setitem(SOURCES, name, dataclasses.replace(source, files=files))


# the small files written here in place of files whose real sha256 and size are pinned
UNPINNED = {name: {f.save_as: None for f in s.files} for name, s in SOURCES.items()}


def _zip(path: Path, members: dict[str, str]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)


def _tgz(path: Path, members: dict[str, str]) -> None:
    with tarfile.open(path, "w:gz") as tf:
        for name, text in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(text.encode())
            tf.addfile(info, io.BytesIO(text.encode()))


def _release_files(root: Path) -> None:
    """One or two records per source, in the released format and packaging."""
    for name in ("data.py", "generate.py", "retriever.py", "main.py", "eval.py"):  # shaped like their src/ files
        (root / name).write_text(f"# {name}\nclass HotpotQA:\n    pass\n")
    (root / "popqa_test_test.json").write_text(json.dumps({"7": {
        "question": "Who is Ann?", "possible_answers": ["a poet"], "gold_passage": "",
        "contriever_passage": "Ann Ann is a poet.", "contriever_score": "1.0", "s_pop": 3.0}}))
    popqa = [["4222362", "George Rankin", "occupation", "politician", "1", "2", "3", "[]", "[]", "u", "u", "GR", "P",
              "142", "1000", "What is George Rankin's occupation?", '["politician", "political leader"]']]
    (root / "test.tsv").write_text("\t".join(POPQA_HEADER) + "\n" + "\n".join("\t".join(r) for r in popqa) + "\n")
    (root / "NQ-open.dev.jsonl").write_text(json.dumps({"question": "who wrote hamlet", "answer": ["Shakespeare"]})
                                            + "\n")
    (root / "NQ-open.train.jsonl").write_text(json.dumps({"question": "capital of peru", "answer": ["Lima"]}) + "\n")
    squad = {"version": "1.1", "data": [{"title": "Lima", "paragraphs": [{
        "context": "Lima is the capital of Peru.",
        "qas": [{"id": "s1", "question": "What is the capital of Peru?",
                 "answers": [{"text": "Lima", "answer_start": 0}]}]}]}]}
    (root / "train-v1.1.json").write_text(json.dumps(squad))
    (root / "dev-v1.1.json").write_text(json.dumps(squad))
    hotpot = [{"_id": "h1", "question": "Which city is older?", "answer": "Lima", "type": "comparison",
               "level": "hard", "supporting_facts": [["Lima", 0]],
               "context": [["Lima", ["Lima was founded in 1535.", " It is in Peru."]], ["Cusco", ["Cusco is old."]]]}]
    (root / "hotpot_dev_distractor_v1.json").write_text(json.dumps(hotpot))
    (root / "hotpot_train_v1.1.json").write_text(json.dumps(hotpot))
    two = [{"_id": "w1", "type": "compositional", "question": "Who is the mother of the director of X?",
            "context": [["X", ["X is a film by Y."]], ["Y", ["Y's mother is Z."]]],
            "supporting_facts": [["X", 0], ["Y", 0]], "evidences": [["X", "director", "Y"]], "answer": "Z"}]
    _zip(root / "data_ids_april7.zip", {"dev.json": json.dumps(two), "train.json": json.dumps(two),
                                        "id_aliases.json": "{}"})
    strategy = [{"qid": "q1", "term": "Lima", "description": "city", "question": "Is Lima in Peru?", "answer": True,
                 "facts": ["Lima is the capital of Peru."], "decomposition": ["Where is Lima?"]}]
    _zip(root / "strategyqa_dataset.zip", {"strategyqa_train.json": json.dumps(strategy)})
    iirc = [{"title": "Lima", "text": "Lima ...", "links": [], "questions": [
        {"qid": "i1", "question": "When was Lima founded?",
         "answer": {"type": "span", "answer_spans": [{"text": "1535", "passage": "main"}]}},
        {"qid": "i2", "question": "Is it big?", "answer": {"type": "binary", "answer_value": "yes"}},
        {"qid": "i3", "question": "Unanswerable?", "answer": {"type": "none"}}]}]
    _tgz(root / "iirc_train_dev.tgz", {"iirc_train_dev/dev.json": json.dumps(iirc),
                                       "iirc_train_dev/train.json": json.dumps(iirc)})
    musique = {"id": "2hop__1_2", "question": "Who founded the capital of Peru?", "answer": "Pizarro",
               "answer_aliases": ["Francisco Pizarro"], "answerable": True,
               "question_decomposition": [{"id": 1, "question": "capital of Peru?", "answer": "Lima",
                                           "paragraph_support_idx": 0}],
               "paragraphs": [{"idx": 0, "title": "Lima", "paragraph_text": "Pizarro founded Lima.",
                               "is_supporting": True},
                              {"idx": 1, "title": "Cusco", "paragraph_text": "Cusco is old.", "is_supporting": False}]}
    _zip(root / "musique_v1.0.zip", {"data/musique_ans_v1.0_dev.jsonl": json.dumps(musique) + "\n",
                                     "__MACOSX/data/._musique_ans_v1.0_dev.jsonl": "junk"})
    tsv = "id\ttext\ttitle\n1\tAaron is a prophet.\tAaron\n2\tLima is a city.\tLima\n"
    (root / "psgs_w100.tsv.gz").write_bytes(gzip.compress(tsv.encode()))


# what the readers must find in each source's folder: (questions per question file, passages per corpus file)
EXPECTED = {"popqa": ([1], []), "nq-open": ([1, 1], []), "squad": ([1, 1], [1]), "hotpotqa": ([1, 1], [2]),
            "2wikimultihopqa": ([1], [2]), "strategyqa": ([1], []), "iirc": ([2], []), "musique": ([1], [2]),
            "dpr-wiki": ([], [2]), "dragin-code": ([], []), "popqa-adapt-llm": ([1], [])}


def test_every_source_downloads_and_its_files_read(server, tmp_path, monkeypatch):
    root, base = server
    _release_files(root)
    for name in SOURCES:  # pinned checksums are the real files': these small ones are checked as recorded
        _serve(monkeypatch, base, name, **{f.save_as: None for f in SOURCES[name].files})
    assert set(EXPECTED) == set(SOURCES)
    out = tmp_path / "data"
    manifest = dl.download(["all"], out, show_progress=False)
    for name, (n_questions, n_passages) in EXPECTED.items():
        entry = manifest[name]
        assert [len(read_qa(out / rel, fmt)) for rel, fmt in entry["questions"]] == n_questions, name
        assert [len(read_corpus(out / rel, fmt)) for rel, fmt in entry["corpus"]] == n_passages, name
        for file, record in entry["downloads"].items():
            assert record["sha256"] == dl.file_hash(root / file) and record["bytes"] == (root / file).stat().st_size
    assert manifest["popqa"]["hub"] == {"repo_id": "akariasai/PopQA", "revision": dl.SOURCES["popqa"].hub["revision"],
                                        "split": "test"}
    first = read_qa(out / manifest["popqa"]["questions"][0][0], "popqa_tsv")[0]
    assert first.answers == ["politician", "political leader"] and first.metadata["popularity"] == 142
    iirc = read_qa(out / manifest["iirc"]["questions"][0][0])  # the format is detected too
    assert [(e.id, e.answers) for e in iirc] == [("i1", ["1535"]), ("i2", ["yes"])]
    assert manifest["musique"]["questions"][0][0] == "musique/data/musique_ans_v1.0_dev.jsonl"  # not __MACOSX's
    assert not list(out.rglob("*.part")) and not list(out.rglob("*.unpack"))
    # a rerun finds every source done and fetches nothing
    RangeHandler.requests = []
    dl.download(["all"], out, show_progress=False)
    assert RangeHandler.requests == []


def test_a_partial_file_is_continued_with_a_range_request(server, tmp_path, monkeypatch):
    root, base = server
    _release_files(root)
    _serve(monkeypatch, base, "hotpotqa", **UNPINNED["hotpotqa"])
    data = (root / "hotpot_dev_distractor_v1.json").read_bytes()
    folder = tmp_path / "data" / "hotpotqa"
    folder.mkdir(parents=True)
    (folder / "hotpot_dev_distractor_v1.json.part").write_bytes(data[:40])  # a kill mid-download
    dl.download(["hotpotqa"], tmp_path / "data", show_progress=False)
    assert RangeHandler.requests[0] == "bytes=40-"
    assert (folder / "hotpot_dev_distractor_v1.json").read_bytes() == data


def test_a_server_that_ignores_ranges_sends_the_whole_file_again(server, tmp_path, monkeypatch):
    root, base = server
    _release_files(root)
    RangeHandler.ignore_range = True
    folder = tmp_path / "data" / "nq-open"
    folder.mkdir(parents=True)
    (folder / "NQ-open.train.jsonl.part").write_bytes(b"garbage that is not a prefix")
    _serve(monkeypatch, base, "nq-open", **{"NQ-open.dev.jsonl": None})
    dl.download(["nq-open"], tmp_path / "data", show_progress=False)
    assert (folder / "NQ-open.train.jsonl").read_bytes() == (root / "NQ-open.train.jsonl").read_bytes()


def test_a_checksum_mismatch_is_refused_and_kept_aside(server, tmp_path, monkeypatch):
    root, base = server
    _release_files(root)
    _serve(monkeypatch, base, "nq-open", **{"NQ-open.dev.jsonl": "0" * 64})
    with pytest.raises(DataError, match="sha256 .* differs from the pinned 0000"):
        dl.download(["nq-open"], tmp_path / "data", show_progress=False)
    assert len(list((tmp_path / "data" / "nq-open").glob("NQ-open.dev.jsonl.from-127.0.0.1*.bad"))) == 1
    assert not (tmp_path / "data" / "nq-open" / "NQ-open.dev.jsonl").exists()  # never under the release's name
    assert "nq-open" not in dl.read_manifest(tmp_path / "data")  # a source enters the manifest only when whole


def test_a_recorded_checksum_binds_later_downloads(server, tmp_path, monkeypatch):
    """The first download records each file's sha256; a later one of changed bytes is refused."""
    root, base = server
    _release_files(root)
    _serve(monkeypatch, base, "squad", **UNPINNED["squad"])
    out = tmp_path / "data"
    dl.download(["squad"], out, show_progress=False)
    (out / "squad" / "dev-v1.1.json").unlink()
    (root / "dev-v1.1.json").write_text('{"version": "1.1", "data": []}')
    with pytest.raises(DataError, match="differs from the one recorded at the first download"):
        dl.download(["squad"], out, show_progress=False)


def test_command_line_mistakes_end_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        dl.main(["nope", "--out", str(tmp_path / "d")])
    assert exit_.value.code == 2 and "unknown source nope; known: popqa" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
    assert dl.main(["--list"]) == 0 and "akariasai/PopQA" in capsys.readouterr().out


def test_unreachable_host_says_rerun_and_how_to_give_a_mirror(tmp_path, monkeypatch):
    _serve(monkeypatch, "http://127.0.0.1:9", "popqa")  # the discard port: nothing listens
    with pytest.raises(DataError, match="127.0.0.1:9: cannot reach it .*rerun to try again.*--mirror FOLDER_OR_URL"):
        dl.download(["popqa"], tmp_path / "data", show_progress=False)


SHARED = find_shared_data_dir()


@pytest.mark.skipif(SHARED is None, reason="no development copies of the real files beside the checkout")
def test_real_files_go_through_the_same_path(server, tmp_path, monkeypatch):
    """NQ-open dev is a byte copy of the pinned release file (its pinned sha256 must match); SQuAD's development
    copy is half of the official dev set in the official format."""
    import shutil

    root, base = server
    shutil.copy(SHARED / "nq" / "NQ-open.dev.jsonl", root / "NQ-open.dev.jsonl")
    (root / "NQ-open.train.jsonl").write_text(json.dumps({"question": "q", "answer": ["a"]}) + "\n")
    shutil.copy(SHARED / "squad" / "dev-v1.1.json", root / "dev-v1.1.json")
    shutil.copy(SHARED / "squad" / "dev-v1.1.json", root / "train-v1.1.json")
    _serve(monkeypatch, base, "nq-open")
    _serve(monkeypatch, base, "squad", **UNPINNED["squad"])  # half of the official dev set: not the pinned bytes
    manifest = dl.download(["nq-open", "squad"], tmp_path / "data", show_progress=False)
    assert manifest["nq-open"]["downloads"]["NQ-open.dev.jsonl"]["sha256_pinned"]
    assert len(read_qa(tmp_path / "data" / "nq-open" / "NQ-open.dev.jsonl")) == 3610
    assert len(read_qa(tmp_path / "data" / "squad" / "dev-v1.1.json")) == 4961


def test_the_corpus_command_pools_a_downloaded_folder(server, tmp_path, monkeypatch):
    from data_builders.corpus import main as corpus_main
    from data_builders.readers import read_passages_jsonl

    root, base = server
    _release_files(root)
    for name in ("hotpotqa", "musique", "dpr-wiki"):
        _serve(monkeypatch, base, name, **UNPINNED[name])
    dl.download(["hotpotqa", "musique", "dpr-wiki"], tmp_path / "data", show_progress=False)
    assert corpus_main(["--data", str(tmp_path / "data"), "-o", str(tmp_path / "corpus.jsonl")]) == 0
    titles = sorted(p.title for p in read_passages_jsonl(tmp_path / "corpus.jsonl"))
    assert titles == ["Cusco", "Lima", "Lima"]  # HotpotQA and MuSiQue share "Cusco is old."; DPR is indexed apart
    with pytest.raises(SystemExit) as exit_:
        corpus_main(["--data", str(tmp_path), "-o", str(tmp_path / "c.jsonl")])
    assert exit_.value.code == 2


def test_readme_hotpotqa_sequence_runs_on_a_fresh_clone(server, tmp_path, monkeypatch):
    """README's HotpotQA sequence, read from README now, run in order in an empty folder (a fresh clone's working
    directory) with the download served from release-shaped fixtures; a tiny model and one question stand in
    for SmolLM2 and questions 400-499. The fixtures cannot have the release's pinned sha256, so they are fetched
    in-process first with the pins lifted: README's download line then finds the source done."""
    import os
    import re
    import shlex
    import subprocess
    import sys

    from conftest import tiny_llama

    from adaptive_rag.lm.models import load_tokenizer

    root, base = server
    _release_files(root)
    repo = Path(__file__).resolve().parents[1]
    readme = (repo / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
                 if "data_builders.download hotpotqa" in b and "hotpotqa_table.yaml" in b)
    clone = tmp_path / "clone"
    clone.mkdir()
    for folder in ("bench", "inference", "training", "retrieval_adapt", "data_builders"):
        (clone / folder).symlink_to(repo / folder)
    tokenizer = load_tokenizer("smollm2-135m")
    tiny_llama(len(tokenizer)).save_pretrained(tmp_path / "tiny")
    tokenizer.save_pretrained(tmp_path / "tiny")
    env = {**os.environ, "PYTHONPATH": str(repo), "HF_HUB_OFFLINE": "1", dl.MIRROR_ENV: base}
    _serve(monkeypatch, base, "hotpotqa", **UNPINNED["hotpotqa"])
    dl.download(["hotpotqa"], clone / "data", show_progress=False)
    for line in block.strip().splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[:2] == ["python", "-m"], line
        if "hotpotqa_table.yaml" in line:  # the stand-ins; everything else as README says
            argv += ["--model", str(tmp_path / "tiny"), "--start", "0", "--limit", "1", "--max_new_tokens", "4"]
        done = subprocess.run([sys.executable, *argv[1:]], cwd=clone, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, f"{line}\n{done.stderr[-2000:]}"
    assert (clone / "data" / "manifest.json").is_file()
    assert len(list((clone / "runs" / "hotpotqa" / "table").glob("*/predictions.jsonl"))) == 9
    assert (clone / "runs" / "reports" / "hotpotqa" / "results.md").is_file()
