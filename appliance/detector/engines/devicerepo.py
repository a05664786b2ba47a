"""This device's Triton model repository: an installed engine as the detector of the repository templates.

The templates and their writer belong to :mod:`appliance.detector.repository`; this module turns an installed
engine record into the materializer's ``DetectorSource`` and caps the dynamic batcher at the batch range the
engine was built for (Triton refuses a TensorRT plan whose profile is smaller than ``max_batch_size``).
"""

from __future__ import annotations

from pathlib import Path

from appliance import paths
from appliance.detector.engines.manager import InstalledEngine
from appliance.detector.profile import ModelProfile, load_profile
from appliance.detector.repository.materialize import DetectorSource, Repository, RepositoryOptions, materialize
from appliance.errors import ApplianceError

PROFILES = paths.profiles_dir()


class RepositoryWiringError(ApplianceError, ValueError):
    """The installed engine cannot serve as the ensemble's detector (it must have one input and one output)."""


def detector_source(engine: InstalledEngine) -> DetectorSource:
    if engine.in_graph:  # pre/post built into the engine (appliance.detector.engines.ingraph)
        return DetectorSource(kind=engine.triton_kind, path=engine.engine_path, in_graph="wrapped",
                              input_name=engine.inputs[0]["name"])
    if len(engine.inputs) != 1 or len(engine.outputs) != 1:
        raise RepositoryWiringError(
            f"{engine.model}: the detector stage needs exactly one input and one output, the engine has "
            f"{[t['name'] for t in engine.inputs]} -> {[t['name'] for t in engine.outputs]}"
        )
    return DetectorSource(
        kind=engine.triton_kind,
        path=engine.engine_path,
        input_name=engine.inputs[0]["name"],
        output_name=engine.outputs[0]["name"],
        in_graph="off",  # built without it (switched off, or the graph cannot be wrapped: the build log says why)
    )


def materialize_for_device(
    engine: InstalledEngine,
    dest: Path,
    *,
    model_profile: ModelProfile | None = None,
    profiles_dir: Path = PROFILES,
    options: RepositoryOptions | None = None,
) -> Repository:
    """Write preprocess -> detector (this device's engine) -> postprocess and the ensemble into ``dest``.

    ``model_profile`` defaults to ``<profiles_dir>/<model>.yaml`` (the pre/post-processing profile).
    """
    profile = model_profile or load_profile(profiles_dir / f"{engine.model}.yaml")
    opts = options or RepositoryOptions()
    if opts.max_batch_size > engine.max_batch:
        opts = opts.model_copy(update={"max_batch_size": engine.max_batch})
    return materialize(profile, detector_source(engine), Path(dest), opts)
