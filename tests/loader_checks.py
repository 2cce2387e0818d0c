#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Checks of the ckptfs package's load_view (scripts/ckptfs/) for tests/bats/loader.bats.

    loader_checks.py compare CKPT MNT W R      both backends vs the reference
    loader_checks.py rss MNT                   tensors are mapped, not copied
    loader_checks.py adam-save OUT             train a model, save its Adam
                                               state in the native format
    loader_checks.py adam-check OUT MNT0 MNT1  load both ranks, compare, step
    loader_checks.py errors TMPDIR MNT         ValueError cases
"""
import io
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "scripts"))
import ckptfs  # noqa: E402
import reference  # noqa: E402


def flatten(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict):
            yield from flatten(v, prefix + (str(k),))
        else:
            yield "/".join(prefix + (str(k),)), v


def compare(ckpt, mnt, w, r):
    import numpy as np
    import torch
    w, r = int(w), int(r)
    exp = reference.expected(ckpt, w, r)
    attrs = reference.expected_attrs(ckpt, w, r)
    bad = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for backend in ("numpy", "torch"):
            got = dict(flatten(ckptfs.load_view(mnt, backend=backend)))
            if set(got) != set(exp):
                print(backend, "paths differ", set(got) ^ set(exp))
                bad += 1
            for path, want in exp.items():
                v = got.get(path)
                a = attrs[path]
                if a["user.ckptfs.kind"] == "bytes":
                    if v != want:
                        print(backend, path, "bytes differ")
                        bad += 1
                    continue
                shape = reference._shape(a["user.ckptfs.shape"]) \
                    if hasattr(reference, "_shape") else \
                    tuple(int(x) for x in a["user.ckptfs.shape"].split(",")
                          if x)
                if backend == "numpy":
                    raw = np.ascontiguousarray(v).tobytes()
                else:
                    t = v.contiguous()
                    if t.dtype == torch.bfloat16:
                        t = t.view(torch.int16)
                    raw = t.numpy().tobytes()
                    dt = a["user.ckptfs.dtype"]
                    want_dt = getattr(torch, dt, None)
                    if isinstance(want_dt, torch.dtype) and v.dtype != want_dt:
                        print(backend, path, "dtype", v.dtype, "want", dt)
                        bad += 1
                if tuple(v.shape) != shape or raw != want:
                    print(backend, path, "shape", tuple(v.shape), shape,
                          "or values differ")
                    bad += 1
    print(f"compared {len(exp)} entries with both backends, {bad} problems")
    return 1 if bad else 0


def rss_kib():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])


def rss(mnt):
    import numpy as np  # noqa: F401
    import torch  # noqa: F401
    total = sum(os.path.getsize(os.path.join(d, f))
                for d, _, fs in os.walk(mnt) for f in fs
                if ".ckptfs" not in d.split(os.sep))
    for backend in ("numpy", "torch"):
        before = rss_kib()
        sd = ckptfs.load_view(mnt, backend=backend)
        after = rss_kib()
        n = sum(1 for _ in flatten(sd))
        grew = (after - before) / 1024
        print(f"{backend}: {n} tensors, {total / 2**30:.2f} GiB view, "
              f"RSS grew {grew:.1f} MiB")
        if total < 2**30 or grew > 64:
            return 1
        del sd
    return 0


def model():
    import torch
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(),
                               torch.nn.Linear(10, 4))


def adam_save(out):
    """A test-side writer of the native format: the Adam state of a small
    model, FQN-keyed by parameter name, saved by 2 ranks in dim-0 shards."""
    import torch
    from native_writer import write_checkpoint
    m = model()
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    for _ in range(3):
        opt.zero_grad()
        m(torch.randn(8, 6)).pow(2).sum().backward()
        opt.step()
    osd = opt.state_dict()
    names = [n for n, _ in m.named_parameters()]
    files = {0: bytearray(), 1: bytearray()}
    sdm, planner, storage = {}, {}, []
    for idx, st in osd["state"].items():
        for k, t in st.items():
            fqn = f"optim.state.{names[idx]}.{k}"
            t = t.detach().contiguous()
            planner[fqn] = ["optim", "state", names[idx], k]
            shape = list(t.shape)
            if t.numel() == 1:
                parts = [(0, [0] * t.dim(), t)]
            else:
                cs = -(-shape[0] // 2)
                parts = [(rk, [rk * cs] + [0] * (t.dim() - 1),
                          t[rk * cs:(rk + 1) * cs]) for rk in (0, 1)]
            chunks = []
            for rk, off, part in parts:
                payload = part.contiguous().numpy().tobytes()
                storage.append({"fqn": fqn, "offsets": off,
                                "relative_path": f"__{rk}_0.distcp",
                                "offset": len(files[rk]),
                                "length": len(payload)})
                files[rk] += payload
                chunks.append({"offsets": off, "sizes": list(part.shape)})
            sdm[fqn] = {"type": "tensor", "dtype": str(t.dtype)[6:],
                        "size": shape, "chunks": chunks}
    buf = io.BytesIO()
    torch.save(osd["param_groups"], buf)
    storage.append({"fqn": "optim.param_groups", "offsets": None,
                    "relative_path": "__0_0.distcp",
                    "offset": len(files[0]), "length": len(buf.getvalue())})
    files[0] += buf.getvalue()
    sdm["optim.param_groups"] = {"type": "bytes"}
    planner["optim.param_groups"] = ["optim", "param_groups"]
    write_checkpoint(out, {f"__{rk}_0.distcp": d for rk, d in files.items()},
                     sdm, storage, planner)
    torch.save(osd, os.path.join(out, "..", "original.pt"))
    return 0


def adam_check(out, mnt0, mnt1):
    """Both ranks' views, concatenated along dim 0, are the original state;
    mapped back to param indices, they load into a fresh Adam that steps."""
    import torch
    orig = torch.load(os.path.join(out, "..", "original.pt"))
    v0 = ckptfs.load_view(mnt0, prefix="optim", trust_pickles=True)["optim"]
    v1 = ckptfs.load_view(mnt1, prefix="optim", trust_pickles=True)["optim"]
    m = model()
    names = [n for n, _ in m.named_parameters()]
    state = {}
    for idx, name in enumerate(names):
        s0, s1 = v0["state"][name], v1["state"][name]
        full = {}
        for k in s0:
            if s0[k].numel() == 1 and s0[k].dim() == 0:
                assert torch.equal(s0[k], s1[k])
                full[k] = s0[k].clone()
            else:
                full[k] = torch.cat([s0[k], s1[k]], 0)
            if not torch.equal(full[k], orig["state"][idx][k]):
                print("mismatch", name, k)
                return 1
        state[idx] = full
    assert v0["param_groups"] == orig["param_groups"]
    opt = torch.optim.Adam(m.parameters(), lr=0.01)
    opt.load_state_dict({"state": state, "param_groups": v0["param_groups"]})
    opt.zero_grad()
    m(torch.randn(8, 6)).pow(2).sum().backward()
    opt.step()
    print(f"{len(state)} parameters' Adam state rebuilt from 2 ranks, "
          f"loaded and stepped")
    return 0


def errors(tmp, mnt):
    import numpy as np  # noqa: F401
    cases = 0

    def expect(fn, text):
        nonlocal cases
        try:
            fn()
        except ValueError as e:
            assert text in str(e), (str(e), text)
            cases += 1
            return
        raise AssertionError(f"no ValueError for {text}")
    expect(lambda: ckptfs.load_view(tmp), "not a ckptfs mount")
    expect(lambda: ckptfs.load_view(mnt, backend="jax"), "backend must be")
    expect(lambda: ckptfs.load_view(mnt, prefix="nope"), "no 'nope' subtree")
    plain = os.path.join(tmp, "plain.bin")
    with open(plain, "wb") as fh:
        fh.write(b"\0" * 12)
    expect(lambda: ckptfs.view._load_file(plain, "torch", False, True),
           f"{plain}: missing extended attribute user.ckptfs.kind")
    try:
        for k, v in (("kind", "tensor"), ("dtype", "float32"),
                     ("shape", "2,2")):
            os.setxattr(plain, "user.ckptfs." + k, v.encode())
    except OSError:
        print("(no user xattrs on this file system: size check skipped)")
    else:
        expect(lambda: ckptfs.view._load_file(plain, "numpy", False, True),
               f"{plain}: 12 bytes, but dtype float32 x shape [2, 2] needs 16")
    print(f"{cases} error cases raise ValueError naming the path")
    return 0


def main(argv):
    cmd, args = argv[0], argv[1:]
    return {"compare": compare, "rss": rss, "adam-save": adam_save,
            "adam-check": adam_check, "errors": errors}[cmd](*args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
