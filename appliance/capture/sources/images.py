"""A folder of still images played in name order, for demos and tests."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from appliance.capture.sources.base import DecodeError, EndOfStream, FrameShape, FrameSource, SourceAbsent, fit_frame

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.11+; the Jetson runs Python 3.10

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp"})


def list_images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())


class ImageFolder(FrameSource):
    def __init__(self, path: Path, loop: bool, realtime: bool, **kw: Unpack[FrameShape]) -> None:
        super().__init__(**kw)
        self.path, self.loop, self.paced = Path(path), loop, realtime
        self._files: list[Path] = []
        self._next = 0

    def describe(self) -> str:
        return f"image folder {self.path}"

    def open(self) -> None:
        if not self.path.is_dir():
            raise SourceAbsent(f"{self.describe()} does not exist or is not a folder")
        self._files = list_images(self.path)
        if not self._files:
            raise SourceAbsent(f"{self.describe()} has no {'/'.join(sorted(IMAGE_SUFFIXES))} files")
        self._next = 0

    def native_size(self) -> tuple[int, int] | None:
        import cv2

        first = cv2.imread(str(self._files[0]), cv2.IMREAD_COLOR) if self._files else None
        return None if first is None else (int(first.shape[1]), int(first.shape[0]))

    def read_into(self, out: np.ndarray) -> None:
        import cv2

        if self._next >= len(self._files):
            if not self.loop:
                raise EndOfStream(f"{self.describe()}: all {len(self._files)} images shown (loop: false)")
            self._next = 0
        path = self._files[self._next]
        self._next += 1
        frame = cv2.imread(str(path), cv2.IMREAD_COLOR)
        if frame is None:
            raise DecodeError(f"{path} is not a readable image")
        fit_frame(frame, out, self.pixel_format, self.resize, f"image {path}")

    def close(self) -> None:
        self._files = []
