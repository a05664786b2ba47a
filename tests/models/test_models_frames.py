"""What the preprocess stage accepts, converts and rejects (docs/models.md, "Input frames")."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from appliance.detector.prepost.errors import InputRejected
from appliance.detector.prepost.frames import FrameLimits, check_frame, decode_image

LIMITS = FrameLimits(max_width=4000, max_height=3000, max_encoded_bytes=1 << 20)


def test_three_channel_frame_is_used_without_a_copy() -> None:
    frame = np.zeros((4, 5, 3), dtype=np.uint8)
    assert check_frame(frame, LIMITS) is frame


@pytest.mark.parametrize("shape", [(6, 7), (6, 7, 1)])
def test_grayscale_is_replicated_to_three_channels(shape: tuple) -> None:
    gray = np.arange(42, dtype=np.uint8).reshape(shape)
    out = check_frame(gray, LIMITS)
    assert out.shape == (6, 7, 3)
    for c in range(3):
        np.testing.assert_array_equal(out[:, :, c], gray.reshape(6, 7))


def test_four_channel_frame_drops_alpha() -> None:
    rgba = np.random.default_rng(1).integers(0, 256, (5, 6, 4), dtype=np.uint8)
    out = check_frame(rgba, LIMITS)
    np.testing.assert_array_equal(out, rgba[:, :, :3])


@pytest.mark.parametrize("frame,reason,words", [
    (np.zeros((4, 4, 3), dtype=np.uint16), "dtype", "dtype must be uint8, got uint16"),
    (np.zeros((4, 4, 3), dtype=np.float32), "dtype", "got float32"),
    (np.zeros((0, 4, 3), dtype=np.uint8), "empty", "frame is empty"),
    (np.zeros((4, 0), dtype=np.uint8), "empty", "frame is empty"),
    (np.zeros((4,), dtype=np.uint8), "rank", "H×W or H×W×C"),
    (np.zeros((2, 4, 4, 3), dtype=np.uint8), "rank", "H×W or H×W×C"),
    (np.zeros((4, 4, 2), dtype=np.uint8), "channels", "1, 3 or 4 channels, got 2"),
    (np.zeros((4, 4, 5), dtype=np.uint8), "channels", "got 5"),
    (np.zeros((10, 4001, 3), dtype=np.uint8), "too_large", "4001×10 exceeds the limit 4000×3000"),
    (np.zeros((3001, 10, 3), dtype=np.uint8), "too_large", "exceeds the limit"),
])
def test_bad_frames_are_rejected_with_a_reason(frame: np.ndarray, reason: str, words: str) -> None:
    with pytest.raises(InputRejected, match=words) as info:
        check_frame(frame, LIMITS)
    assert info.value.reason == reason


def test_not_an_array() -> None:
    with pytest.raises(InputRejected, match="numpy array") as info:
        check_frame([[1, 2, 3]], LIMITS)  # type: ignore[arg-type]
    assert info.value.reason == "type"


def test_jpeg_and_png_bytes_decode_to_bgr(images: dict) -> None:
    dog = images["dog"]
    ok, png = cv2.imencode(".png", dog)
    assert ok
    np.testing.assert_array_equal(decode_image(png.tobytes(), FrameLimits()), dog)
    ok, jpg = cv2.imencode(".jpg", dog)
    decoded = decode_image(jpg.reshape(-1), FrameLimits())
    assert decoded.shape == dog.shape


@pytest.mark.parametrize("data,reason,words", [
    (b"", "empty", "encoded image is empty"),
    (b"\x89PNG\r\n\x1a\nnot really", "undecodable", "not a decodable JPEG/PNG"),
    (bytes(2 << 20), "too_large", "over the limit 1048576"),
    (np.zeros((2, 3), dtype=np.uint8), "rank", "1-D uint8 bytes"),
])
def test_bad_encoded_images_are_rejected(data, reason: str, words: str) -> None:
    with pytest.raises(InputRejected, match=words) as info:
        decode_image(data, LIMITS)
    assert info.value.reason == reason


def test_decoded_image_larger_than_limits_is_rejected() -> None:
    ok, png = cv2.imencode(".png", np.zeros((20, 30, 3), dtype=np.uint8))
    with pytest.raises(InputRejected, match="30×20 exceeds the limit 10×10") as info:
        decode_image(png.tobytes(), FrameLimits(max_width=10, max_height=10))
    assert info.value.reason == "too_large"
