"""Write a concrete Triton model repository for this device from the ``repository/`` templates.

The detector is a parameter: ``onnxruntime`` (a Python-backend model running ONNX Runtime on an ONNX file, for
CPU hosts) or ``tensorrt_plan`` (an engine built on the device). Each model directory is written beside its
final place and swapped in by rename, so a reader never sees half a model; other models in ``dest`` are left
alone. Load the models (explicit model control) after ``materialize`` returns.

In-graph pre/post (appliance.detector.repository.wrap): a detector whose graph normalizes the letterboxed uint8
frame and decodes and suppresses itself takes preprocess's canvas and hands postprocess final boxes; its
templates are the ``in_graph.pbtxt`` files. ``DetectorSource.in_graph``: ``wrapped`` (the file already is such a
graph: an engine built from it), ``auto`` (an ONNX is wrapped here when it can be; one that cannot keeps the
Python decode, and ``Repository.in_graph_reason`` says why), ``off``.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from string import Template
from typing import Literal

import onnx
from pydantic import Field

from appliance.config import StrictModel
from appliance.detector.profile import ModelProfile
from appliance.detector.repository.stages.common import PROFILE_FILE
from appliance.detector.repository.wrap import FRAME_INPUT, Unwrappable, WrapSpec, wrap_model
from appliance.errors import ApplianceError
from appliance.paths import repository_templates_dir

log = logging.getLogger(__name__)
TEMPLATES = repository_templates_dir()
_TRITON_TYPES = {"float32": "TYPE_FP32", "float16": "TYPE_FP16"}


class MaterializeError(ApplianceError, RuntimeError):
    """The repository could not be written: a missing file, an unfilled template placeholder, a bad name."""


class DetectorSource(StrictModel):
    kind: Literal["onnxruntime", "tensorrt_plan"] = Field(description="how the detector runs on this device")
    path: Path = Field(description="the ONNX file (onnxruntime) or the serialized engine (tensorrt_plan)")
    input_name: str = Field("images", description="engine input binding name (tensorrt_plan only)")
    output_name: str = Field("output", description="engine output binding name (tensorrt_plan only)")
    output_dims: list[int] | None = Field(
        None, min_length=2, max_length=2,
        description="the head's dims without the batch, e.g. [2535, 85] (tensorrt_plan; default [-1, -1])")
    in_graph: Literal["auto", "wrapped", "off"] = Field(
        "auto", description="wrapped: the detector already does pre/post in its graph; auto: wrap an ONNX here "
                            "when it can be (else the Python decode); off: the Python stages do it all")


class RepositoryOptions(StrictModel):
    prefix: str = Field("", pattern=r"^[A-Za-z0-9_.-]*$", description="prepended to every model name")
    ensemble_name: str = Field("detect", pattern=r"^[A-Za-z0-9_.-]+$", description="the pipeline's model name")
    max_batch_size: int = Field(8, ge=1, le=64, description="largest batch the detector's dynamic batcher forms")
    queue_delay_us: int = Field(
        0, ge=0, le=1_000_000,
        description="how long the batcher waits to fill a batch; 0 still batches every frame that queued while "
                    "the detector was busy, without delaying a lone camera")
    preprocess_instances: int = Field(2, ge=1, le=16)
    postprocess_instances: int = Field(1, ge=1, le=16)
    detector_instances: int = Field(1, ge=1, le=8)
    intra_op_threads: int = Field(0, ge=0, le=64, description="ONNX Runtime threads per detector (0 = all cores)")
    ort_spinning: bool = Field(
        False, description="let ONNX Runtime's idle threads spin; off, they leave the cores to pre/post stages")
    link: Literal["symlink", "copy"] = Field("symlink", description="how the detector file enters the repository")
    prepare_python_models: bool = Field(
        True, description="write appliance.triton's path hook into the Python models (Server.start also does)")


@dataclass(frozen=True)
class Repository:
    """What was written: the directory and the model names to load (ensemble last)."""

    path: Path
    preprocess: str
    detector: str
    postprocess: str
    ensemble: str
    in_graph: bool = False  # the detector normalizes, decodes and suppresses in its graph
    in_graph_reason: str = ""  # why not, when ``auto`` could not wrap the ONNX

    @property
    def models(self) -> list[str]:
        return [self.preprocess, self.detector, self.postprocess, self.ensemble]


def _fill(template: Path, values: dict[str, object]) -> str:
    try:
        return Template(template.read_text()).substitute({k: str(v) for k, v in values.items()})
    except KeyError as exc:
        raise MaterializeError(f"{template}: placeholder {exc} has no value") from None
    except ValueError as exc:
        raise MaterializeError(f"{template}: {exc}") from None


def _write_model(dest: Path, name: str, files: dict[str, str], extra: dict[str, Path], link: str) -> None:
    """Build ``dest/name`` in a sibling temp dir, then swap it in."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=dest))
    try:
        tmp.chmod(0o755)  # mkdtemp's 0700 would hide the model from a server running as another user
        for rel, text in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)
        for rel, src in extra.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            if link == "symlink":
                os.symlink(src.resolve(), tmp / rel)
            else:
                shutil.copyfile(src, tmp / rel)
        final = dest / name
        if final.exists():
            old = dest / f".{name}.old"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def materialize(profile: ModelProfile, detector: DetectorSource, dest: Path,
                options: RepositoryOptions | None = None, templates: Path = TEMPLATES) -> Repository:
    """Write preprocess, detector, postprocess and the ensemble for ``profile`` into ``dest``."""
    opts = options or RepositoryOptions()
    if not detector.path.is_file():
        raise MaterializeError(f"detector.path: {detector.path} is not a file")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    wrapped_text, reason = _wrapped_detector(profile, detector)
    in_graph = detector.in_graph == "wrapped" or wrapped_text is not None
    names = Repository(dest, f"{opts.prefix}preprocess", f"{opts.prefix}detector", f"{opts.prefix}postprocess",
                       f"{opts.prefix}{opts.ensemble_name}", in_graph, reason)
    inp = profile.input
    chw = [3, inp.height, inp.width] if inp.layout == "NCHW" else [inp.height, inp.width, 3]
    if in_graph:
        chw = [inp.height, inp.width, 3]  # the letterboxed uint8 canvas
    profile_json = profile.model_dump_json(indent=2)
    common = {"tensor_type": "TYPE_UINT8" if in_graph else _TRITON_TYPES[inp.dtype], "profile_name": profile.name,
              "in_graph": int(in_graph), "max_detections": profile.thresholds.max_detections}
    config_file = "in_graph.pbtxt" if in_graph else "config.pbtxt"

    for stage, instances in (("preprocess", opts.preprocess_instances), ("postprocess", opts.postprocess_instances)):
        name = getattr(names, stage)
        template = templates / stage / ("config.pbtxt" if stage == "preprocess" else config_file)
        config = _fill(template, {
            **common, "name": name, "instances": instances, "tensor_dims": ", ".join(map(str, [1, *chw]))})
        _write_model(dest, name, {"config.pbtxt": config, PROFILE_FILE: profile_json,
                                  "1/model.py": (templates / stage / "model.py").read_text()}, {}, opts.link)

    det_values = {**common, "name": names.detector, "max_batch_size": opts.max_batch_size,
                  "queue_delay_us": opts.queue_delay_us, "instances": opts.detector_instances,
                  "input_dims": ", ".join(map(str, chw)), "intra_op_threads": opts.intra_op_threads,
                  "ort_spinning": int(opts.ort_spinning),
                  "input_name": detector.input_name, "output_name": detector.output_name,
                  "output_dims": ", ".join(map(str, detector.output_dims or [-1, -1]))}
    tdir = templates / "detector" / detector.kind
    if detector.kind == "onnxruntime":
        files = {"config.pbtxt": _fill(tdir / config_file, det_values), "1/model.py": (tdir / "model.py").read_text()}
        extra = {"1/model.onnx": detector.path}
        det_in, det_out = "INPUT", "OUTPUT"
        if wrapped_text is not None:
            wrapped_path = dest / f".{names.detector}.wrapped.onnx"
            wrapped_path.write_bytes(wrapped_text)
            extra = {"1/model.onnx": wrapped_path}
    else:
        files = {"config.pbtxt": _fill(tdir / config_file, det_values)}
        extra = {"1/model.plan": detector.path}
        det_in, det_out = detector.input_name, detector.output_name
    try:
        _write_model(dest, names.detector, files, extra, "copy" if wrapped_text is not None else opts.link)
    finally:
        if wrapped_text is not None:
            (dest / f".{names.detector}.wrapped.onnx").unlink(missing_ok=True)

    ensemble = _fill(templates / "ensemble" / config_file, {
        "name": names.ensemble, "preprocess": names.preprocess, "detector": names.detector,
        "postprocess": names.postprocess, "detector_input": det_in, "detector_output": det_out})
    # An ensemble needs an (empty) version directory to be loadable.
    _write_model(dest, names.ensemble, {"config.pbtxt": ensemble, "1/.keep": ""}, {}, opts.link)
    if opts.prepare_python_models:
        from appliance.triton import write_path_hook

        python_models = [names.preprocess, names.postprocess]
        python_models += [names.detector] if detector.kind == "onnxruntime" else []
        for name in python_models:
            write_path_hook(dest / name)
    return names


def _wrapped_detector(profile: ModelProfile, detector: DetectorSource) -> tuple[bytes | None, str]:
    """The wrapped ONNX to serve (``auto`` on an ONNX that can be wrapped), or None and why not."""
    if detector.in_graph == "wrapped":
        return None, ""
    if detector.in_graph == "off":
        return None, "in_graph is off"
    if detector.kind != "onnxruntime":
        return None, "a TensorRT plan is wrapped by the engine build, not here (its DetectorSource says wrapped)"
    try:
        model = onnx.load(str(detector.path))
    except Exception as exc:  # protobuf's DecodeError, OSError...: ONNX Runtime names the problem when it loads
        return None, f"cannot read {detector.path} as ONNX: {exc}"
    if any(i.name == FRAME_INPUT for i in model.graph.input):
        return model.SerializeToString(), ""  # already wrapped
    try:
        return wrap_model(model, WrapSpec.from_profile(profile)).SerializeToString(), ""
    except Unwrappable as exc:
        log.warning("%s: the detector keeps the Python decode: %s", profile.name, exc)
        return None, str(exc)
