"""The OTA tests' fixtures; they live in ota_helpers with the helpers the tests import."""

from ota_helpers import keys, sign, small_tmpfs, tiny_onnx, tiny_source  # noqa: F401
