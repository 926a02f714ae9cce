"""`fenceline logs copy`: every stored stream from one store into another, resumable and
idempotent. Each stream continues from the length the target already holds, so a second run
copies only what was appended since (run it again after switching stores), and an interrupted
run loses nothing: every piece is committed as it lands."""

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlmodel import Session

from app.logs.stores.base import LogConflict, LogGap, LogStore
from app.logs.stores.file import FileLogStore

PIECE = 1024 * 1024  # bytes per append (and per commit) into the target


@dataclass
class CopyReport:
    streams: int = 0  # streams looked at
    copied_bytes: int = 0
    copied_streams: int = 0
    conflicts: list[str] = field(default_factory=list)  # keys whose target differs: left as they are


def _pieces(chunks: Iterator[bytes], size: int = PIECE) -> Iterator[bytes]:
    buffer = bytearray()
    for chunk in chunks:
        buffer += chunk
        while len(buffer) >= size:
            yield bytes(buffer[:size])
            del buffer[:size]
    if buffer:
        yield bytes(buffer)


def copy_logs(source: LogStore, target: LogStore, engine: Engine,
              progress: Callable[[CopyReport, int], None] | None = None) -> CopyReport:
    """Copy every stream of `source` into `target`. A stream whose target already holds more
    than the source, or other bytes where they overlap, is a conflict: reported, never
    overwritten. A completed copy off a file store with no conflict leaves a marker there, which
    makes the copy's target the default store of a PostgreSQL installation (app/logs/stores/__init__.py).
    `progress(report, streams in all)` is called after each stream."""
    report = CopyReport()
    keys = list(source.keys())  # listed first, to say how far the copy is
    for key in keys:
        report.streams += 1
        with Session(engine) as session:
            held, total = target.size(key, session=session) or 0, source.size(key, session=session) or 0
        if held > total:
            report.conflicts.append(key)
            continue
        position = held
        for piece in _pieces(source.read(key, held, total)):
            with Session(engine) as session:
                try:
                    position = target.append(key, position, piece, session=session)
                except (LogConflict, LogGap):  # another writer got there with other bytes
                    report.conflicts.append(key)
                    break
                session.commit()
        report.copied_bytes += position - held
        report.copied_streams += position > held
        if progress is not None:
            progress(report, len(keys))
    if isinstance(source, FileLogStore) and not report.conflicts:
        source.mark_moved(target.name)
    return report
