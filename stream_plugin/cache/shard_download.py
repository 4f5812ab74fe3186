"""Bringing one shard's files into ``local``: download into temporaries, verify, decompress, rename.

``ShardFetcher.stage`` is the step that downloads a shard's files into temporaries and verifies them
(size, and the ``validate_hash`` digest): nothing is in place until ``place`` renames them, so a
process killed halfway leaves only temporaries, which the next holder of the shard lock removes. A
shard that fails verification is fetched again, up to the retry policy's attempts. The caller holds
the shard's lock exclusively throughout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from stream_plugin.cache.downloads import Downloader
from stream_plugin.cache.shard_files import has_size, remove_temporaries, temporary, verify_file
from stream_plugin.cache.stats import StatsGroup
from stream_plugin.errors import ShardIntegrityError
from stream_plugin.fileio import publish
from stream_plugin.format.compression import decompress_file
from stream_plugin.format.index import FileInfo, ShardEntry
from stream_plugin.redaction import get_logger
from stream_plugin.storage.base import RemoteNotFoundError

logger = get_logger(__name__)


@dataclass
class StagedShard:
    """A shard downloaded into temporaries and verified, waiting to be renamed into place."""

    moves: list[tuple[Path, Path]] = field(default_factory=list)  # (temporary, final), publish order
    drop_after: list[Path] = field(default_factory=list)  # compressed copies not kept
    downloaded: int = 0


class ShardFetcher:
    """Places verified shards of one stream in ``local``: downloaded from the remote, or (local-only)
    decompressed next to their compressed files."""

    def __init__(
        self,
        local: Path,
        downloader: Downloader | None,
        stats: StatsGroup,
        *,
        attempts: int,
        keep_zip: bool,
        validate_hash: str | None,
    ) -> None:
        """``downloader`` None: a local-only stream. ``attempts``: downloads of a shard that fails
        verification, in all."""
        self._local = local
        self._downloader = downloader
        self._stats = stats
        self._attempts = attempts
        self._keep_zip = keep_zip
        self._validate_hash = validate_hash

    def verify(self, info: FileInfo, path: Path, *, required: bool) -> None:
        """Check ``path`` against ``info``: size, then the ``validate_hash`` digest."""
        verify_file(info, path, self._validate_hash, required=required)

    def fetch(self, entry: ShardEntry) -> None:
        """Download, verify and place a shard; a shard that fails verification is fetched again."""
        attempts = self._attempts
        for attempt in range(1, attempts + 1):
            try:
                staged = self.stage(entry)
            except ShardIntegrityError as error:
                self._discard(entry)
                if attempt == attempts:
                    raise ShardIntegrityError(
                        f"shard {entry.raw_data.basename!r}: expected the files index.json describes, found a "
                        f"mismatch on each of {attempts} download(s); last: {error}. The remote copy is corrupt "
                        "or index.json is stale: re-write or re-upload the shard"
                    ) from error
                logger.warning(
                    "shard %r from %s does not match index.json on download %d of %d (%s); the remote may have "
                    "changed since the index was read: downloading it again",
                    entry.raw_data.basename, self._remote, attempt, attempts, error,
                )
                self._stats.record_retry()
                continue
            except BaseException:
                remove_temporaries(self._local, entry)
                raise
            # Counted before it is placed: a reader may see the shard, finish and read the statistics
            # before this thread runs again (the bytes came from the remote either way).
            self._stats.record_download(staged.downloaded)
            self._place(staged)
            return

    def stage(self, entry: ShardEntry) -> StagedShard:
        """Download the shard's files into temporaries and verify them (decompressed and verified again
        where the index stores them compressed); nothing is renamed into place yet."""
        staged = StagedShard()
        for raw, stored in entry.file_pairs():
            self._stage_pair(entry, raw, stored, staged)
        return staged

    @property
    def _remote(self) -> str:
        assert self._downloader is not None, "only a stream with a remote downloads"
        return self._downloader.remote

    def _stage_pair(self, entry: ShardEntry, raw: FileInfo, stored: FileInfo | None, staged: StagedShard) -> None:
        raw_final = self._local / raw.basename
        raw_temporary = temporary(raw_final)
        if stored is None:
            staged.downloaded += self._fetch_verified(raw, raw_temporary)
            staged.moves.append((raw_temporary, raw_final))
            return
        zip_final = self._local / stored.basename
        zip_source = zip_final
        # A compressed copy kept earlier (keep_zip) was verified when placed: decompress it, no download.
        if not has_size(zip_final, stored.bytes):
            zip_source = temporary(zip_final)
            staged.downloaded += self._fetch_verified(stored, zip_source)
        assert entry.compression is not None, "an entry with zip_data names its compression"
        decompress_file(
            entry.compression, zip_source, raw_temporary, source=str(zip_final), expected_size=raw.bytes
        )
        self.verify(raw, raw_temporary, required=False)
        if self._keep_zip:
            if zip_source != zip_final:
                staged.moves.append((zip_source, zip_final))  # placed before the raw file
        else:
            staged.drop_after.append(zip_source)
        staged.moves.append((raw_temporary, raw_final))

    def _fetch_verified(self, info: FileInfo, destination: Path) -> int:
        assert self._downloader is not None, "only a stream with a remote downloads"
        self._downloader.download(info.basename, destination)
        self.verify(info, destination, required=True)
        return info.bytes

    def _discard(self, entry: ShardEntry) -> None:
        """Remove every temporary and any compressed local copy of this shard: the next attempt starts clean."""
        remove_temporaries(self._local, entry)
        for _, stored in entry.file_pairs():
            if stored is not None:
                (self._local / stored.basename).unlink(missing_ok=True)

    def _place(self, staged: StagedShard) -> None:
        for path, final in staged.moves:
            publish(path, final)
        for path in staged.drop_after:
            path.unlink(missing_ok=True)

    def decompress_in_place(self, entry: ShardEntry, stream: str) -> None:
        """Local-only stream: decompress missing raw files next to their compressed files (kept: the
        only copy). ``stream`` names the folder in messages."""
        for raw, stored in entry.file_pairs():
            raw_final = self._local / raw.basename
            if has_size(raw_final, raw.bytes):
                continue
            if stored is None or not (self._local / stored.basename).is_file():
                raise self._missing_locally(raw, stored, stream)
            raw_temporary = temporary(raw_final)
            try:
                decompress_file(
                    entry.compression or "",
                    self._local / stored.basename,
                    raw_temporary,
                    source=str(self._local / stored.basename),
                    expected_size=raw.bytes,
                )
                self.verify(raw, raw_temporary, required=False)
            except BaseException:
                raw_temporary.unlink(missing_ok=True)
                raise
            publish(raw_temporary, raw_final)

    def _missing_locally(self, raw: FileInfo, stored: FileInfo | None, stream: str) -> Exception:
        path = self._local / raw.basename
        if path.is_file():
            return ShardIntegrityError(
                f"{path}: expected {raw.bytes} bytes (from index.json), found {path.stat().st_size} in the "
                "local-only stream; the file was changed after the index was written: re-write the dataset"
            )
        alternative = f" or {self._local / stored.basename}" if stored is not None else ""
        return RemoteNotFoundError(
            f"{path}: expected the shard file{alternative} in the local-only stream {stream!r}, "
            "found none; point local at the dataset folder, or pass remote= to download it"
        )


__all__ = ["ShardFetcher", "StagedShard"]
