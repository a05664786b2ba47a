"""Everything about the detector, one subpackage per job (lowest first; each imports only those above it here):

- ``profile``: what the pre/post stages need to know about a model; ``buildprofile``: how its engine is built
- ``source``: where the ONNX comes from (darknet weights fetched and converted, checked against OpenCV)
- ``prepost``: numpy pre- and post-processing (letterbox, normalize, decode, NMS)
- ``repository``: the Triton model repository (templates, in-graph wrapping, the Python-backend stages)
- ``calibration``: real frames for INT8 calibration and the detection gate
- ``engines``: first-boot engine builds, verified and cached by device fingerprint
- ``serving``: which model serves a frame (routing, switching, warm-up, recovery)
"""
