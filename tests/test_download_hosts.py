"""Downloads against hosts that misbehave, offline: a local HTTP server plays the authors' host and its mirrors
(an HTML quota page, wrong bytes, another size, a host that is down), and folders play a user's copy."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import logging
import tarfile
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from adaptive_rag.plumbing.errors import DataError
from data_builders import download as dl
from data_builders import fetching
from data_builders.download_sources import SOURCES
from data_builders.readers import read_corpus, read_qa

HOTPOT = [{"_id": "h1", "question": "Which city is older?", "answer": "Lima", "type": "comparison", "level": "hard",
           "supporting_facts": [["Lima", 0]], "context": [["Lima", ["Lima was founded in 1535."]]]}]
QUOTA_PAGE = (b"<!DOCTYPE html><html><head><title>Google Drive - Quota exceeded</title></head>"
              b"<body>Too many users have viewed or downloaded this file recently.</body></html>")


class Handler(SimpleHTTPRequestHandler):
    """Static files; ``html`` names paths answered with a quota page (200, text/html), as Google Drive does."""

    html: set[str] = set()
    requests: list[str] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        type(self).requests.append(self.path)
        if self.path in self.html:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(QUOTA_PAGE)))
            self.end_headers()
            self.wfile.write(QUOTA_PAGE)
            return
        super().do_GET()


@pytest.fixture()
def www(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    Handler.html, Handler.requests = set(), []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _point(monkeypatch, name: str, **changes) -> None:
    """Replace every file of one source with ``changes`` (url may use {name} for the file name)."""
    source = SOURCES[name]
    files = []
    for f in source.files:
        fields = {k: (v.format(name=f.save_as) if isinstance(v, str) else v) for k, v in changes.items()}
        if "mirrors" in fields:
            fields["mirrors"] = tuple(m.format(name=f.save_as) for m in fields["mirrors"])
        files.append(dataclasses.replace(f, **fields))
    monkeypatch.setitem(SOURCES, name, dataclasses.replace(source, files=tuple(files)))


def _hotpot_files(folder: Path) -> bytes:
    folder.mkdir(parents=True, exist_ok=True)
    data = json.dumps(HOTPOT).encode()
    for name in ("hotpot_dev_distractor_v1.json", "hotpot_train_v1.1.json"):
        (folder / name).write_bytes(data)
    return data


def test_an_html_page_is_never_kept_under_the_file_name_and_the_next_mirror_is_tried(www, tmp_path, monkeypatch,
                                                                                    caplog):
    root, base = www
    data = _hotpot_files(root / "mirror")
    Handler.html = {"/drive/hotpot_dev_distractor_v1.json", "/drive/hotpot_train_v1.1.json"}
    _point(monkeypatch, "hotpotqa", url=f"{base}/drive/{{name}}", mirrors=(f"{base}/mirror/{{name}}",),
           sha256=None, size=len(data))
    out = tmp_path / "data"
    with caplog.at_level(logging.WARNING, logger="data_builders.download"):
        manifest = dl.download(["hotpotqa"], out, show_progress=False)
    folder = out / "hotpotqa"
    assert (folder / "hotpot_dev_distractor_v1.json").read_bytes() == data
    aside = folder / f"hotpot_dev_distractor_v1.json.from-127.0.0.1_{base.rsplit(':', 1)[1]}.bad"
    assert aside.read_bytes() == QUOTA_PAGE  # kept to read, beside the file, not under its name
    # the line names the host, what came back and the next place tried
    line = next(r.getMessage() for r in caplog.records if "hotpot_dev_distractor_v1.json from" in r.getMessage())
    assert "127.0.0.1" in line and "an HTML page ('Google Drive - Quota exceeded')" in line and "trying" in line
    assert manifest["hotpotqa"]["downloads"]["hotpot_dev_distractor_v1.json"]["from"].startswith(f"{base}/mirror/")
    assert len(read_qa(folder / "hotpot_dev_distractor_v1.json")) == 1


def test_when_every_place_fails_the_error_lists_them_and_how_to_give_a_copy(www, tmp_path, monkeypatch, capsys):
    root, base = www
    (root / "hotpot_dev_distractor_v1.json").write_bytes(b"[" + b" " * 10)  # the right start, the wrong size
    Handler.html = {"/drive/hotpot_dev_distractor_v1.json"}
    _point(monkeypatch, "hotpotqa", url=f"{base}/drive/{{name}}", mirrors=(f"{base}/{{name}}",), size=99,
           sha256=None)
    with pytest.raises(SystemExit) as exit_:
        dl.main(["hotpotqa", "--out", str(tmp_path / "data"), "--no-progress"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert "an HTML page" in err and "11 bytes where the release has 99" in err
    assert "--mirror FOLDER_OR_URL" in err and "hotpot_dev_distractor_v1.json by name" in err
    folder = tmp_path / "data" / "hotpotqa"
    assert not (folder / "hotpot_dev_distractor_v1.json").exists()
    assert "hotpotqa" not in dl.read_manifest(tmp_path / "data")


def test_wrong_magic_bytes_are_refused_before_unpacking(www, tmp_path, monkeypatch):
    root, base = www
    (root / "data_ids_april7.zip").write_bytes(b"\x00\x01 not a zip at all")
    _point(monkeypatch, "2wikimultihopqa", url=f"{base}/{{name}}", mirrors=())
    with pytest.raises(DataError, match=r"not a zip archive \(it starts b'\\x00\\x01 not a'\)"):
        dl.download(["2wikimultihopqa"], tmp_path / "data", show_progress=False)
    assert not (tmp_path / "data" / "2wikimultihopqa" / "data_ids_april7.zip").exists()


def test_a_broken_archive_is_moved_aside_so_a_rerun_downloads_it_again(www, tmp_path, monkeypatch):
    root, base = www
    (root / "data_ids_april7.zip").write_bytes(b"PK\x03\x04" + b"\x00" * 40)  # a zip's start, then nothing
    _point(monkeypatch, "2wikimultihopqa", url=f"{base}/{{name}}", mirrors=())
    with pytest.raises(DataError, match="not a readable zip archive .*came from 127.0.0.1.*rerun to download it"):
        dl.download(["2wikimultihopqa"], tmp_path / "data", show_progress=False)
    folder = tmp_path / "data" / "2wikimultihopqa"
    assert (folder / "data_ids_april7.zip.bad").is_file() and not (folder / "data_ids_april7.zip").exists()


def test_an_html_page_left_under_the_name_by_an_older_version_is_moved_aside(www, tmp_path, monkeypatch):
    root, base = www
    data = _hotpot_files(root)
    _point(monkeypatch, "hotpotqa", url=f"{base}/{{name}}", mirrors=(), sha256=None, size=None)
    folder = tmp_path / "data" / "hotpotqa"
    folder.mkdir(parents=True)
    (folder / "hotpot_dev_distractor_v1.json").write_bytes(QUOTA_PAGE)
    dl.download(["hotpotqa"], tmp_path / "data", show_progress=False)
    assert (folder / "hotpot_dev_distractor_v1.json").read_bytes() == data
    assert (folder / "hotpot_dev_distractor_v1.json.bad").read_bytes() == QUOTA_PAGE


@pytest.mark.parametrize("form", ["path", "file_url", "data_folder"])
def test_a_mirror_may_be_a_folder(tmp_path, monkeypatch, form, capsys):
    """The authors' host is down; the user's copy is a folder (a path, a file:// address, or the data folder of a
    download made elsewhere, which holds NAME/file)."""
    copy = tmp_path / "copy"
    data = _hotpot_files(copy / "hotpotqa" if form == "data_folder" else copy)
    _point(monkeypatch, "hotpotqa", url="http://127.0.0.1:9/{name}", mirrors=(), sha256=None, size=len(data))
    mirror = copy.as_uri() if form == "file_url" else str(copy)
    assert dl.main(["hotpotqa", "--out", str(tmp_path / "data"), "--mirror", mirror, "--no-progress"]) == 0
    manifest = dl.read_manifest(tmp_path / "data")
    record = manifest["hotpotqa"]["downloads"]["hotpot_dev_distractor_v1.json"]
    assert record["from"] == mirror and record["url"] == "http://127.0.0.1:9/hotpot_dev_distractor_v1.json"
    assert (tmp_path / "data" / "hotpotqa" / "hotpot_train_v1.1.json").read_bytes() == data
    assert "sha256 " + dl.file_hash(copy.rglob("hotpot_train_v1.1.json").__next__()) in capsys.readouterr().out


def test_the_mirror_environment_variable_takes_several_places(www, tmp_path, monkeypatch):
    root, base = www
    data = _hotpot_files(root / "up")
    _point(monkeypatch, "hotpotqa", url="http://127.0.0.1:9/{name}", mirrors=(), sha256=None, size=None)
    monkeypatch.setenv(dl.MIRROR_ENV, f"{tmp_path / 'empty_share'}/ {base}/up")
    (tmp_path / "empty_share").mkdir()
    dl.download(["hotpotqa"], tmp_path / "data", show_progress=False)
    assert (tmp_path / "data" / "hotpotqa" / "hotpot_dev_distractor_v1.json").read_bytes() == data


def test_a_mistyped_mirror_folder_ends_in_one_line_before_anything_is_made(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        dl.main(["hotpotqa", "--out", str(tmp_path / "data"), "--mirror", str(tmp_path / "nope")])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "nope: no such folder" in err
    assert not (tmp_path / "data").exists()


def test_force_downloads_again_and_keeps_the_old_copy_until_the_new_one_passes(www, tmp_path, monkeypatch):
    root, base = www
    _hotpot_files(root)
    _point(monkeypatch, "hotpotqa", url=f"{base}/{{name}}", mirrors=(), sha256=None, size=None)
    out = tmp_path / "data"
    dl.download(["hotpotqa"], out, show_progress=False)
    Handler.requests = []
    dl.download(["hotpotqa"], out, show_progress=False)
    assert Handler.requests == []  # done: nothing fetched
    dl.download(["hotpotqa"], out, show_progress=False, force=True)
    assert sorted(Handler.requests) == ["/hotpot_dev_distractor_v1.json", "/hotpot_train_v1.1.json"]
    # a forced download whose new bytes fail leaves the good copy in place
    good = (out / "hotpotqa" / "hotpot_dev_distractor_v1.json").read_bytes()
    (root / "hotpot_dev_distractor_v1.json").write_bytes(QUOTA_PAGE)
    with pytest.raises(DataError, match="an HTML page"):
        dl.download(["hotpotqa"], out, show_progress=False, force=True)
    assert (out / "hotpotqa" / "hotpot_dev_distractor_v1.json").read_bytes() == good


def _tgz(path: Path, members: dict[str, bytes]) -> None:
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))


IIRC = json.dumps([{"title": "Lima", "text": "", "links": [], "questions": [
    {"qid": "i1", "question": "When was Lima founded?",
     "answer": {"type": "span", "answer_spans": [{"text": "1535", "passage": "main"}]}}]}]).encode()


@pytest.mark.parametrize("has_filter", [True, False])
def test_tar_archives_unpack_with_or_without_tarfile_filters(www, tmp_path, monkeypatch, has_filter):
    """Python 3.10.0-3.10.11 and 3.11.0-3.11.3 have no ``filter=``: the same checks are made by hand there."""
    root, base = www
    _tgz(root / "iirc_train_dev.tgz", {"iirc_train_dev/dev.json": IIRC})
    if not has_filter:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
        real = tarfile.TarFile.extractall

        def old_extractall(self, path=".", members=None, *, numeric_owner=False, **kwargs):
            assert not kwargs, "filter= does not exist on this Python"
            return real(self, path, members, numeric_owner=numeric_owner)

        monkeypatch.setattr(tarfile.TarFile, "extractall", old_extractall)
    _point(monkeypatch, "iirc", url=f"{base}/{{name}}", mirrors=())
    manifest = dl.download(["iirc"], tmp_path / "data", show_progress=False)
    assert len(read_qa(tmp_path / "data" / manifest["iirc"]["questions"][0][0])) == 1


def test_without_tar_filters_members_that_point_outside_are_refused(tmp_path, monkeypatch):
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    _tgz(tmp_path / "evil.tgz", {"../outside.json": b"{}"})
    (tmp_path / "dest").mkdir()
    with pytest.raises(DataError, match="points outside the folder"):
        fetching.unpack(tmp_path / "evil.tgz", "tgz", tmp_path / "dest")
    assert not (tmp_path / "outside.json").exists()
    with tarfile.open(tmp_path / "link.tgz", "w:gz") as tf:
        info = tarfile.TarInfo("link")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(info)
    with pytest.raises(DataError, match="a link or a device"):
        fetching.unpack(tmp_path / "link.tgz", "tgz", tmp_path / "dest")


def test_the_gz_is_deleted_once_unpacked_unless_kept_and_a_rerun_does_not_fetch_it_again(www, tmp_path,
                                                                                          monkeypatch):
    root, base = www
    tsv = "id\ttext\ttitle\n1\tAaron is a prophet.\tAaron\n"
    (root / "psgs_w100.tsv.gz").write_bytes(gzip.compress(tsv.encode()))
    _point(monkeypatch, "dpr-wiki", url=f"{base}/{{name}}", mirrors=())
    out = tmp_path / "data"
    manifest = dl.download(["dpr-wiki"], out, show_progress=False)
    folder = out / "dpr-wiki"
    assert (folder / "psgs_w100.tsv").read_text() == tsv and not (folder / "psgs_w100.tsv.gz").exists()
    record = manifest["dpr-wiki"]["downloads"]["psgs_w100.tsv.gz"]
    assert record["deleted_after_unpacking"] and record["sha256"] == dl.file_hash(root / "psgs_w100.tsv.gz")
    assert len(read_corpus(folder / "psgs_w100.tsv", "dpr_tsv")) == 1
    # an interrupted source (no manifest entry) does not fetch or unpack the deleted archive again
    (out / "manifest.json").unlink()
    Handler.requests = []
    dl.download(["dpr-wiki"], out, show_progress=False)
    assert Handler.requests == []
    dl.download(["dpr-wiki"], out, show_progress=False, force=True, keep_archives=True)
    assert (folder / "psgs_w100.tsv.gz").is_file() and Handler.requests == ["/psgs_w100.tsv.gz"]


def test_zip_members_that_point_outside_are_refused(tmp_path):
    with zipfile.ZipFile(tmp_path / "evil.zip", "w") as zf:
        zf.writestr("../../outside.json", "{}")
    (tmp_path / "dest").mkdir()
    with pytest.raises(DataError, match="points outside the folder"):
        fetching.unpack(tmp_path / "evil.zip", "zip", tmp_path / "dest")


def test_the_pins_are_well_formed_and_every_file_without_one_says_why():
    """A pin is 64 hex digits with the published size beside it; SQuAD's and HotpotQA's are published ones."""
    for source in SOURCES.values():
        for f in source.files:
            if f.sha256 is not None:
                assert len(f.sha256) == 64 and int(f.sha256, 16) >= 0 and f.size, f.save_as
            for mirror in f.mirrors:
                assert mirror.startswith("https://") and mirror.endswith(f.save_as), mirror
    for name in ("squad", "hotpotqa"):
        assert all(f.sha256 and f.size for f in SOURCES[name].files), name
    assert "sha256 pinned for 2 of 2 files" in dl.describe()


@pytest.mark.parametrize(("name", "head", "what"), [
    ("x.json", b"  \n[{\"a\": 1}]", None), ("x.json", b"\xef\xbb\xbf{}", None), ("x.jsonl", b"{}\n", None),
    ("x.json", b"<!doctype HTML><title>Sign in</title>", "an HTML page ('Sign in')"),
    ("x.tsv", b"<html><body>captive portal</body></html>", "an HTML page"),
    ("x.json", b"", "an empty body"), ("x.jsonl", b"[1]", "not JSON Lines"),
])
def test_what_a_body_is(name, head, what):
    remote = dataclasses.replace(SOURCES["popqa"].files[0], save_as=name)
    found = fetching.wrong_start(head, remote)
    assert (found is None) if what is None else (found is not None and found.startswith(what))
