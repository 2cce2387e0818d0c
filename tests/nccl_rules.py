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

Every posted operation is recorded in the store (one key per operation:
"nccl-rules/SRC-DST/sN" and "/rN"), which is how the other end checks
it.  Stricter than NCCL in one way: a batch's receives wait, on the host,
until the peer has posted the matching sends (in NCCL they wait on the
stream); the exchange waits on its batch at once, so nothing depends on
it.  Collectives are left alone (gloo's, as NCCL's, are matched by
order).
"""
import time

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

P = "nccl-rules"


class _Done:
    """A finished operation, as an isend's work object."""

    def __init__(self, works):
        self.works = works

    def wait(self, *a, **k):
        for w in self.works:
            w.wait()
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self.works)


class Rules:
    def __init__(self, store, rank, timeout=30.0, prefix=P):
        self.store, self.me, self.timeout = store, rank, timeout
        self.p = prefix
        self.blocked = 0     # blocked/<me>'s value
        self.sent = {}       # peer -> sends posted to it
        self.recvd = {}      # peer -> receives posted from it
        self.orig = {n: getattr(c10d, n) for n in
                     ("isend", "irecv", "send", "recv",
                      "batch_isend_irecv")}

    @staticmethod
    def _nbytes(t):
        return t.numel() * t.element_size()

    def _post(self, kind, t, peer):
        """Record a send or receive; its key and the peer's matching
        one."""
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

    def _match(self, kind, t, peer, n, other, blocking):
        """Wait until the peer posted its operation #n of the pair; check
        the sizes.  While blocking, say so in the store, and fail on a
        wait cycle."""
        what = self._desc(kind, peer, n)
        if blocking:
            self._block(peer, what)
        end = time.monotonic() + self.timeout
        try:
            while not self.store.add(other, 0):
                if blocking:
                    cyc = self._cycle()
                    if cyc:
                        raise RuntimeError(
                            f"NCCL rules: wait cycle: {cyc}; "
                            f"an unbatched send/recv blocks until the "
                            f"peer posts its match")
                if time.monotonic() > end:
                    raise RuntimeError(
                        f"NCCL rules: {what}: rank {peer} did not post "
                        f"the matching operation within {self.timeout} s")
                time.sleep(0.02)
        finally:
            if blocking:
                self._block(-1, "")
        theirs = self.store.add(other, 0) - 1
        if theirs != self._nbytes(t):
            raise RuntimeError(
                f"NCCL rules: {what}: size mismatch, {self._nbytes(t)} "
                f"bytes here, {theirs} bytes at rank {peer} (tags are "
                f"ignored: operations match in posting order)")

    def _block(self, peer, what):
        """Say in the store whom this rank waits for (peer -1: nobody).
        Counters only (torch 1.13's store has no check()): blocked/R is
        peer + 1, written with add()."""
        if what:
            self.store.set(f"{self.p}/what/{self.me}", what)
        self.store.add(f"{self.p}/blocked/{self.me}",
                       peer + 1 - self.blocked)
        self.blocked = peer + 1

    def _cycle(self):
        """A cycle of blocked ranks through this one, as text, or ''."""
        seen, r, path = set(), self.me, []
        while r not in seen:
            seen.add(r)
            peer = self.store.add(f"{self.p}/blocked/{r}", 0) - 1
            if peer < 0:
                return ""
            what = self.store.get(f"{self.p}/what/{r}").decode()
            path.append(f"rank {r} waits in {what}")
            r = peer
        return "; ".join(path) if r == self.me else ""

    def _one(self, kind, t, peer, blocking):
        n, other = self._post(kind, t, peer)
        self._match(kind, t, peer, n, other, blocking)
        f = self.orig["isend" if kind == "send" else "irecv"]
        return f(t, peer, tag=0)

    # the replacements
    def isend(self, tensor, dst, group=None, tag=0):
        return _Done([self._one("send", tensor, dst, True)])

    def irecv(self, tensor, src=None, group=None, tag=0):
        return _Done([self._one("recv", tensor, src, True)])

    def send(self, tensor, dst, group=None, tag=0):
        self.isend(tensor, dst).wait()

    def recv(self, tensor, src=None, group=None, tag=0):
        self.irecv(tensor, src).wait()
        return src

    def batch_isend_irecv(self, p2p_op_list):
        posted = []
        for op in p2p_op_list:
            kind = "send" if op.op in (self.isend, self.orig["isend"]) \
                else "recv"
            posted.append((kind, op, *self._post(kind, op.tensor,
                                                 op.peer)))
        works = []
        for kind, op, n, other in posted:
            self._match(kind, op.tensor, op.peer, n, other, False)
            f = self.orig["isend" if kind == "send" else "irecv"]
            works.append(_Done([f(op.tensor, op.peer, tag=0)]))
        return works


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
