# SPDX-License-Identifier: MIT
"""A torch DCP checkpoint of thousands of items (scripts/bench/
gen_scale_ckpt.py: optimizer state of a mixture-of-experts model, each
tensor Shard(0) over 8 saving ranks, one torch.save record per chunk)
opens and reads back exactly: every element equals its generator's
formula, whole (world 1) and resharded (world 3, rank 1), and `ckptfs
info` counts every key, chunk and byte.  The .metadata is large enough
that the unpickler's shared values and memo slots are exercised at
scale (issue 38)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import CKPTFS, PY, ROOT

sys.path.insert(0, os.path.join(ROOT, "scripts", "bench"))
import gen_scale_ckpt  # noqa: E402

PARAMS = 700	# 2100 items, 11,340 chunks
RANKS = 8


@pytest.fixture(scope="module")
def scale_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("scale") / "ckpt"
    out = subprocess.check_output(
        [PY, os.path.join(ROOT, "scripts", "bench", "gen_scale_ckpt.py"),
         str(d), "--params", str(PARAMS), "--ranks", str(RANKS)],
        text=True, timeout=600)
    assert f"{3 * PARAMS} items" in out
    return str(d)


def expected():
    """fqn -> the whole tensor, from the generator's formula."""
    return {fqn: gen_scale_ckpt.value(k, rows)
            for k, (fqn, rows, _) in
            enumerate(gen_scale_ckpt.keys(PARAMS, RANKS))}


def flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def test_whole_and_resharded_views_match_formula(scale_ckpt):
    import ckptfs
    want = expected()
    ck = ckptfs.open(scale_ckpt, index_cache=False)
    try:
        got = flat(ck.load(backend="numpy"))
        assert sorted(got) == sorted(want)
        bad = [k for k in want if got[k].shape != want[k].shape or
               not np.array_equal(got[k], want[k])]
        assert not bad, f"{len(bad)} tensors differ: {bad[:5]}"
        # rank 1 of 3: rows [ceil(n/3), 2 ceil(n/3)) of each 2-D tensor
        got = flat(ck.load(3, 1, backend="numpy"))
        bad = []
        for k, w in want.items():
            if w.ndim == 0:
                continue
            per = -(-w.shape[0] // 3)
            if not np.array_equal(got[k], w[per:2 * per]):
                bad.append(k)
        assert not bad, f"{len(bad)} slices differ: {bad[:5]}"
    finally:
        ck.close()


def test_info_counts(scale_ckpt):
    want = expected()
    chunks = sum(max(1, w.shape[0] if w.ndim else 1) for w in want.values())
    nbytes = sum(w.nbytes for w in want.values())
    p = subprocess.run([CKPTFS, "info", scale_ckpt], capture_output=True,
                       text=True, timeout=600,
                       env=dict(os.environ, CKPTFS_INDEX_CACHE=""))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert f"keys\t{len(want)} ({len(want)} tensors, 0 bytes entries)" \
        in lines
    assert f"chunks\t{chunks}" in lines
    assert f"total bytes\t{nbytes} (tensors {nbytes}, bytes entries 0)" \
        in lines
