# SPDX-License-Identifier: MIT
"""NCCL's point-to-point rules, enforced on gloo without a GPU: a
stand-in for the tests of the cooperative exchange (tests/coop_check.py).

install(store, rank) replaces torch.distributed's isend, irecv, send,
recv and batch_isend_irecv in this process (gloo underneath) with calls
that behave as NCCL's do where it matters to a correct program:

- tags are ignored: every message of a pair travels on tag 0, so the
  n-th send of rank a to rank b meets b's n-th receive from a, whatever
  their tags (NCCL matches a pair's operations in posting order);
- an unbatched send or receive blocks until the peer posts its
  matching operation (on NCCL it occupies the pair's stream until then);
- the sizes of matched operations must be equal;
- a mismatch, or a wait cycle among blocked ranks, raises RuntimeError
  naming the pair, the operation's number and both sides, instead of
  hanging; a peer that never posts its operation within `timeout`
  seconds is an error too.

A rank is blocked while it waits for a peer to post an operation: in an
unbatched send or receive (before it is posted to gloo), and in the
wait() of any operation (batched or not) whose match the peer has not
posted.  Once both ends are posted, the bytes move on gloo's threads.
A cycle is reported only when every rank on it waits for a key that is
still absent after its state was read: such a rank cannot move until
the next one does, and the last one waits for this rank, which is
blocked, so the cycle is a deadlock and never a race of the check.

Every posted operation is recorded in the store (one key per operation:
"nccl-rules/SRC-DST/sN" and "/rN"), which is how the other end checks
it.  Stricter than NCCL in one way: an unbatched operation blocks the
host, not only the pair's stream, until the peer posts its match.
Collectives are left alone (gloo's, as NCCL's, are matched by order).

`python3 tests/nccl_rules.py` is its self-test (2 gloo ranks): a
correct batch passes, both ranks posting a tagged isend first is a wait
cycle, and receives posted by tag in another order than the sends (which
gloo matches) are a size mismatch.
"""
import time

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

P = "nccl-rules"


class _Work:
    """An operation's work object.  wait() first waits, blocked (cycle-
    checked, timed out), until the peer posted the match of every
    operation of its batch and checks their sizes, then posts them all
    to gloo (so gloo never sees a mismatch, which aborts it), then
    waits on gloo's."""

    def __init__(self, rules, kind, t, peer, n, other, batch):
        self.rules, self.kind, self.t = rules, kind, t
        self.peer, self.n, self.other = peer, n, other
        self.batch = batch      # the works posted together (incl. this)
        self.work = None

    def _start(self):
        if self.work is not None:
            return
        for w in self.batch:
            w.rules._match(w.kind, w.t, w.peer, w.n, w.other)
        for w in self.batch:
            f = w.rules.orig["isend" if w.kind == "send" else "irecv"]
            w.work = f(w.t, w.peer, tag=0)

    def wait(self, *a, **k):
        self._start()
        self.work.wait()
        return True

    def is_completed(self):
        return self.work is not None and self.work.is_completed()


class Rules:
    def __init__(self, store, rank, timeout=30.0, prefix=P):
        self.store, self.me, self.timeout = store, rank, timeout
        self.p = prefix
        self.sent = {}       # peer -> sends posted to it
        self.recvd = {}      # peer -> receives posted from it
        self.orig = {n: getattr(c10d, n) for n in
                     ("isend", "irecv", "send", "recv",
                      "batch_isend_irecv")}

    @staticmethod
    def _nbytes(t):
        return t.numel() * t.element_size()

    def _has(self, key):
        return self.store.add(key, 0) > 0

    def _post(self, kind, t, peer):
        """Record a send or receive as posted; its number, and the key of
        the peer's matching one."""
        if kind == "send":
            n = self.sent.get(peer, 0)
            self.sent[peer] = n + 1
            key = f"{self.p}/{self.me}-{peer}/s{n}"
            other = f"{self.p}/{self.me}-{peer}/r{n}"
        else:
            n = self.recvd.get(peer, 0)
            self.recvd[peer] = n + 1
            key = f"{self.p}/{peer}-{self.me}/r{n}"
            other = f"{self.p}/{peer}-{self.me}/s{n}"
        self.store.add(key, self._nbytes(t) + 1)
        return n, other

    def _desc(self, kind, peer, n):
        src, dst = (self.me, peer) if kind == "send" else (peer, self.me)
        return (f"pair rank {src} -> rank {dst}, operation #{n} "
                f"(rank {self.me}'s {kind})")

    def _match(self, kind, t, peer, n, other):
        """Wait, blocked, until the peer posted its operation #n of the
        pair; check the sizes.  Fails on a wait cycle or the timeout."""
        what = self._desc(kind, peer, n)
        if not self._has(other):
            self._set_state(f"{peer}|{other}|{what}")
            end = time.monotonic() + self.timeout
            try:
                while not self._has(other):
                    cyc = self._cycle()
                    if cyc:
                        raise RuntimeError(
                            f"NCCL rules: wait cycle: {cyc}; each waits "
                            f"for the peer to post its match (operations "
                            f"match in posting order, tags ignored; an "
                            f"unbatched send/recv blocks until the peer "
                            f"posts its match)")
                    if time.monotonic() > end:
                        raise RuntimeError(
                            f"NCCL rules: {what}: rank {peer} did not "
                            f"post the matching operation within "
                            f"{self.timeout} s")
                    time.sleep(0.02)
            finally:
                self._set_state("-")
        theirs = self.store.add(other, 0) - 1
        if theirs != self._nbytes(t):
            raise RuntimeError(
                f"NCCL rules: {what}: size mismatch, {self._nbytes(t)} "
                f"bytes here, {theirs} bytes at rank {peer} (tags are "
                f"ignored: operations match in posting order)")

    def _set_state(self, v):
        self.store.set(f"{self.p}/state/{self.me}", v)
        self.store.add(f"{self.p}/has-state/{self.me}", 1)

    def _state(self, r):
        """(peer, awaited key, what) rank r waits for, or None."""
        if not self._has(f"{self.p}/has-state/{r}"):
            return None
        v = self.store.get(f"{self.p}/state/{r}").decode()
        if v == "-":
            return None
        peer, key, what = v.split("|", 2)
        return int(peer), key, what

    def _cycle(self):
        """A wait cycle through this rank, as text, or ''.  Each link's
        awaited key is checked absent after its state was read."""
        seen, r, path = set(), self.me, []
        while r not in seen:
            seen.add(r)
            st = self._state(r)
            if st is None or self._has(st[1]):
                return ""
            path.append(f"rank {r} waits in {st[2]}")
            r = st[0]
        return "; ".join(path) if r == self.me else ""

    def _one(self, kind, t, peer):
        """An unbatched operation: blocks until the peer posted its
        match, then goes to gloo."""
        n, other = self._post(kind, t, peer)
        batch = []
        w = _Work(self, kind, t, peer, n, other, batch)
        batch.append(w)
        w._start()
        return w

    # the replacements
    def isend(self, tensor, dst, group=None, tag=0):
        return self._one("send", tensor, dst)

    def irecv(self, tensor, src=None, group=None, tag=0):
        return self._one("recv", tensor, src)

    def send(self, tensor, dst, group=None, tag=0):
        self.isend(tensor, dst).wait()

    def recv(self, tensor, src=None, group=None, tag=0):
        self.irecv(tensor, src).wait()
        return src

    def batch_isend_irecv(self, p2p_op_list):
        works = []
        for op in p2p_op_list:
            kind = "send" if op.op in (self.isend, self.orig["isend"]) \
                else "recv"
            n, other = self._post(kind, op.tensor, op.peer)
            works.append(_Work(self, kind, op.tensor, op.peer, n, other,
                               works))
        return list(works)


def install(store, rank, timeout=30.0, prefix=P):
    """Enforce NCCL's point-to-point rules in this process (see above),
    with keys under prefix (one for each use on the same store); returns
    the Rules object."""
    r = Rules(store, rank, timeout, prefix)
    for mod in (dist, c10d):
        for n in ("isend", "irecv", "send", "recv", "batch_isend_irecv"):
            setattr(mod, n, getattr(r, n))
    return r


def uninstall(r):
    for mod in (dist, c10d):
        for n, f in r.orig.items():
            setattr(mod, n, f)


__all__ = ["install", "uninstall", "Rules", "torch"]


def _selftest_rank(rank, port, q):
    """Rank rank of the self-test: a correct batch passes; two ranks
    that both post a tagged isend first are a wait cycle; a batch whose
    sizes differ (tags would have matched them) is a size mismatch."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))), "scripts"))
    from gen_torch_ckpt import join_group
    store = join_group(port, rank, 2)
    peer = 1 - rank
    out = []

    def case(name, fn):
        r = install(store, rank, timeout=5.0, prefix=f"{P}/{name}")
        try:
            fn()
            out.append((name, "ok"))
        except RuntimeError as e:
            out.append((name, str(e)))
        finally:
            uninstall(r)

    def good():
        a = torch.full((4,), float(rank))
        b = torch.zeros(4)
        ops = [dist.P2POp(dist.isend, a, peer), dist.P2POp(dist.irecv, b,
                                                           peer)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        assert float(b[0]) == float(peer)

    def cycle():
        a, b = torch.ones(2), torch.zeros(2)
        ws = [dist.isend(a, peer, tag=1), dist.irecv(b, peer, tag=1)]
        for w in ws:
            w.wait()

    def sizes():
        # rank 0 sends 8 then 16 bytes (tags 1, 2); rank 1 posts its
        # receives by tag in the other order: gloo matches them, NCCL
        # does not
        if rank == 0:
            ops = [dist.P2POp(dist.isend, torch.ones(2), 1, tag=1),
                   dist.P2POp(dist.isend, torch.ones(4), 1, tag=2)]
        else:
            ops = [dist.P2POp(dist.irecv, torch.zeros(4), 0, tag=2),
                   dist.P2POp(dist.irecv, torch.zeros(2), 0, tag=1)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()

    case("good", good)
    case("cycle", cycle)
    dist.barrier()
    case("sizes", sizes)
    q.put((rank, out))
    q.close()
    q.join_thread()
    os._exit(0)     # skip destroy_process_group after the failed cases


def _selftest():
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))), "scripts"))
    import torch.multiprocessing as tmp
    from gen_torch_ckpt import free_port
    port = free_port()
    ctx = tmp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_selftest_rank, args=(r, port, q))
             for r in range(2)]
    for p in procs:
        p.start()
    got = dict(q.get(timeout=600) for _ in procs)
    for p in procs:
        p.join()
    status = 0
    for r in sorted(got):
        res = dict(got[r])
        print(f"rank {r}: {res}")
    good = all(dict(got[r])["good"] == "ok" for r in got)
    cyc = any("wait cycle" in dict(got[r])["cycle"] for r in got) and \
        all(dict(got[r])["cycle"] != "ok" for r in got)
    siz = all("size mismatch" in dict(got[r])["sizes"] for r in got)
    print(f"good batch passes: {good}; tagged isend first on both: a "
          f"wait cycle: {cyc}; receives by tag in another order: a size "
          f"mismatch on both: {siz}")
    if not (good and cyc and siz):
        status = 1
    return status


if __name__ == "__main__":
    import sys
    sys.exit(_selftest())
