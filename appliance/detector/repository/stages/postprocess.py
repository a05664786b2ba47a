"""Postprocess model: raw detector head + LETTERBOX → BOXES float32 [K,4] (frame pixels, xyxy), SCORES float32 [K],
CLASSES int32 [K]. Head layout, thresholds, allow-list and NMS come from the model profile.

With the config parameter ``in_graph`` "1" the detector has decoded and suppressed in its graph
(appliance.detector.repository.wrap): the inputs are its BOXES/SCORES/CLASSES/COUNT (network pixels) and this stage only
maps the boxes back to the frame."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from appliance.detector.prepost.errors import InputRejected
from appliance.detector.prepost.letterbox import Letterbox
from appliance.detector.prepost.pipeline import Postprocessor
from appliance.detector.repository.stages.common import StageMetrics, execute_each, load_model_profile, model_parameters


class PostprocessStage:
    def __init__(self, pb_utils: ModuleType, args: dict[str, str]) -> None:
        self.pb = pb_utils
        profile = load_model_profile(args)
        self.post = Postprocessor(profile)
        self.in_graph = model_parameters(args).get("in_graph") == "1"
        self.metrics = StageMetrics(pb_utils, "postprocess", profile.name, args.get("model_instance_name", ""))

    def _one(self, request: Any) -> Any:
        try:
            lb = Letterbox.from_array(self.pb.get_input_tensor_by_name(request, "LETTERBOX").as_numpy())
        except ValueError as exc:
            raise InputRejected("letterbox", str(exc)) from None
        if self.in_graph:
            boxes, scores, classes, count = (self.pb.get_input_tensor_by_name(request, name).as_numpy()
                                             for name in ("DET_BOXES", "DET_SCORES", "DET_CLASSES", "DET_COUNT"))
            det = self.post.final(boxes, scores, classes, count, lb)
        else:
            det = self.post(self.pb.get_input_tensor_by_name(request, "RAW").as_numpy(), lb)
        return self.pb.InferenceResponse(output_tensors=[
            self.pb.Tensor("BOXES", det.boxes),
            self.pb.Tensor("SCORES", det.scores),
            self.pb.Tensor("CLASSES", det.class_ids),
        ])

    def execute(self, requests: list[Any]) -> list[Any]:
        return execute_each(self.pb, "postprocess", self.metrics, self._one, requests)

    def finalize(self) -> None:
        self.metrics.close()
