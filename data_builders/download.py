"""Fetch the papers' datasets and the DPR Wikipedia passages into a local data folder, one command each.

    python -m data_builders.download popqa --output_dir data/
    python -m data_builders.download hotpotqa 2wikimultihopqa --output_dir data/
    python -m data_builders.download hotpotqa --mirror /mnt/copies/hotpotqa --output_dir data/   # a host is down
    python -m data_builders.download all --output_dir data/   # every source (psgs_w100 alone is 13 GB)
    python -m data_builders.download --list                   # names, sources, what each paper uses them for

Each source lands in ``OUT/<name>/`` as its authors released it (``data_builders/download_sources.py``: address,
mirrors, pinned sha256 and size where published, hub id and revision where the copy is a hub repository, licence).
``OUT/manifest.json`` records, per source, where every file came from, its size and sha256, the question files with
their reader format and the passage files; the readers take the folder as it is (``read_qa(OUT/hotpotqa/...)``,
``python -m data_builders.corpus --data_dir OUT``).

Every file is tried from each place in turn: the mirrors the user names (``--mirror``, or
``ADAPTIVE_RAG_DATA_MIRROR``: addresses or folders, separated by spaces), then the authors' host, then the listed
byte-identical mirrors. A place that answers with something else (an HTML page, other bytes, another size,
another sha256) is logged in one line naming it, what it sent (kept aside as ``NAME.from-HOST.bad``) and the next
place tried; when every place failed, the error lists them and how to give a copy.

Nothing half-done is ever taken for done: a file downloads to ``NAME.part`` and a rerun continues it (an HTTP
range request; a server that ignores ranges sends it again from the start), it is renamed only once complete and
its sha256 matches the pinned or recorded one, archives unpack into a temporary folder renamed when whole (the
archive is then deleted unless ``--keep_archives``: the manifest keeps its sha256), and a source enters the manifest
last. A finished source is skipped on a rerun; ``--force`` downloads it again (the old copy is replaced only by a
checked new one).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from adaptive_rag.plumbing.atomic_files import write_text_atomic
from adaptive_rag.plumbing.cli import OneLineArgumentParser, add_show_progress
from adaptive_rag.plumbing.errors import DataError
from data_builders.download_sources import SOURCES, RemoteFile, Source
from data_builders.fetching import Rejected, aside_name, fetch, folder_of, place_name, unpack, wrong_start
from data_builders.question_loader import file_hash

logger = logging.getLogger(__name__)
MANIFEST = "manifest.json"
# Places holding the release files by name, tried before the authors' hosts: addresses (https://..., file://...)
# or folders, separated by whitespace (a local copy, an air-gapped machine's share, a host that is up).
MIRROR_ENV = "ADAPTIVE_RAG_DATA_MIRROR"
HOW_TO_MIRROR = (f"give a copy with --mirror FOLDER_OR_URL (or {MIRROR_ENV}): a folder or an address holding "
                 "{name} by name")


def user_mirrors(given: Sequence[str] = ()) -> list[str]:
    """The mirrors named on the command line, then those in ``ADAPTIVE_RAG_DATA_MIRROR``."""
    return list(dict.fromkeys([*given, *os.environ.get(MIRROR_ENV, "").split()]))


def places(remote: RemoteFile, mirrors: Sequence[str] = ()) -> list[str]:
    """Where ``remote`` is tried, in order: the user's mirrors (a folder as it is, an address with the file's name
    appended), the authors' address, the listed mirrors."""
    mine = [m if folder_of(m) is not None else f"{m.rstrip('/')}/{remote.save_as}" for m in mirrors]
    return list(dict.fromkeys([*mine, remote.url, *remote.mirrors]))


def read_manifest(out: Path) -> dict:
    path = out / MANIFEST
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise DataError(f"not valid JSON ({err}); delete it to start the manifest again", source=str(path)) from err


def _sha_mismatch(part: Path, target: Path, expected: str | None, place: str, pinned: bool) -> Rejected | None:
    """A body whose sha256 is not the expected one is refused (kept aside), like any other wrong body."""
    if not expected:
        return None
    digest = file_hash(part)
    if digest == expected:
        return None
    aside = aside_name(target, place)
    part.replace(aside)
    whose = "the pinned" if pinned else "the one recorded at the first download"
    return Rejected(place, f"sha256 {digest} differs from {whose} {expected}; kept as {aside.name}")


def get_file(remote: RemoteFile, target: Path, expected: str | None, *, mirrors: Sequence[str] = (),
             show_progress: bool = True) -> str:
    """``target`` from the first place that sends the release's bytes; returns that place (its address)."""
    tried: list[Rejected] = []
    order = places(remote, mirrors)
    for i, location in enumerate(order):
        place = place_name(location)
        try:
            fetch(location, target, remote, show_progress=show_progress)
            bad = _sha_mismatch(target.with_name(target.name + ".part"), target, expected, place,
                                pinned=bool(remote.sha256))
            if bad is not None:
                raise bad
        except Rejected as rejected:
            tried.append(rejected)
            nxt = f"trying {place_name(order[i + 1])} next" if i + 1 < len(order) else "no other place to try"
            logger.warning("%s from %s: %s; %s", remote.save_as, rejected.place, rejected.what, nxt)
            continue
        target.with_name(target.name + ".part").replace(target)
        return location
    reasons = "; ".join(f"{r.place}: {r.what}" for r in tried)
    raise DataError(f"no place sent the release file ({reasons}); rerun to try again (a partial file is "
                    f"continued), or {HOW_TO_MIRROR.format(name=remote.save_as)}", source=remote.save_as)


def _usable(target: Path, remote: RemoteFile, expected: str | None) -> str | None:
    """The sha256 of a file already under the release's name when it can be kept: right start, size and (known)
    sha256. A file that cannot is moved aside, never reused (an HTML page saved by an older version, a changed
    release); None then, and when there is no file."""
    if not target.is_file():
        return None
    with target.open("rb") as f:
        what = wrong_start(f.read(1 << 16), remote)
    size = target.stat().st_size
    if what is None and remote.size is not None and size != remote.size:
        what = f"{size:,} bytes where the release has {remote.size:,}"
    digest = file_hash(target) if what is None else None
    if what is None and expected and digest != expected:
        what = f"a file whose sha256 is not the expected {expected}"
    if what is None:
        return digest
    aside = target.with_name(target.name + ".bad")
    target.replace(aside)
    logger.warning("%s: the file there is %s; moved aside as %s and downloaded again", target, what, aside.name)
    return None


def _stamp(folder: Path, remote: RemoteFile) -> Path:
    """Where an unpacked archive's record is kept: what the archive was and which files it gave."""
    return folder / f".{remote.save_as}.unpacked.json"


def _unpacked(folder: Path, remote: RemoteFile, expected: str | None) -> dict | None:
    """The record of an archive unpacked earlier whose files are all still there (its archive may be deleted)."""
    path = _stamp(folder, remote)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if expected and record.get("sha256") != expected:
        return None
    if not all((folder / rel).exists() for rel in record.get("members", [])):
        return None
    return record


def _unpack_into(archive: Path, remote: RemoteFile, folder: Path, origin: str) -> list[str]:
    """Unpack through a temporary folder, moved in whole; an unreadable archive is moved aside, so a rerun
    downloads it again."""
    tmp = folder.with_name(folder.name + ".unpack")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        unpack(archive, remote.extract or "", tmp)
    except DataError as err:
        shutil.rmtree(tmp, ignore_errors=True)
        aside = archive.with_name(archive.name + ".bad")
        archive.replace(aside)
        raise DataError(f"{err} (it came from {place_name(origin)}; kept as {aside.name}); rerun to download it "
                        f"again, or {HOW_TO_MIRROR.format(name=remote.save_as)}") from err
    members = []
    for item in sorted(tmp.iterdir()):  # an earlier, interrupted unpack's copy is replaced whole
        old = folder / item.name
        if old.is_dir():
            shutil.rmtree(old)
        item.replace(old)
        members.append(item.name)
    tmp.rmdir()
    return members


def locate(folder: Path, name: str) -> Path:
    """A file of the source by name, wherever its archive put it (archives nest their files in folders)."""
    direct = folder / name
    if direct.is_file():
        return direct
    found = sorted(p for p in folder.rglob(name) if p.is_file() and "__MACOSX" not in p.parts)
    if not found:
        raise DataError(f"no file {name} after unpacking; the release changed its layout", source=str(folder))
    return found[0]


def download_source(source: Source, out: Path, *, show_progress: bool = True, force: bool = False,
                    mirrors: Sequence[str] = (), keep_archives: bool = False) -> dict:
    """Fetch, check and unpack one source into ``out/<name>``; returns its manifest entry."""
    folder = out / source.name
    folder.mkdir(parents=True, exist_ok=True)
    recorded = read_manifest(out).get(source.name, {}).get("downloads", {})
    downloads = {}
    for remote in source.files:
        target = folder / remote.save_as
        earlier = recorded.get(remote.save_as, {})
        expected = remote.sha256 or earlier.get("sha256")
        unpacked = None if force or not remote.extract else _unpacked(folder, remote, expected)
        if unpacked is not None:  # unpacked by an earlier run of this source, which stopped at a later file
            downloads[remote.save_as] = unpacked["download"]
            continue
        digest = None if force else _usable(target, remote, expected)
        if digest is not None:
            origin = earlier.get("from", remote.url)
        else:
            if force:  # a fresh download; the old file stays until the new one has passed its checks
                target.with_name(target.name + ".part").unlink(missing_ok=True)
            origin = get_file(remote, target, expected, mirrors=mirrors, show_progress=show_progress)
            digest = expected or file_hash(target)
        if not remote.sha256:
            print(f"{source.name}/{remote.save_as}: sha256 {digest} (not pinned; recorded in the manifest, and "
                  "checked on later downloads)")
        record = {"url": remote.url, "from": origin, "bytes": target.stat().st_size, "sha256": digest,
                  "sha256_pinned": bool(remote.sha256)}
        downloads[remote.save_as] = record
        if remote.extract:
            members = _unpack_into(target, remote, folder, origin)
            if not keep_archives:
                record["deleted_after_unpacking"] = True
            write_text_atomic(_stamp(folder, remote), json.dumps({"sha256": digest, "members": members,
                                                                  "download": record}, indent=2) + "\n")
            if not keep_archives:
                target.unlink()
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


def download(names: Sequence[str], out: str | Path, *, show_progress: bool = True, force: bool = False,
             mirrors: Sequence[str] = (), keep_archives: bool = False) -> dict:
    """Every named source (``all``: each one) into ``out``; a source already in the manifest whose files are all
    there is skipped unless ``force``. ``mirrors``: places tried first (with ``ADAPTIVE_RAG_DATA_MIRROR``'s).
    Returns the manifest."""
    out = Path(out)
    wanted = list(SOURCES) if "all" in names else list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in SOURCES]
    if unknown:
        raise DataError(f"unknown source {', '.join(unknown)}; known: {', '.join(SOURCES)} or all")
    if out.exists() and not out.is_dir():
        raise DataError("not a folder", source=str(out))
    mirrors = user_mirrors(mirrors)
    for mirror in mirrors:  # a mistyped folder fails here, before anything is fetched or created
        path = folder_of(mirror)
        if path is not None and not path.is_dir():
            raise DataError(f"--mirror {mirror}: " + ("no such folder" if not path.exists() else "not a folder")
                            + " (a mirror is a folder holding the release files by name, or an address)")
    out.mkdir(parents=True, exist_ok=True)
    for name in wanted:
        done = read_manifest(out).get(name)
        if done and not force and all((out / rel).is_file() for rel in done.get("files", {})):
            print(f"{name}: already downloaded ({out / name}; --force downloads it again)")
            continue
        entry = download_source(SOURCES[name], out, show_progress=show_progress, force=force, mirrors=mirrors,
                                keep_archives=keep_archives)
        manifest = read_manifest(out)
        manifest[name] = entry
        write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=2) + "\n")
        print(f"{name}: {', '.join(rel for rel, _ in entry['questions'] + entry['corpus'])}")
    return read_manifest(out)


def describe() -> str:
    lines = []
    for s in SOURCES.values():
        where = f"hub {s.hub['repo_id']}@{s.hub['revision'][:7]} split {s.hub['split']}" if s.hub else s.files[0].url
        pinned = sum(bool(f.sha256) for f in s.files)
        mirrored = sum(bool(f.mirrors) for f in s.files)
        facts = [f"sha256 pinned for {pinned} of {len(s.files)} files" if pinned else "sha256 recorded at download",
                 *([f"{mirrored} with a mirror"] if mirrored else []),
                 *([] if s.verified else ["address unverified"])]
        lines.append(f"{s.name:16} {s.paper_use}\n{'':16} {where}\n{'':16} ({'; '.join(facts)})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="python -m data_builders.download",
                                   description="Fetch the papers' datasets into a local data folder.")
    parser.add_argument("names", nargs="*", help=f"sources: {', '.join(SOURCES)}, or all")
    parser.add_argument("--output_dir", "--out", type=Path, default=Path("data"),
                        help="the data folder (default: data)")
    parser.add_argument("--list", action="store_true", help="list the sources and exit")
    parser.add_argument("--force", action="store_true",
                        help="download again, even what the manifest says is done (a copy is replaced only by a "
                             "checked new one)")
    parser.add_argument("--mirror", action="append", default=[], metavar="FOLDER_OR_URL",
                        help="a place holding the release files by name, tried before the authors' hosts: a folder "
                             f"(or file://), or an address; repeatable; {MIRROR_ENV} adds more (space-separated)")
    parser.add_argument("--keep_archives", "--keep-archives", action="store_true",
                        help="keep .zip/.tgz/.gz files after unpacking them (default: deleted once unpacked whole; "
                             "the manifest keeps their sha256)")
    add_show_progress(parser, "--no-progress")
    args = parser.parse_args(argv)
    if args.list:
        print(describe())
        return 0
    if not args.names:
        parser.error("name at least one source, or all (--list shows them)")
    try:
        download(args.names, args.output_dir, show_progress=args.show_progress, force=args.force, mirrors=args.mirror,
                 keep_archives=args.keep_archives)
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
