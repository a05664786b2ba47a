"""seq and bdSeq: 0..255 wrapping; bdSeq kept in its file across restarts; an unreadable file starts again at 0."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from appliance.sparkplug.sequence import BdSeqStore, SeqCounter


def test_seq_counts_to_255_and_wraps_to_0() -> None:
    seq = SeqCounter(start=253)
    assert [seq.take() for _ in range(5)] == [253, 254, 255, 0, 1]
    seq.reset()
    assert seq.take() == 0


def test_bdseq_starts_at_0_and_survives_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "state" / "sparkplug-bdseq"
    assert BdSeqStore(path).next() == 0
    assert path.read_text() == "0\n"  # written before the CONNECT that uses it
    assert BdSeqStore(path).next() == 1   # a restart: a new store on the same file
    assert BdSeqStore(path).next() == 2


def test_bdseq_wraps_from_255_to_0(tmp_path: Path) -> None:
    path = tmp_path / "bdseq"
    path.write_text("254\n")
    store = BdSeqStore(path)
    assert [store.next() for _ in range(3)] == [255, 0, 1]


@pytest.mark.parametrize("content", ["", "abc", "256", "-1", "1.5"])
def test_an_unreadable_bdseq_file_starts_again_at_0_with_a_warning(tmp_path: Path, content: str,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "bdseq"
    path.write_text(content)
    with caplog.at_level(logging.WARNING, logger="appliance.sparkplug.sequence"):
        assert BdSeqStore(path).next() == 0
    assert "not a bdSeq" in caplog.text
    assert path.read_text() == "0\n"
