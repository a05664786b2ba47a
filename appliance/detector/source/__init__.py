"""Where the detector's ONNX comes from: darknet weights fetched, converted and checked against OpenCV."""
