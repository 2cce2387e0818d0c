# SPDX-License-Identifier: MIT
"""Write a checkpoint in the ckptfs native format (version 1) from data
already laid out: shared by the demo, benchmark and test-side writers."""
import os

import msgpack


def write_checkpoint(out, files, sdm, storage, planner=None):
    """files: {relative path: bytes} to write (data files the caller
    streamed itself are left alone); sdm, storage, planner: the
    state_dict_metadata, storage_data and (optional) planner_data values."""
    os.makedirs(out, exist_ok=True)
    for name, data in files.items():
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)
    meta = {"format": "tensorplay-dcp", "version": 1,
            "state_dict_metadata": sdm}
    if planner:
        meta["planner_data"] = planner
    meta["storage_data"] = storage
    with open(os.path.join(out, ".metadata"), "wb") as fh:
        fh.write(msgpack.packb(meta))
