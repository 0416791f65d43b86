"""Fetch the papers' datasets and the DPR Wikipedia passages into a local data folder, one command each.

    python -m data_builders.download popqa --out data/
    python -m data_builders.download hotpotqa 2wikimultihopqa --out data/
    python -m data_builders.download all --out data/          # every source (psgs_w100 alone is 13 GB)
    python -m data_builders.download --list                   # names, sources, what each paper uses them for

Each source lands in ``OUT/<name>/`` as its authors released it (``data_builders/download_sources.py``: address,
hub id and revision where the copy is a hub repository, licence). ``OUT/manifest.json`` records, per source, the
addresses, hub id, split and revision, every file's size and sha256, the question files with their reader format
and the passage files; the readers take the folder as it is (``read_qa(OUT/hotpotqa/...)``, ``python -m
data_builders.corpus --data OUT``).

Nothing half-done is ever taken for done: a file downloads to ``NAME.part`` and a rerun continues it (an HTTP
range request; a server that ignores ranges sends it again from the start), it is renamed only once complete and
its sha256 matches the pinned or recorded one, archives unpack into a temporary folder renamed when whole, and a
source enters the manifest last. A finished source is skipped on a rerun. ``ADAPTIVE_RAG_DATA_MIRROR=URL`` fetches
every file by its name from a mirror folder instead (the manifest still records the release address).
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path

from tqdm.auto import tqdm

from adaptive_rag.plumbing.atomic_files import write_text_atomic
from adaptive_rag.plumbing.cli import OneLineArgumentParser
from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.progress import bar_options
from data_builders.download_sources import SOURCES, Source
from data_builders.question_loader import file_hash

logger = logging.getLogger(__name__)
MANIFEST = "manifest.json"
CHUNK = 1 << 20
# A folder URL holding the release files by name (a local mirror, an air-gapped copy): fetched from there instead.
MIRROR_ENV = "ADAPTIVE_RAG_DATA_MIRROR"


def source_url(url: str, save_as: str) -> str:
    mirror = os.environ.get(MIRROR_ENV)
    return f"{mirror.rstrip('/')}/{save_as}" if mirror else url


def read_manifest(out: Path) -> dict:
    path = out / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise DataError(f"not valid JSON ({err}); delete it to start the manifest again", source=str(path)) from err


def fetch(url: str, target: Path, *, show_progress: bool = True, timeout: float = 60.0) -> None:
    """Download ``url`` to ``target`` through ``target.part``, continuing a partial file with a range request."""
    part = target.with_name(target.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "adaptive-rag-download"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # the range starts at the end: the partial file is the whole file
            part.replace(target)
            return
        raise DataError(f"HTTP {err.code} {err.reason}", source=url) from err
    except (urllib.error.URLError, OSError) as err:
        raise DataError(f"cannot reach it ({getattr(err, 'reason', err)}); rerun to continue where it stopped",
                        source=url) from err
    with response:
        resumed = have and getattr(response, "status", 200) == 206
        if have and not resumed:
            logger.warning("%s: the server ignored the range request; downloading it again from the start", url)
            have = 0
        length = response.headers.get("Content-Length")
        total = have + int(length) if length else None
        bar = tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=target.name,
                   **bar_options(disable=not show_progress))
        with part.open("ab" if resumed else "wb") as f:
            for block in iter(lambda: response.read(CHUNK), b""):
                f.write(block)
                bar.update(len(block))
        bar.close()
    if total is not None and part.stat().st_size != total:
        raise DataError(f"incomplete: {part.stat().st_size} of {total} bytes; rerun to continue", source=url)
    part.replace(target)


def _check(path: Path, expected: str | None, url: str) -> str:
    digest = file_hash(path)
    if expected and digest != expected:
        bad = path.with_name(path.name + ".bad")
        path.replace(bad)
        raise DataError(f"sha256 {digest} differs from the expected {expected} (kept as {bad.name}); the source "
                        "changed or the download is corrupt", source=url)
    return digest


def _unpack(archive: Path, kind: str, folder: Path) -> None:
    """Unpack into ``folder`` through a temporary folder; members that would land outside it are refused."""
    tmp = folder.with_name(folder.name + ".unpack")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    if kind == "zip":
        with zipfile.ZipFile(archive) as zf:
            for member in zf.namelist():
                if member.startswith(("/", "\\")) or ".." in Path(member).parts:
                    raise DataError(f"member {member!r} points outside the folder", source=str(archive))
            zf.extractall(tmp)
    elif kind == "tgz":
        with tarfile.open(archive) as tf:
            tf.extractall(tmp, filter="data")  # the data filter refuses absolute paths, links out, devices
    elif kind == "gunzip":
        name = archive.name.removesuffix(".gz")
        with gzip.open(archive, "rb") as src, (tmp / name).open("wb") as dst:
            shutil.copyfileobj(src, dst, CHUNK)
    for item in tmp.iterdir():  # an earlier, interrupted unpack's copy is replaced whole
        old = folder / item.name
        if old.is_dir():
            shutil.rmtree(old)
        item.replace(old)
    tmp.rmdir()


def locate(folder: Path, name: str) -> Path:
    """A file of the source by name, wherever its archive put it (archives nest their files in folders)."""
    direct = folder / name
    if direct.is_file():
        return direct
    found = sorted(p for p in folder.rglob(name) if p.is_file() and "__MACOSX" not in p.parts)
    if not found:
        raise DataError(f"no file {name} after unpacking; the release changed its layout", source=str(folder))
    return found[0]


def download_source(source: Source, out: Path, *, show_progress: bool = True) -> dict:
    """Fetch, check and unpack one source into ``out/<name>``; returns its manifest entry."""
    folder = out / source.name
    folder.mkdir(parents=True, exist_ok=True)
    recorded = read_manifest(out).get(source.name, {}).get("downloads", {})
    downloads = {}
    for remote in source.files:
        target = folder / remote.save_as
        expected = remote.sha256 or recorded.get(remote.save_as, {}).get("sha256")
        if not target.is_file():
            fetch(source_url(remote.url, remote.save_as), target, show_progress=show_progress)
        digest = _check(target, expected, remote.url)
        downloads[remote.save_as] = {"url": remote.url, "bytes": target.stat().st_size, "sha256": digest,
                                     "sha256_pinned": bool(remote.sha256)}
        if remote.extract:
            _unpack(target, remote.extract, folder)
    questions = [[str(locate(folder, n).relative_to(out)), fmt] for n, fmt in source.questions]
    corpus = [[str(locate(folder, n).relative_to(out)), fmt] for n, fmt in source.corpus]
    files = {rel: {"format": fmt, "bytes": (out / rel).stat().st_size} for rel, fmt in questions + corpus}
    return {
        "paper_use": source.paper_use, "license": source.license, "note": source.note,
        "verified_address": source.verified, **({"hub": source.hub} if source.hub else {}),
        "downloads": downloads,
        "questions": questions, "corpus": corpus, "files": files,
        "completed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def download(names: Sequence[str], out: str | Path, *, show_progress: bool = True, force: bool = False) -> dict:
    """Every named source (``all``: each one) into ``out``; a source already in the manifest whose files are all
    there is skipped unless ``force``. Returns the manifest."""
    out = Path(out)
    wanted = list(SOURCES) if "all" in names else list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in SOURCES]
    if unknown:
        raise DataError(f"unknown source {', '.join(unknown)}; known: {', '.join(SOURCES)} or all")
    if out.exists() and not out.is_dir():
        raise DataError("not a folder", source=str(out))
    out.mkdir(parents=True, exist_ok=True)
    for name in wanted:
        done = read_manifest(out).get(name)
        if done and not force and all((out / rel).is_file() for rel in done.get("files", {})):
            print(f"{name}: already downloaded ({out / name})")
            continue
        entry = download_source(SOURCES[name], out, show_progress=show_progress)
        manifest = read_manifest(out)
        manifest[name] = entry
        write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")
        print(f"{name}: {', '.join(rel for rel, _ in entry['questions'] + entry['corpus'])}")
    return read_manifest(out)


def describe() -> str:
    lines = []
    for s in SOURCES.values():
        where = f"hub {s.hub['repo_id']}@{s.hub['revision'][:7]} split {s.hub['split']}" if s.hub else s.files[0].url
        lines.append(f"{s.name:16} {s.paper_use}\n{'':16} {where}" + ("" if s.verified else "  (address unverified)"))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="python -m data_builders.download",
                                   description="Fetch the papers' datasets into a local data folder.")
    parser.add_argument("names", nargs="*", help=f"sources: {', '.join(SOURCES)}, or all")
    parser.add_argument("--out", type=Path, default=Path("data"), help="the data folder (default: data)")
    parser.add_argument("--list", action="store_true", help="list the sources and exit")
    parser.add_argument("--force", action="store_true", help="download again what the manifest says is done")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.list:
        print(describe())
        return 0
    if not args.names:
        parser.error("name at least one source, or all (--list shows them)")
    try:
        download(args.names, args.out, show_progress=not args.no_progress, force=args.force)
    except DataError as err:
        parser.exit(2, f"error: {err}\n")
    except KeyboardInterrupt:
        parser.exit(130, "interrupted: the partial file is kept as NAME.part; rerun the same command to continue\n")
    return 0


def cli() -> int:
    """The console script (pyproject.toml) and ``python -m`` run this."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return main()


if __name__ == "__main__":
    sys.exit(cli())
