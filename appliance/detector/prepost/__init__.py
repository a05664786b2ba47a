"""Pure numpy/OpenCV pre- and post-processing shared by the Triton Python models and the plain loop.

Plain functions over arrays, no Triton imports, so they are tested directly and reused unchanged.
"""
