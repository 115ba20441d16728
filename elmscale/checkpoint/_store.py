"""Files of a checkpoint: atomic writes, checksums and manifests, on any fsspec file system.

A checkpoint is a folder (a local path or an fsspec URL that the client and the workers
share). Each stage owns a sub-folder holding its pieces and, written last, ``manifest.json``:
the stage's fingerprint, the checksum and size of every piece, and the small values needed
to rebuild its result. A stage whose manifest is absent is not complete. Every file is
written under a temporary name and renamed, so a process killed mid-write leaves no file
under a final name that holds part of its data; a file damaged afterwards is found by its
checksum when read.

A :class:`Store` holds only the URL, so it is small and picklable: the workers write and read
the N-row pieces themselves, and only the URL, file names and checksums cross the network.
"""

import hashlib
import json
import os
import posixpath
import uuid

MANIFEST = "manifest.json"
#: The format of the files; a checkpoint written in another one is refused.
FORMAT = 1


class CheckpointError(ValueError):
    """A checkpoint cannot be used for this fit."""


class CheckpointMismatchError(CheckpointError):
    """A stage of the checkpoint was computed from other data or other parameters."""


class CheckpointCorruptError(CheckpointError):
    """A file of the checkpoint is damaged or truncated (its checksum does not match)."""


def digest(data):
    """The checksum of a bytes-like object (BLAKE2b, 128 bits, hex)."""
    return hashlib.blake2b(memoryview(data).cast("B"), digest_size=16).hexdigest()


class Store:
    """The checkpoint folder at ``url`` (a local path or an fsspec URL)."""

    def __init__(self, url):
        url = os.fspath(url)
        if "://" not in url:  # a local path means the same folder to workers in another cwd
            url = os.path.abspath(url)
        self.url = url.rstrip("/") or "/"
        self._fs = None

    def __getstate__(self):
        return {"url": self.url, "_fs": None}

    @property
    def fs(self):
        if self._fs is None:
            import fsspec

            self._fs, self._root = fsspec.core.url_to_fs(self.url)
        return self._fs

    def path(self, *parts):
        """The file system path of ``parts`` under the checkpoint folder."""
        self.fs  # noqa: B018 - resolves the root
        return posixpath.join(self._root, *parts)

    def where(self, *parts):
        """``parts`` under the checkpoint's URL, as error messages name a file."""
        return "/".join([self.url, *parts])

    def write(self, relpath, data):
        """Write ``data`` (bytes) to ``relpath`` atomically; returns ``[checksum, size]``."""
        path = self.path(relpath)
        self.fs.makedirs(posixpath.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{uuid.uuid4().hex}"
        with self.fs.open(tmp, "wb") as f:
            f.write(data)
        self.fs.mv(tmp, path)
        return [digest(data), len(data)]

    def read(self, relpath, expected=None):
        """The bytes of ``relpath``, checked against ``expected = [checksum, size]``."""
        path = self.path(relpath)
        try:
            with self.fs.open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            raise CheckpointCorruptError(
                f"checkpoint file {self.where(relpath)} is missing; delete its stage folder "
                "to compute the stage again"
            ) from None
        if expected is not None and [digest(data), len(data)] != list(expected):
            raise CheckpointCorruptError(
                f"checkpoint file {self.where(relpath)} is corrupt or truncated: {len(data)} "
                f"bytes whose checksum does not match the {expected[1]} bytes written; delete "
                f"{self.where(posixpath.dirname(relpath))} to compute the stage again"
            )
        return data

    def listdir(self, relpath):
        """The names in folder ``relpath`` (empty if it does not exist)."""
        path = self.path(relpath)
        if not self.fs.exists(path):
            return []
        return [posixpath.basename(p.rstrip("/")) for p in self.fs.ls(path, detail=False)]

    def remove(self, relpath):
        """Delete ``relpath`` (a file or a folder) if it exists."""
        path = self.path(relpath)
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)

    # -- manifests -------------------------------------------------------------------------
    def read_manifest(self, stage):
        """The manifest of ``stage`` as a dict, None when the stage is not complete."""
        relpath = posixpath.join(stage, MANIFEST)
        if not self.fs.exists(self.path(relpath)):
            return None
        data = self.read(relpath)
        try:
            manifest = json.loads(data)
            body = {k: v for k, v in manifest.items() if k != "checksum"}
            ok = manifest["checksum"] == digest(_canonical(body))
        except (ValueError, KeyError, TypeError, AttributeError):
            ok = False
        if not ok:
            raise CheckpointCorruptError(
                f"checkpoint file {self.where(relpath)} is corrupt or truncated; delete "
                f"{self.where(stage)} to compute the stage again"
            )
        if manifest.get("format") != FORMAT:
            raise CheckpointMismatchError(
                f"checkpoint {self.where(stage)} has format {manifest.get('format')!r}, this "
                f"elmscale reads format {FORMAT}; use another checkpoint folder"
            )
        return manifest

    def write_manifest(self, stage, manifest):
        """Write ``stage``'s manifest (last, atomically: the stage is then complete)."""
        body = {"format": FORMAT, **manifest}
        body["checksum"] = digest(_canonical(body))
        self.write(posixpath.join(stage, MANIFEST), _canonical(body))


def _canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
