"""Real frames for INT8 calibration and for the detection gate: from files, and from the device's own cameras."""
