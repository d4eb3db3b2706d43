"""JSONL backend, Zstandard encoding (spec ``persistence.md`` §4.4, checklist §8.7 and §8.8).

Frames are built with the ``zstandard`` library or byte by byte from RFC 8878's layout; files are real
files under ``tmp_path``. Tests named after a checklist item carry ``# spec 8.7 #<n>`` / ``# spec 8.8``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import zstandard

from agentlog.errors import PersistenceError, SessionPersistenceCorruptionError, StorageAccessError
from agentlog.kernel.jsoncodec import dumps
from agentlog.persistence.jsonl._zstdframes import decompress_frame, decompress_torn_frame
from agentlog.persistence.jsonl.backend import JsonlBackend, TornMarker, scan_zstd_frames

from .test_jsonl import (
    CWD,
    HEADER,
    META,
    chunk,
    closed_turn,
    closers,
    ev,
    fail_fsync,
    open_turn,
    path_of,
    place,
    seqs,
    streamed_turn,
    text,
)

MAGIC = bytes.fromhex("28b52ffd")


def make(tmp_path: Path, **options: Any) -> JsonlBackend:
    options.setdefault("compression", "zstd")
    return JsonlBackend(tmp_path / "root", **options)


def frame(data: bytes, **options: Any) -> bytes:
    options.setdefault("write_checksum", True)
    return zstandard.ZstdCompressor(level=3, **options).compress(data)


def frames_of(path: Path) -> list[bytes]:
    data = path.read_bytes()
    scan = scan_zstd_frames(data)
    assert scan.torn_start is None
    return [data[start:end] for start, end in scan.frames]


def plain(frame_bytes: bytes) -> bytes:
    return zstandard.ZstdDecompressor().decompressobj().decompress(frame_bytes)


def raw_block(payload: bytes, last: bool) -> bytes:
    header_value = (len(payload) << 3) | (0 << 1) | int(last)
    return header_value.to_bytes(3, "little") + payload


def rle_block(byte: int, size: int, last: bool) -> bytes:
    header_value = (size << 3) | (1 << 1) | int(last)
    return header_value.to_bytes(3, "little") + bytes([byte])


# --- Zstandard frame structure (§8.7 #229, #235, #236) -----------------------------------------------------


def test_zstd__scans_concatenated_checksummed_frames_and_honors_a_frame_limit() -> None:  # spec 8.7 #229
    parts = [frame(b"a\n"), frame(b"bb\n" * 50), frame(b"ccc\n")]
    data = b"".join(parts)
    scan = scan_zstd_frames(data)
    ends = [sum(map(len, parts[: i + 1])) for i in range(3)]
    assert scan.frames == [(0, ends[0]), (ends[0], ends[1]), (ends[1], ends[2])] and scan.torn_start is None
    assert scan_zstd_frames(data, 1).frames == [(0, ends[0])]
    assert all(part[4] & 0x04 for part in parts)  # the content-checksum flag is set on every frame
    assert all(part[:4] == MAGIC for part in parts)
    empty = scan_zstd_frames(b"")
    assert empty.frames == [] and empty.torn_start is None


def test_zstd__distinguishes_incomplete_frame_regions_from_invalid_complete_structure() -> None:  # spec 8.7 #235
    whole = MAGIC + bytes([0x20, 0x05]) + raw_block(b"hello", True)  # single segment, 1-byte FCS
    assert scan_zstd_frames(whole).frames == [(0, len(whole))]
    for cut in range(1, len(whole)):  # partial magic, descriptor, header, block header, payload
        scan = scan_zstd_frames(whole[:cut])
        assert scan.frames == [] and scan.torn_start == 0, cut
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid frame magic at byte 0"):
        scan_zstd_frames(b"\x00" * 8)
    skippable = (0x184D2A50).to_bytes(4, "little") + (0).to_bytes(4, "little")
    with pytest.raises(SessionPersistenceCorruptionError, match="invalid frame magic at byte 0"):
        scan_zstd_frames(skippable)
    for reserved in (0x08, 0x10):
        with pytest.raises(SessionPersistenceCorruptionError, match="reserved frame-header bit at byte 4"):
            scan_zstd_frames(MAGIC + bytes([0x20 | reserved, 0x05]) + raw_block(b"hello", True))
    reserved_block = ((5 << 3) | (3 << 1) | 1).to_bytes(3, "little") + b"hello"
    with pytest.raises(SessionPersistenceCorruptionError, match="reserved block type at byte 6") as info:
        scan_zstd_frames(MAGIC + bytes([0x20, 0x05]) + reserved_block)
    assert info.value.offset == 6
    second = len(whole)
    with pytest.raises(SessionPersistenceCorruptionError, match=f"invalid frame magic at byte {second}"):
        scan_zstd_frames(whole + b"JUNK")


@pytest.mark.parametrize(
    ("descriptor", "header_bytes"),
    [
        (0x00, 1),  # window byte, no dictionary id, no content size
        (0x21, 1 + 1),  # single segment: 1-byte dictionary id, 1-byte content size
        (0x42, 1 + 2 + 2),  # window byte, 2-byte dictionary id, 2-byte content size
        (0x83, 1 + 4 + 4),  # window byte, 4-byte dictionary id, 4-byte content size
        (0xE3, 4 + 8),  # single segment, 4-byte dictionary id, 8-byte content size
    ],
)
def test_zstd__covers_standard_header_variants_rle_blocks_multiple_blocks_and_checksums(
    descriptor: int, header_bytes: int
) -> None:  # spec 8.7 #236
    blocks = raw_block(b"abc", False) + rle_block(ord("x"), 10, True)  # RLE payload is one byte
    whole = MAGIC + bytes([descriptor]) + b"\x00" * header_bytes + blocks
    assert scan_zstd_frames(whole).frames == [(0, len(whole))]
    assert scan_zstd_frames(whole[:-1]).torn_start == 0
    checked = MAGIC + bytes([descriptor | 0x04]) + b"\x00" * header_bytes + blocks + b"\x01\x02\x03\x04"
    assert scan_zstd_frames(checked).frames == [(0, len(checked))]
    missing_checksum_byte = scan_zstd_frames(checked[:-1])
    assert missing_checksum_byte.frames == [] and missing_checksum_byte.torn_start == 0


def test_zstd__decodes_hand_built_frames_without_content_size_or_checksum() -> None:
    no_size = MAGIC + bytes([0x00, 0x00]) + raw_block(b"abc", False) + rle_block(ord("x"), 10, True)
    assert decompress_frame(no_size, 0, 1000) == b"abc" + b"x" * 10
    with pytest.raises(SessionPersistenceCorruptionError, match="decompresses to more than 12 bytes"):
        decompress_frame(no_size, 0, 12)


# --- default Zstandard encoding (§8.7 #237-#252) ------------------------------------------------------------


def test_zstd__writes_jsonl_zstd_by_default_with_one_header_frame_and_one_first_batch_frame(
    tmp_path: Path,
) -> None:  # spec 8.7 #237
    backend = JsonlBackend(tmp_path / "root")
    events = closed_turn()
    backend.append_batch(META, events, False)
    path = path_of(backend)
    assert path.name == "session.jsonl.zstd" and not path.with_name("session.jsonl").exists()
    assert path.read_bytes()[:4] == MAGIC
    header_frame, batch_frame = frames_of(path)
    assert plain(header_frame) == HEADER + b"\n"
    stored = backend.load_stored("s1")
    assert stored is not None and stored.events == events
    none_root = JsonlBackend(tmp_path / "plain", compression="none")
    none_root.append_batch(META, events, False)
    assert plain(header_frame) + plain(batch_frame) == path_of(none_root).read_bytes()


def test_zstd__read_raw_decodes_the_compressed_artifact_back_to_the_original_jsonl_text(
    tmp_path: Path,
) -> None:  # spec 8.7 #238
    backend = make(tmp_path)
    plain_backend = JsonlBackend(tmp_path / "plain", compression="none")
    for target in (backend, plain_backend):
        target.append_batch(META, streamed_turn(), False)
        target.append_batch(META, streamed_turn(10, 2), True)
    raw = backend.read_raw("s1")
    assert raw is not None and raw.filename == "session.jsonl"
    assert raw.content == path_of(plain_backend).read_text()
    assert raw.content.count("text-chunks") == 2


def test_zstd__read_raw_rejects_a_present_artifact_that_carries_no_frame(tmp_path: Path) -> None:  # spec 8.7 #239
    backend = make(tmp_path)
    place(backend, b"")
    with pytest.raises(SessionPersistenceCorruptionError, match="empty or header-less Zstandard session log"):
        backend.read_raw("s1")


def test_zstd__resolves_the_defaults_without_any_options(tmp_path: Path) -> None:  # spec 8.7 #240
    backend = JsonlBackend(tmp_path / "root")
    assert backend.compression == "zstd" and backend.pack_chunks is True
    backend.append_batch(META, streamed_turn(), False)
    _, batch = frames_of(path_of(backend))
    assert b'"type":"text-chunks"' in plain(batch)


def test_zstd__appends_one_frame_per_durable_batch_without_rewriting_prior_bytes(
    tmp_path: Path,
) -> None:  # spec 8.7 #241
    backend = make(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    before = path.read_bytes()
    backend.append_batch(META, closers(8), True)
    after = path.read_bytes()
    assert after.startswith(before)
    assert len(frames_of(path)) == 3
    assert plain(frames_of(path)[2]) == b"".join(dumps(e) + b"\n" for e in closers(8))


def test_zstd__lists_from_a_multi_chunk_header_frame_without_decoding_a_corrupt_event_frame(
    tmp_path: Path,
) -> None:  # spec 8.7 #242
    backend = make(tmp_path)
    cwd = "/" + os.urandom(12_000).hex()  # a 24 KB cwd: the header frame spans several 8 KiB reads
    meta = {**META, "cwd": cwd}
    backend.append_batch(meta, closed_turn(), False)
    path = path_of(backend, meta)
    header_frame, batch = frames_of(path)
    assert len(header_frame) > 8192
    path.write_bytes(header_frame + batch[:-1] + bytes([batch[-1] ^ 0xFF]))  # break the event frame's checksum
    (listing,) = backend.list_sessions()
    assert listing.ok and listing.header is not None and listing.header["cwd"] == cwd
    with pytest.raises(SessionPersistenceCorruptionError, match=r"frame at byte \d+ failed validation"):
        backend.load_stored("s1")
    assert backend.locate(meta) == listing.location


def torn_injection(first_seq: int) -> bytes:
    """The spec's zstd injector: a checksummed frame with one 300,000-character chunk line, torn."""
    records = [
        ev("turn/start", first_seq, {"turn": 2}),
        ev("step/start", first_seq + 1, {"turn": 2, "step": 1}),
        chunk(first_seq + 2, "z" * 300_000, turn=2),
    ]
    whole = frame(text(*records))
    return whole[: len(whole) - 8]  # inside the final block: its last bytes and the checksum are missing


def test_zstd__preserves_complete_records_from_a_torn_frame_and_reencodes_them_with_closers(
    tmp_path: Path,
) -> None:  # spec 8.7 #246
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    path = path_of(backend)
    committed = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(torn_injection(10))
    stored = backend.load_stored("s1")
    assert stored is not None
    assert seqs(stored.events) == list(range(12))
    marker = stored.torn_marker
    assert isinstance(marker, TornMarker) and marker.truncate_to == len(committed)
    assert [e["type"] for e in marker.recovered_events] == ["turn/start", "step/start"]
    assert marker.recovered_events == stored.events[10:] and marker.recovered_events[0] is not stored.events[10]
    backend.commit_repair(stored.meta, marker, closers(12, turn=2))
    repaired = path.read_bytes()
    assert repaired.startswith(committed)
    scan = scan_zstd_frames(repaired)
    assert scan.torn_start is None and len(scan.frames) == 3
    assert plain(repaired[len(committed) :]) == text(*stored.events[10:], *closers(12, turn=2))
    final = backend.load_stored("s1")
    assert final is not None and final.torn_marker is None and seqs(final.events) == list(range(14))


def test_zstd__drops_a_frame_torn_in_its_header_before_it_produced_plaintext(tmp_path: Path) -> None:  # spec 8.7 #247
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    path = path_of(backend)
    committed = path.read_bytes()
    with open(path, "ab") as handle:
        handle.write(frame(text(ev("turn/start", 10)))[:6])
    stored = backend.load_stored("s1")
    assert stored is not None and stored.torn_marker == TornMarker(len(committed), [])
    backend.commit_repair(stored.meta, stored.torn_marker, [])
    assert path.read_bytes() == committed


def test_zstd__recovers_complete_events_when_eof_tears_only_the_final_checksum(tmp_path: Path) -> None:  # spec 8.7 #248
    backend = make(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    committed = path.stat().st_size
    with open(path, "ab") as handle:
        handle.write(frame(text(*closers(8)))[:-1])
    stored = backend.load_stored("s1")
    assert stored is not None and seqs(stored.events) == list(range(10))
    assert stored.torn_marker == TornMarker(committed, closers(8))


def test_zstd__rejects_a_complete_frame_containing_a_torn_jsonl_record(tmp_path: Path) -> None:  # spec 8.7 #249
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    path = path_of(backend)
    tail_start = path.stat().st_size
    with open(path, "ab") as handle:
        handle.write(frame(dumps(ev("turn/start", 10)) + b"\n" + b'{"type":"step/start","seq":11'))
    with pytest.raises(SessionPersistenceCorruptionError, match="complete frame contains a torn JSONL record") as info:
        backend.load_stored("s1")
    assert info.value.offset == tail_start
    for defect in (b"{bad json}\n", dumps(ev("turn/start", 12)) + b"\n"):  # a defect or a gap, no turn/end
        place(backend, path.read_bytes()[:tail_start] + frame(defect))
        with pytest.raises(SessionPersistenceCorruptionError, match="complete frame contains a torn JSONL record"):
            backend.load_stored("s1")


def test_zstd__rolls_back_a_checksummed_append_frame_when_fsync_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:  # spec 8.7 #250
    backend = make(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    before = path.read_bytes()
    fail_fsync(monkeypatch, lambda n: n == 1)
    with pytest.raises(StorageAccessError, match="injected fsync failure"):
        backend.append_batch(META, closers(8), True)
    assert path.read_bytes() == before
    monkeypatch.undo()
    backend.append_batch(META, closers(8), True)
    stored = backend.load_stored("s1")
    assert stored is not None and seqs(stored.events) == list(range(10)) and len(frames_of(path)) == 3


def test_zstd__reports_empty_incomplete_and_non_header_artifacts_and_rejects_malformed_header_frames(
    tmp_path: Path,
) -> None:  # spec 8.7 #251 (the reference skips the first three; the Python contract reports them)
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    place(backend, b"", session_id="empty")
    place(backend, frame(HEADER + b"\n")[:10], session_id="incomplete")
    place(backend, frame(b'{"type":"note"}\n'), session_id="non-header")
    place(backend, frame(HEADER + b"\n" + HEADER + b"\n"), session_id="multi-line")
    listings = {item.id: item for item in backend.list_sessions()}
    assert listings["s1"].ok
    assert "empty or header-less Zstandard session log" in (listings["empty"].error_message or "")
    assert "empty or header-less Zstandard session log" in (listings["incomplete"].error_message or "")
    assert "first line is not a session header" in (listings["non-header"].error_message or "")
    assert "first frame is not exactly one header line" in (listings["multi-line"].error_message or "")
    assert all(listings[name].error_code == "SESSION_CORRUPT" for name in listings if name != "s1")
    with pytest.raises(SessionPersistenceCorruptionError, match="first frame is not exactly one header line"):
        backend.load_stored("multi-line")


def test_zstd__rejects_missing_empty_and_checksum_corrupt_header_frames_on_targeted_reads(
    tmp_path: Path,
) -> None:  # spec 8.7 #252
    backend = make(tmp_path)
    batch = frame(text(*closed_turn()))
    place(backend, b"")
    with pytest.raises(SessionPersistenceCorruptionError, match="empty or header-less Zstandard session log"):
        backend.load_stored("s1")
    place(backend, frame(b"") + batch)
    with pytest.raises(SessionPersistenceCorruptionError, match="first frame is not exactly one header line"):
        backend.load_stored("s1")
    corrupt_header = bytearray(frame(HEADER + b"\n"))
    corrupt_header[-2] ^= 0xFF
    place(backend, bytes(corrupt_header) + batch)
    with pytest.raises(SessionPersistenceCorruptionError, match="frame at byte 0 failed validation"):
        backend.load_stored("s1")
    (listing,) = backend.list_sessions()
    assert listing.error_code == "SESSION_CORRUPT"
    assert "header frame failed validation" in (listing.error_message or "")


# --- encoding selection (§8.7 #253-#255) -------------------------------------------------------------------


def test_zstd__rejects_roots_owned_by_the_opposite_encoding_in_both_directions(tmp_path: Path) -> None:  # spec 8.7 #253
    JsonlBackend(tmp_path / "raw", compression="none").append_batch(META, closed_turn(), False)
    JsonlBackend(tmp_path / "zst", compression="zstd").append_batch(META, closed_turn(), False)
    wrong_zstd = JsonlBackend(tmp_path / "raw", compression="zstd")
    with pytest.raises(PersistenceError, match=r'uses \.jsonl, but this backend is configured for compression "zstd"'):
        wrong_zstd.load_stored("s1")
    with pytest.raises(PersistenceError, match='configured for compression "zstd"'):
        wrong_zstd.list_sessions()
    wrong_none = JsonlBackend(tmp_path / "zst", compression="none")
    with pytest.raises(
        PersistenceError, match=r'uses \.jsonl\.zstd, but this backend is configured for compression "none"'
    ):
        wrong_none.load_stored("other-id")  # the root preflight refuses every operation on a foreign root


def test_zstd__rechecks_targeted_artifacts_and_listing_after_an_initially_empty_root(
    tmp_path: Path,
) -> None:  # spec 8.7 #254
    backend = make(tmp_path)
    assert backend.load_stored("s1") is None  # preflight passes (and is cached) on the empty root
    JsonlBackend(tmp_path / "root", compression="none").append_batch(META, closed_turn(), False)
    for operation in (lambda: backend.load_stored("s1"), lambda: backend.read_revision("s1"), backend.list_sessions):
        with pytest.raises(PersistenceError, match=r"uses \.jsonl, but"):
            operation()


def test_zstd__refuses_materialization_when_an_opposite_artifact_appears_after_create(
    tmp_path: Path,
) -> None:  # spec 8.7 #255
    backend = make(tmp_path)
    assert backend.load_stored("s1") is None
    JsonlBackend(tmp_path / "root", compression="none").append_batch(META, closed_turn(), False)
    with pytest.raises(PersistenceError, match=r"uses \.jsonl, but"):
        backend.append_batch(META, closed_turn(), False)
    assert not path_of(backend).exists()


# --- §8.8 compat ----------------------------------------------------------------------------------------------


def test_zstd__round_trips_concatenated_checksummed_frames_through_the_library_api(
    tmp_path: Path,
) -> None:  # spec 8.8 #256
    backend = make(tmp_path)
    backend.append_batch(META, open_turn(), False)
    backend.append_batch(META, closers(8), True)
    data = path_of(backend).read_bytes()
    scan = scan_zstd_frames(data)
    assert [data[start : start + 4].hex() for start, _ in scan.frames] == ["28b52ffd"] * 3
    library = b"".join(plain(data[start:end]) for start, end in scan.frames)
    ours = b"".join(decompress_frame(data[start:end], start, 1 << 20) for start, end in scan.frames)
    assert library == ours and library.startswith(HEADER + b"\n")
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    assert reader.read() == library  # the library decodes the concatenation as one stream, too
    last_start, last_end = scan.frames[-1]
    torn = data[: last_end - 1]
    torn_scan = scan_zstd_frames(torn)
    assert torn_scan.torn_start == last_start and len(torn_scan.frames) == 2
    assert decompress_torn_frame(torn[last_start:], last_start, 1 << 20) == plain(data[last_start:last_end])


# --- beyond the checklist --------------------------------------------------------------------------------------


def test_zstd__truncating_the_last_frame_at_every_offset_loads_the_committed_prefix(tmp_path: Path) -> None:
    backend = make(tmp_path)
    committed_events = closed_turn()
    backend.append_batch(META, committed_events, False)
    tail_events = [
        ev("turn/start", 10, {"turn": 2}),
        ev("step/start", 11, {"turn": 2, "step": 1}),
        *(chunk(12 + k, f"w{k} ", 2) for k in range(4)),
        ev("tool/call", 16, {"callId": "c", "args": "x" * 40}),
    ]
    backend.append_batch(META, tail_events, True)
    path = path_of(backend)
    full = path.read_bytes()
    last_start, last_end = scan_zstd_frames(full).frames[-1]
    everything = committed_events + tail_events
    recovered_counts = []
    for size in range(last_end - 1, last_start - 1, -1):
        os.truncate(path, size)
        stored = backend.load_stored("s1")
        assert stored is not None, size
        assert stored.events == everything[: len(stored.events)], size
        assert len(stored.events) >= len(committed_events), size
        if size == last_start:
            assert stored.torn_marker is None
        else:
            marker = stored.torn_marker
            assert isinstance(marker, TornMarker) and marker.truncate_to == last_start, size
            assert marker.recovered_events == stored.events[len(committed_events) :], size
        recovered_counts.append(len(stored.events))
    assert recovered_counts[0] == len(everything)  # torn only in the checksum: every record recovered
    assert recovered_counts == sorted(recovered_counts, reverse=True)
    path.write_bytes(full[: last_start + (last_end - last_start) // 2])
    stored = backend.load_stored("s1")
    assert stored is not None
    backend.commit_repair(stored.meta, stored.torn_marker, [])
    repaired = backend.load_stored("s1")
    assert repaired is not None and repaired.torn_marker is None and repaired.events == stored.events
    assert path.read_bytes()[:last_start] == full[:last_start]


def test_zstd__flipping_any_byte_of_an_earlier_frame_is_a_typed_corruption_and_changes_nothing(tmp_path: Path) -> None:
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    backend.append_batch(META, streamed_turn(10, 2), True)
    backend.append_batch(META, closed_turn(3, 20), True)
    path = path_of(backend)
    full = path.read_bytes()
    frames = scan_zstd_frames(full).frames
    assert len(frames) == 4
    header_end = frames[0][1]
    for position in range(frames[-1][0]):  # every byte of every complete, non-last frame
        damaged = bytearray(full)
        damaged[position] ^= 0xFF
        path.write_bytes(damaged)
        with pytest.raises(SessionPersistenceCorruptionError) as info:
            backend.load_stored("s1")
        assert info.value.location == str(path), position
        (listing,) = backend.list_sessions()  # listing decodes the header frame only, and never raises
        if position < header_end:
            assert listing.error_code == "SESSION_CORRUPT", position
        assert path.read_bytes() == bytes(damaged), position


def test_zstd__a_torn_region_followed_by_a_complete_frame_is_committed_damage(tmp_path: Path) -> None:
    backend = make(tmp_path)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    committed = path.read_bytes()
    later = frame(text(*closers(8)))
    # A frame whose raw block claims 5000 bytes: scanning it swallows the complete frame after it.
    swallowing = MAGIC + bytes([0x20, 0xFF]) + ((5000 << 3) | 1).to_bytes(3, "little")
    place(backend, committed + swallowing + b"partial payload" + later)
    with pytest.raises(SessionPersistenceCorruptionError, match="is incomplete, yet a complete frame follows"):
        backend.load_stored("s1")


def test_zstd__a_frame_decoding_beyond_max_frame_bytes_is_a_typed_corruption(tmp_path: Path) -> None:
    backend = make(tmp_path, max_frame_bytes=4096)
    backend.append_batch(META, open_turn(), False)
    path = path_of(backend)
    committed = path.read_bytes()
    big = text(ev("user/message", 8, {"text": "x" * 10_000}))
    for variant in (frame(big), frame(big, write_content_size=False)):  # declared and undeclared sizes
        place(backend, committed + variant)
        with pytest.raises(SessionPersistenceCorruptionError, match="decompresses to more than 4096 bytes") as info:
            backend.load_stored("s1")
        assert info.value.offset == len(committed) and "max_frame_bytes" in str(info.value)
    huge = frame(text(ev("user/message", 8, {"text": os.urandom(100_000).hex()})))
    place(backend, committed + huge[:-6])  # a torn frame is bounded too (its first 128 KiB block is whole)
    with pytest.raises(SessionPersistenceCorruptionError, match="decompresses to more than 4096 bytes"):
        backend.load_stored("s1")
    assert path.read_bytes() == committed + huge[:-6]


def test_zstd__fixture_concatenated_library_frames_load_to_the_expected_events(tmp_path: Path) -> None:
    backend = make(tmp_path)
    row = (
        b'{"type":"text-chunks","seq0":2,"time0":1002,"data":{"turn":1,"step":1,"index":0,"dt":[1,1],'
        b'"texts":["a","b","c"]}}\n'
    )
    content = (
        frame(HEADER + b"\n")
        + frame(b'{"type":"turn/start","seq":0,"time":1000,"data":{"turn":1}}\n', write_checksum=False)
        + frame(
            b'{"type":"step/start","seq":1,"time":1001,"data":{"turn":1,"step":1}}\n' + row, write_content_size=False
        )
        + zstandard.ZstdCompressor(level=19, write_checksum=True).compress(
            b'{"type":"step/end","seq":5,"time":1005,"data":{"turn":1,"step":1}}\n'
            b'{"type":"turn/end","seq":6,"time":1006,"data":{"turn":1,"reason":{"kind":"completed"}}}\n'
        )
    )
    place(backend, content)
    stored = backend.load_stored("s1")
    assert stored is not None and stored.torn_marker is None
    assert stored.meta == {"version": 0, "id": "s1", "createdAt": 1000, "cwd": CWD, "delegationDepth": 0}
    assert seqs(stored.events) == list(range(7))
    assert [e["data"]["chunk"]["text"] for e in stored.events[2:5]] == ["a", "b", "c"]
    assert stored.events[4] == {
        "type": "assistant/chunk",
        "seq": 4,
        "time": 1004,
        "data": {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": "c"}},
    }


def test_zstd__fixture_a_multi_block_streamed_frame_loads(tmp_path: Path) -> None:
    backend = make(tmp_path)
    events = [ev("user/message", i, {"text": os.urandom(2000).hex()}) for i in range(200)]  # ~800 KB, many blocks
    compressor = zstandard.ZstdCompressor(level=3, write_checksum=True)
    body = compressor.compressobj()
    stream = body.compress(text(*events)) + body.flush()
    assert stream[4] & 0x20 == 0  # not single-segment: carries a window descriptor
    place(backend, frame(HEADER + b"\n") + stream)
    stored = backend.load_stored("s1")
    assert stored is not None and stored.events == events


def test_zstd__read_raw_omits_a_torn_final_frame(tmp_path: Path) -> None:
    backend = make(tmp_path)
    backend.append_batch(META, closed_turn(), False)
    path = path_of(backend)
    complete = b"".join(plain(part) for part in frames_of(path))
    with open(path, "ab") as handle:
        handle.write(torn_injection(10))
    raw = backend.read_raw("s1")
    assert raw is not None and raw.content.encode() == complete
