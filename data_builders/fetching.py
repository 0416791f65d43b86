"""Getting one release file from one place, and refusing what is not it: the transport under
``python -m data_builders.download``.

A place is an address (``http(s)://``, read with a range request to continue a partial file), or a folder
(``file://`` or a path) holding the file by name. What comes back is checked before it is kept under the file's
name: an HTML page (a Google Drive quota or consent page, a captive portal's login), bytes that do not start as
the format does (a zip's ``PK``, gzip's ``1f 8b``, JSON's bracket), an empty body or one of another size than the
published one are :class:`Rejected`: the body is moved aside as ``NAME.from-HOST.bad`` and the caller tries the next
place. Archives unpack on every Python the package allows (``tarfile``'s ``filter=`` exists only from 3.12 and
patched 3.10/3.11 releases; elsewhere the same checks are made by hand).
"""

from __future__ import annotations

import gzip
import logging
import re
import shutil
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from pathlib import Path, PurePosixPath

from tqdm.auto import tqdm

from adaptive_rag.plumbing.errors import DataError
from adaptive_rag.plumbing.progress import bar_options
from data_builders.download_sources import RemoteFile

logger = logging.getLogger(__name__)
CHUNK = 1 << 20
HEAD = 1 << 16  # bytes looked at to tell what a body is, and kept aside when the body is refused at its start


class Rejected(Exception):
    """One place failed for one file: ``what`` says what came back (or why nothing did)."""

    def __init__(self, place: str, what: str):
        super().__init__(f"{place}: {what}")
        self.place, self.what = place, what


def place_name(location: str) -> str:
    """A short name for messages and for the name a refused body is kept under: the host, or the folder."""
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme in ("http", "https", "ftp"):
        return parsed.netloc or location
    return f"folder {folder_of(location) or location}"


def folder_of(location: str) -> Path | None:
    """The local path a ``file://`` address or a plain path names; None for a network address."""
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme == "file":
        return Path(urllib.request.url2pathname(parsed.path))
    if parsed.scheme in ("http", "https", "ftp"):
        return None
    return Path(location).expanduser()


def aside_name(target: Path, place: str) -> Path:
    label = re.sub(r"[^A-Za-z0-9.-]+", "_", place.removeprefix("folder ")).strip("_.")[:60] or "source"
    return target.with_name(f"{target.name}.from-{label}.bad")


def _html_title(head: bytes) -> str:
    match = re.search(rb"<title[^>]*>(.*?)</title>", head, flags=re.I | re.S)
    title = " ".join(match.group(1).decode("utf-8", "replace").split())[:80] if match else ""
    return f"an HTML page ('{title}')" if title else "an HTML page"


def wrong_start(head: bytes, remote: RemoteFile, content_type: str = "") -> str | None:
    """What the first bytes of a body are when they cannot start ``remote`` (None: they can)."""
    if not head:
        return "an empty body"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    lowered = text[:512].lower()
    if lowered.startswith((b"<!doctype html", b"<html", b"<head", b"<body", b"<script")) or (
            "html" in content_type.lower() and text[:1] == b"<"):
        return _html_title(head)
    name = remote.save_as
    if remote.extract == "zip" and not head.startswith(b"PK\x03\x04"):
        return f"not a zip archive (it starts {head[:8]!r})"
    if remote.extract in ("tgz", "gunzip") and not head.startswith(b"\x1f\x8b"):
        return f"not gzip data (it starts {head[:8]!r})"
    if name.endswith(".json") and text[:1] not in (b"{", b"["):
        return f"not JSON (it starts {text[:16]!r})"
    if name.endswith(".jsonl") and text[:1] != b"{":
        return f"not JSON Lines (it starts {text[:16]!r})"
    if "html" in content_type.lower():
        return f"an HTML page ({content_type})"
    return None


def _refuse(target: Path, place: str, what: str, body: bytes | Path) -> Rejected:
    """Keep what came back aside (never under the file's name) and say where."""
    aside = aside_name(target, place)
    if isinstance(body, Path):
        body.replace(aside)
    else:
        aside.write_bytes(body)
    return Rejected(place, f"{what}; kept as {aside.name}")


def fetch(location: str, target: Path, remote: RemoteFile, *, show_progress: bool = True,
          timeout: float = 60.0) -> None:
    """``target`` from one place, through ``target.part``; a :class:`Rejected` when it did not come."""
    folder = folder_of(location)
    if folder is not None:
        _copy(folder, target, remote, show_progress=show_progress)
    else:
        _download(location, target, remote, show_progress=show_progress, timeout=timeout)
    part = target.with_name(target.name + ".part")
    size = part.stat().st_size
    if remote.size is not None and size != remote.size:
        raise _refuse(target, place_name(location),
                      f"{size:,} bytes where the release has {remote.size:,}", part)


def _copy(path: Path, target: Path, remote: RemoteFile, *, show_progress: bool) -> None:
    """A copy from a folder: the file by name, or in a subfolder (a data folder of another download: NAME/file)."""
    place = f"folder {path}"
    if not path.is_dir():
        raise Rejected(place, "no such folder" if not path.exists() else "not a folder")
    found = [p for p in (path / remote.save_as, *sorted(path.glob(f"*/{remote.save_as}"))) if p.is_file()]
    if not found:
        raise Rejected(place, f"no file {remote.save_as} in it (nor in a subfolder)")
    source = found[0]
    with source.open("rb") as src:
        head = src.read(HEAD)
        what = wrong_start(head, remote)
        size = source.stat().st_size
        if what is None and remote.size is not None and size != remote.size:  # refused before a long copy
            what = f"{size:,} bytes where the release has {remote.size:,} (its first bytes kept)"
        if what:
            raise _refuse(target, place, f"{source} is {what}", head)
        part = target.with_name(target.name + ".part")
        bar = tqdm(total=source.stat().st_size, unit="B", unit_scale=True, desc=target.name,
                   **bar_options(disable=not show_progress))
        with part.open("wb") as dst:
            dst.write(head)
            bar.update(len(head))
            for block in iter(lambda: src.read(CHUNK), b""):
                dst.write(block)
                bar.update(len(block))
        bar.close()


def _download(url: str, target: Path, remote: RemoteFile, *, show_progress: bool, timeout: float) -> None:
    """Download ``url`` to ``target.part``, continuing a partial file with a range request."""
    place = place_name(url)
    part = target.with_name(target.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"User-Agent": "adaptive-rag-download"})
    if have:
        request.add_header("Range", f"bytes={have}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have:  # the range starts at the end: the partial file is the whole file
            return
        raise Rejected(place, f"HTTP {err.code} {err.reason}") from err
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise Rejected(place, f"cannot reach it ({getattr(err, 'reason', err)})") from err
    with response:
        content_type = response.headers.get("Content-Type", "")
        resumed = bool(have) and getattr(response, "status", 200) == 206
        if have and not resumed:
            logger.warning("%s: the server ignored the range request; downloading it again from the start", url)
            have = 0
        length = response.headers.get("Content-Length")
        total = have + int(length) if length and length.isdigit() else None
        try:
            head = b"" if resumed else response.read(HEAD)
        except OSError as err:
            raise Rejected(place, f"the connection broke ({err})") from err
        what = None if resumed else wrong_start(head, remote, content_type)
        if what is None and resumed and "html" in content_type.lower():
            what = f"an HTML page ({content_type}) for the rest of the file"
        if what is None and remote.size is not None and total is not None and total != remote.size:
            what = f"a body of {total:,} bytes where the release has {remote.size:,}"
        if what:  # refused at its start: the first bytes are kept aside to read, the rest is not fetched
            raise _refuse(target, place, what, head)
        bar = tqdm(total=total, initial=have, unit="B", unit_scale=True, desc=target.name,
                   **bar_options(disable=not show_progress))
        try:
            with part.open("ab" if resumed else "wb") as f:
                f.write(head)
                bar.update(len(head))
                for block in iter(lambda: response.read(CHUNK), b""):
                    f.write(block)
                    bar.update(len(block))
        except OSError as err:  # a dropped connection: the partial file is continued by the next try
            raise Rejected(place, f"the connection broke after {part.stat().st_size:,} bytes ({err}); the "
                                  f"partial file is kept and continued") from err
        finally:
            bar.close()
    if total is not None and part.stat().st_size != total:
        raise Rejected(place, f"incomplete: {part.stat().st_size:,} of {total:,} bytes (kept, continued next time)")


def check_members(names: list[str], archive: Path) -> None:
    for member in names:
        if member.startswith(("/", "\\")) or ".." in PurePosixPath(member.replace("\\", "/")).parts:
            raise DataError(f"member {member!r} points outside the folder", source=str(archive))


def _extract_tar(tf: tarfile.TarFile, dest: Path, archive: Path) -> None:
    if hasattr(tarfile, "data_filter"):  # 3.12+, and 3.10.12+/3.11.4+: refuses paths out, links out, devices
        tf.extractall(dest, filter="data")
        return
    members = tf.getmembers()
    check_members([m.name for m in members], archive)
    for m in members:  # a release holds files and folders only; anything else could write outside
        if not (m.isfile() or m.isdir()):
            raise DataError(f"member {m.name!r} is a link or a device, which a data release does not hold",
                            source=str(archive))
    tf.extractall(dest, members=members)  # noqa: S202 (checked above)


def unpack(archive: Path, kind: str, dest: Path) -> None:
    """Unpack ``archive`` into the empty folder ``dest``; an unreadable archive is a DataError."""
    try:
        if kind == "zip":
            with zipfile.ZipFile(archive) as zf:
                check_members(zf.namelist(), archive)
                zf.extractall(dest)
        elif kind == "tgz":
            with tarfile.open(archive) as tf:
                _extract_tar(tf, dest, archive)
        elif kind == "gunzip":
            name = archive.name.removesuffix(".gz")
            with gzip.open(archive, "rb") as src, (dest / name).open("wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
        else:
            raise DataError(f"unknown archive kind {kind!r}", source=str(archive))
    except (zipfile.BadZipFile, tarfile.TarError, gzip.BadGzipFile, EOFError, zlib_error()) as err:
        raise DataError(f"not a readable {kind} archive ({type(err).__name__}: {err})", source=str(archive)) from err


def zlib_error() -> type[Exception]:
    import zlib

    return zlib.error
