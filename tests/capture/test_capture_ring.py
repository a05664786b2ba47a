"""The shared-memory ring: sizing, zero-copy leases, leased slots never overwritten, drops, reclaim."""

from __future__ import annotations

import mmap
import multiprocessing
import os
import time

import capture_helpers
import numpy as np
import pytest
from support.wait import wait_until

from appliance.capture.errors import RingBusyError, RingError, RingFormatError, RingNotFoundError, ShmSpaceError
from appliance.capture.layout import CaptureState, RingGeometry
from appliance.capture.ring import RingReader, RingWriter
from appliance.capture.ringfile import create_ring, reclaim_stale_rings, ring_path

CTX = multiprocessing.get_context("spawn")
GEOM = RingGeometry(width=64, height=48, slots=4)


@pytest.fixture
def ring(shm_root):
    path = ring_path(shm_root, "cam0")
    owner = create_ring(path, GEOM, "cam0")
    writer = RingWriter(path)
    reader = RingReader(path)
    yield path, writer, reader
    reader.close() if reader._fd >= 0 and not reader._held else None
    writer.close()
    owner.close()


def put(writer: RingWriter, value: int) -> int:
    claim = writer.claim()
    assert claim is not None, "writer found no free slot"
    claim.array[...] = value
    return writer.publish(claim, time.monotonic(), time.time())


def test_geometry_is_page_aligned_and_sums_up():
    g = RingGeometry(width=1920, height=1080, slots=4)
    assert g.frame_bytes == 1920 * 1080 * 3
    assert g.slot_stride % 4096 == 0 and 0 <= g.slot_stride - g.frame_bytes < 4096
    assert g.total_bytes == g.header_bytes + 4 * g.slot_stride
    assert "4 slots x 1920x1080x3" in g.describe()
    with pytest.raises(ValueError, match="at least 3 slots"):
        RingGeometry(width=64, height=48, slots=2)
    with pytest.raises(ValueError, match="pixel_format"):
        RingGeometry(width=64, height=48, slots=3, pixel_format="yuv")


def test_ring_file_has_the_computed_size(ring):
    path, _, _ = ring
    assert os.path.getsize(path) == GEOM.total_bytes


def test_no_frame_yet_gives_none(ring):
    _, _, reader = ring
    assert reader.acquire_latest() is None
    assert reader.acquire_latest(after_seq=0) is None


def test_lease_is_a_zero_copy_view_on_the_slot_with_metadata(ring):
    path, writer, reader = ring
    before = time.monotonic()
    seq = put(writer, 7)
    lease = reader.acquire_latest()
    assert lease.meta.seq == seq == 1
    meta = lease.meta
    assert (meta.camera_id, meta.width, meta.height, meta.pixel_format) == ("cam0", 64, 48, "bgr")
    assert before <= lease.meta.t_mono <= time.monotonic()
    assert abs(lease.meta.t_utc - time.time()) < 60
    assert lease.array.shape == (48, 64, 3) and lease.array.dtype == np.uint8
    assert not lease.array.flags.writeable and lease.nbytes == 48 * 64 * 3
    # Change the slot's bytes through an independent mapping of the file: a view sees it, a copy would not.
    offset = lease.address - reader._header.ctypes.data
    with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as other:
        other[offset : offset + 3] = b"\x01\x02\x03"
    assert lease.array[0, 0].tolist() == [1, 2, 3]
    lease.release()


def test_after_seq_returns_only_newer_frames(ring):
    _, writer, reader = ring
    put(writer, 1)
    with reader.acquire_latest() as first:
        assert reader.acquire_latest(after_seq=first.meta.seq) is None
    put(writer, 2)
    put(writer, 3)
    with reader.acquire_latest(after_seq=1) as newest:
        assert newest.meta.seq == 3 and int(newest.array[0, 0, 0]) == 3
    assert reader.frames_skipped == 1  # frame 2 was never seen: latest wins


def test_a_leased_slot_is_never_overwritten(ring):
    _, writer, reader = ring
    put(writer, 11)
    lease = reader.acquire_latest()
    for value in range(50):
        put(writer, value)
    assert int(lease.array.min()) == int(lease.array.max()) == 11 and lease.meta.seq == 1
    lease.release()
    assert reader.acquire_latest(after_seq=1).meta.seq == 51


def test_every_free_slot_leased_drops_new_frames_and_counts_ring_full(shm_root):
    path = ring_path(shm_root, "full")
    with create_ring(path, RingGeometry(32, 16, slots=3), "full"):
        writer, reader = RingWriter(path), RingReader(path)
        put(writer, 1)
        a = reader.acquire_latest()
        put(writer, 2)
        b = reader.acquire_latest()
        put(writer, 3)  # the third slot is still free
        assert writer.claim() is None  # slot of frame 3 is latest, the other two are leased
        health = reader.health()
        assert (health.ring_full, health.drops) == (1, 1)
        a.release()
        assert writer.claim() is not None  # freed: the writer can go on
        b.release()
        reader.close()
        writer.close()


def test_unread_overwritten_frames_count_as_drops_read_ones_do_not(ring):
    _, writer, reader = ring
    for value in range(10):
        put(writer, value)
    assert reader.health().drops == 10 - GEOM.slots
    reader.acquire_latest().release()  # frame 10 read
    for value in range(GEOM.slots):
        put(writer, value)  # overwrites the three unread frames 7-9 (and leaves latest 10 until the last)
    assert reader.health().drops == 10 - GEOM.slots + GEOM.slots - 1


def test_release_is_idempotent_thread_safe_context_manager(ring):
    _, writer, reader = ring
    put(writer, 1)
    with reader.acquire_latest() as lease:
        again = reader.acquire_latest()  # the same slot leased twice by one reader
        assert reader.leases_held == 2
    assert lease.released and reader.leases_held == 1
    lease.release()
    assert reader.leases_held == 1
    again.release()
    again.release()
    assert reader.leases_held == 0


def test_close_with_a_lease_held_is_refused(ring):
    _, writer, reader = ring
    put(writer, 1)
    lease = reader.acquire_latest()
    with pytest.raises(RingError, match="still holds 1 lease"):
        reader.close()
    lease.release()
    reader.close()
    with pytest.raises(RingError, match="closed"):
        reader.acquire_latest()


def test_a_second_writer_is_refused(ring):
    path, writer, _ = ring
    with pytest.raises(RingBusyError, match=f"already has a live capture process \\(pid {os.getpid()}\\)"):
        RingWriter(path)


def test_missing_and_foreign_files_give_clear_errors(shm_root):
    with pytest.raises(RingNotFoundError, match="is the camera's capture started"):
        RingReader(ring_path(shm_root, "nope"))
    junk = shm_root / "junk.ring"
    junk.write_bytes(os.urandom(8192))
    with pytest.raises(RingFormatError, match="is not a version-1 capture ring"):
        RingReader(junk)
    junk.write_bytes(b"tiny")
    with pytest.raises(RingFormatError, match="too small"):
        RingReader(junk)
    junk.unlink()


def test_preflight_refuses_a_ring_bigger_than_free_shm_and_says_how_much(shm_root):
    st = os.statvfs(shm_root)
    free = st.f_bavail * st.f_frsize
    frame = 7680 * 4320 * 3
    geometry = RingGeometry(7680, 4320, slots=free // frame + 8)
    with pytest.raises(ShmSpaceError) as info:
        create_ring(ring_path(shm_root, "huge"), geometry, "huge")
    assert info.value.needed == geometry.total_bytes and info.value.free <= free
    message = str(info.value)
    assert f"needs {geometry.total_bytes / 2**20:.1f} MiB in {shm_root}" in message
    assert "MiB is free" in message and "--shm-size" in message and "ring_slots" in message
    assert not ring_path(shm_root, "huge").exists()


def test_writer_killed_mid_frame_leaves_no_torn_frame(ring):
    path, writer, reader = ring
    put(writer, 5)
    writer.close()
    proc = CTX.Process(target=capture_helpers.die_while_writing, args=(str(path),))
    proc.start()
    proc.join(60)
    assert proc.exitcode == -9
    slots = reader._slots
    torn = [k for k in range(GEOM.slots) if int(slots[k]["lock_seq"]) % 2]
    assert len(torn) == 1  # the dead writer's half-written slot is marked
    with reader.acquire_latest() as lease:
        assert lease.meta.seq == 1 and int(lease.array.max()) == 5  # readers still get the last whole frame
    successor = RingWriter(path)
    assert int(slots[torn[0]]["lock_seq"]) % 2 == 0 and int(slots[torn[0]]["seq"]) == 0
    assert successor.generation == 3 and put(successor, 6) == 2  # the sequence continues
    successor.close()


def test_a_crashed_owners_leftover_is_reclaimed_and_a_live_owner_is_respected(shm_root, tmp_path):
    path = ring_path(shm_root, "left")
    ready = tmp_path / "ready"
    proc = CTX.Process(target=capture_helpers.own_ring, args=(str(path), 64, 48, 4, str(ready)))
    proc.start()
    try:
        wait_until(ready.exists, 60, 0.02, "the owner process to create its ring")
        with pytest.raises(RingBusyError, match=f"owned by live process {proc.pid}"):
            create_ring(path, GEOM, "left")
    finally:
        proc.kill()  # the supervisor crashes: the file stays behind
        proc.join(60)
    assert path.exists()
    inode = path.stat().st_ino
    with create_ring(path, GEOM, "left"):  # same geometry: reused in place
        assert path.stat().st_ino == inode and RingReader(path).health().state == CaptureState.IDLE
    assert not path.exists()


def test_a_leftover_of_another_size_is_replaced(shm_root):
    path = ring_path(shm_root, "resized")
    create_ring(path, RingGeometry(32, 16, 3), "resized").close(remove=False)  # as if its owner had died
    with create_ring(path, GEOM, "resized"):
        assert os.path.getsize(path) == GEOM.total_bytes
        with RingReader(path) as reader:
            assert (reader.geometry.width, reader.geometry.slots) == (64, 4)


def test_reclaim_stale_rings_removes_only_dead_unconfigured_rings(shm_root):
    dead = ring_path(shm_root, "gone")
    create_ring(dead, GEOM, "gone").close(remove=False)
    kept = ring_path(shm_root, "kept")
    create_ring(kept, GEOM, "kept").close(remove=False)
    headless = ring_path(shm_root, "headless")  # our name, our user, 0600, but no ring header: not provably a ring
    headless.write_bytes(bytes(4096))
    headless.chmod(0o600)
    with create_ring(ring_path(shm_root, "live"), GEOM, "live"):
        assert reclaim_stale_rings(shm_root, keep={"kept"}) == [dead]
        assert kept.exists() and ring_path(shm_root, "live").exists() and headless.exists()
    kept.unlink()
    headless.unlink()


@pytest.mark.slow
def test_slow_reader_gets_latest_frames_never_torn_and_drops_are_counted(shm_root):
    """A writer process publishes checksummed frames flat out; a slow reader checks every lease it gets."""
    path = ring_path(shm_root, "race")
    count = 400
    with create_ring(path, RingGeometry(160, 120, slots=4), "race"), RingReader(path) as reader:
        proc = CTX.Process(target=capture_helpers.write_stamped_frames, args=(str(path), count))
        proc.start()
        seen, last = [], 0
        while proc.is_alive() or reader.latest_seq > last:
            lease = reader.acquire_latest(after_seq=last)
            if lease is None:
                time.sleep(0.001)
                continue
            with lease:
                time.sleep(0.01)  # hold it while the writer keeps going: it must not touch this slot
                assert capture_helpers.verify(lease.array) == lease.meta.seq
                seen.append(lease.meta.seq)
                last = lease.meta.seq
        proc.join(60)
        assert proc.exitcode == 0
        health = reader.health()
    assert seen == sorted(set(seen)) and seen[-1] == count  # in order, never repeated, ends on the latest
    assert len(seen) < count  # the reader was slower, so it skipped frames...
    # ...and every unread frame that got overwritten is a drop (up to slots-1 unread ones are still in the ring)
    unread = count - len(seen)
    assert health.frames == count and unread - 3 <= health.drops <= unread
    assert reader.frames_skipped == count - len(seen)


def test_release_from_another_thread_frees_the_slot(ring):
    """Triton calls the release callback on one of its own threads."""
    import threading

    _, writer, reader = ring
    put(writer, 1)
    lease = reader.acquire_latest()
    thread = threading.Thread(target=lease.release)
    thread.start()
    thread.join()
    assert lease.released and reader.leases_held == 0
    for value in range(GEOM.slots):  # every slot, including the one that was leased, is writable again
        put(writer, value)
    assert reader.health().ring_full == 0


def test_a_reader_can_tell_when_its_ring_was_removed_or_recreated(shm_root):
    path = ring_path(shm_root, "again")
    owner = create_ring(path, GEOM, "again")
    old = RingReader(path)
    assert old.is_current()
    owner.close()  # camera retired
    assert not old.is_current()
    with create_ring(path, GEOM, "again"), RingReader(path) as new:  # re-created: a new file
        assert new.is_current() and not old.is_current()
    old.close()
