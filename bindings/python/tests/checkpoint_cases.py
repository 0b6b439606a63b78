"""Reading the fixture manifest: load options and the expected per-rank arrays."""
import os

import numpy as np


def manifest_options(folder, options):
    """plan()/load keyword arguments from a manifest entry's options."""
    kwargs = {}
    if "draft" in options:
        kwargs["draft_checkpoint_dir"] = os.path.join(folder, options["draft"])
    if "online" in options:
        kwargs["mtp_expert_quantization"] = options["online"]
    return kwargs


def read_expected(folder, case, variant, shape):
    """The fixture generator's arrays for one rank, in the device layout of `shape`."""
    layout = shape.layout()
    arrays = {}
    for name, dtype in (("w13", np.uint8), ("s13", np.uint16), ("w2", np.uint8), ("s2", np.uint16)):
        path = os.path.join(folder, "expected", case, variant, name + ".bin")
        arrays[name] = np.fromfile(path, dtype=dtype).reshape(layout[name])
    return arrays
