# SPDX-License-Identifier: MIT
"""Cooperative reads for :class:`ckptfs.StorageReader`: of the ranks
whose plans need the same saved bytes, one (the owner) reads them from
the store and sends them to the others over the job's own
``torch.distributed`` process group (the default group; gloo, or NCCL
through the current CUDA device).

The unit shared is a *box*: a key's saved region (global offsets,
lengths) exactly as a ReadItem asks for it, or a bytes entry.  DDP
(every rank loads everything), HSDP's replica groups, TP-replicated
norms and the ``param_groups`` bytes all ask for identical boxes, so the
same bytes are fetched once per job instead of once per replica.

How it runs:

- ``prepare_local_plan``: each rank marks its plan with its global rank
  (``storage_data``), so the coordinator knows which rank each plan is
  and that every rank's reader takes part.
- ``prepare_global_plan`` (the coordinator): boxes needed by two or more
  ranks are cut along dim 0 into parts of at most the staging budget;
  each part gets one owner among the ranks that need it, largest parts
  first to the rank with the fewest bytes so far (its own reads
  included); parts are grouped into rounds in which no rank holds more
  than the budget.  Each rank's plan carries only its own parts.
- ``read_data``: a rank first reads what it alone needs, then for each
  of its rounds in order: reads the parts it owns (into its destination
  tensor where that is a contiguous CPU tensor of the saved dtype, else
  into staging), then every rank of the job, parts or none, joins one
  ``all_gather`` of a small status tensor (has its parts; can take the
  parts it needs), then the parts go, by one ``batch_isend_irecv``, from
  owners that have them to needers that can take them; the needers
  receive in place where they can.  Each rank posts its ops in part
  order and, within a part, in needer order: both ends of every pair
  derive that order from the plan, which is what NCCL matches on (it
  ignores tags, and a send waits for the peer's receive), so the same
  code is correct on gloo and on NCCL.  A rank that failed (a read, an
  allocation, a copy) still takes part in every later round, with
  failed statuses and no data, and raises at the end; its peers raise
  naming it.  A box is committed only when all its parts arrived.  A
  rank that dies or leaves the exchange fails the others' status
  ``all_gather`` (a closed connection, or the process group's
  timeout): they raise naming it, never hang.

Parts travel on ``comm_device()``: CUDA under NCCL, else the CPU.  The
owner reads into host memory (the store's bytes arrive there) and copies
to the device; a needer receives straight into its destination tensor
when that is a contiguous tensor of the saved dtype on that device.
"""
from __future__ import annotations

import io
import logging
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import torch

MARK = "ckptfs.coop"
_MAGIC = 0x636b        # "ck": the high bits of every status value
_seq = [0]             # exchanges this process has run (the same on all)
#: (fqn, global offsets, lengths); a bytes entry: (fqn, None, None)
Box = Tuple[str, Any, Any]
#: one part of a box: (tag, box, row_from, row_to, nbytes, owner,
#: needers, round); rows None: the whole box
Part = Tuple[int, Box, Any, Any, int, int, Tuple[int, ...], int]


def box_of(it: Any, bytes_type: Any) -> Box:
    """The saved region ReadItem it reads."""
    fqn = it.storage_index.fqn
    if it.type == bytes_type:
        return (fqn, None, None)
    off = tuple(int(o) + int(so) for o, so in
                zip(it.storage_index.offset, it.storage_offsets))
    return (fqn, off, tuple(int(x) for x in it.lengths))


def local_mark(plan: Any, enabled: bool) -> Any:
    """Mark plan (a rank's local plan) for the coordinator: this rank's
    global rank, when a process group is up and cooperation is on."""
    if not enabled or not _dist_up():
        return plan
    import dataclasses
    import torch.distributed as dist
    if plan.storage_data is not None:
        return plan         # someone else's: leave it alone
    return dataclasses.replace(plan, storage_data={
        MARK: {"rank": dist.get_rank()}})


def _dist_up() -> bool:
    try:
        import torch.distributed as dist
    except ImportError:     # pragma: no cover - torch without distributed
        return False
    return bool(dist.is_available() and dist.is_initialized())


def global_plan(plans: List[Any], bytes_type: Any,
                nbytes: Callable[[str], Tuple[int, int]],
                budget: int) -> List[Any]:
    """The coordinator's step: plans with their cooperative parts in
    storage_data, or plans unchanged when any rank did not mark its plan
    (no process group, cooperation off, or another reader), the ranks are
    not distinct, or nothing is shared.  nbytes(fqn) gives (item size,
    or 0 for a bytes entry; the entry's bytes)."""
    import dataclasses
    if len(plans) < 2:
        return plans
    ranks = []
    for p in plans:
        sd = p.storage_data
        if not isinstance(sd, dict) or MARK not in sd:
            return plans
        ranks.append(int(sd[MARK]["rank"]))
    if len(set(ranks)) != len(ranks):
        return plans
    needers: Dict[Box, List[int]] = {}
    own_bytes = {r: 0 for r in ranks}
    size_of: Dict[Box, Tuple[int, int]] = {}
    for r, p in zip(ranks, plans):
        seen = set()
        for it in p.items:
            b = box_of(it, bytes_type)
            if b in seen:
                continue
            seen.add(b)
            needers.setdefault(b, []).append(r)
            if b not in size_of:
                isz, whole = nbytes(b[0])
                if b[2] is None:            # bytes
                    size_of[b] = (whole, 0)
                    continue
                row = isz
                for x in b[2][1:]:
                    row *= x
                size_of[b] = (row * b[2][0], row) if b[2] else (isz, 0)
    shared = sorted((b for b, n in needers.items()
                     if len(n) > 1 and size_of[b][0] > 0),
                    key=lambda b: (b[0], b[1] or (), b[2] or ()))
    if not shared:
        return [dataclasses.replace(p, storage_data=None) for p in plans]
    for b, n in needers.items():
        if len(n) == 1 or not size_of[b][0]:
            for r in n:
                own_bytes[r] += size_of[b][0]
    # parts: a box larger than the budget is cut along dim 0
    raw: List[Tuple[Box, Any, Any, int]] = []
    for b in shared:
        total, row = size_of[b]
        if row and total > budget and b[2][0] > 1:
            step = max(1, budget // row)
            for a in range(0, b[2][0], step):
                z = min(b[2][0], a + step)
                raw.append((b, a, z, row * (z - a)))
        else:
            raw.append((b, None, None, total))
    # owners: largest first, to the needer with the fewest bytes so far
    owner: Dict[int, int] = {}
    load = dict(own_bytes)
    for i in sorted(range(len(raw)), key=lambda i: (-raw[i][3], i)):
        cand = needers[raw[i][0]]
        o = min(cand, key=lambda r: (load[r], r))
        owner[i] = o
        load[o] += raw[i][3]
    # rounds: in box order, no rank above the budget within a round
    parts: List[Part] = []
    held: Dict[int, int] = {}
    rnd = 0
    for i, (b, a, z, nb) in enumerate(raw):
        who = needers[b]
        if held and any(held.get(r, 0) + nb > budget for r in who):
            rnd += 1
            held = {}
        for r in who:
            held[r] = held.get(r, 0) + nb
        parts.append((i, b, a, z, nb, owner[i], tuple(who), rnd))
    mine: Dict[int, List[Part]] = {r: [] for r in ranks}
    for pt in parts:
        for r in pt[6]:
            mine[r].append(pt)
    # every rank joins every round's status all_gather, parts or none
    return [dataclasses.replace(p, storage_data={MARK: {
        "rank": r, "parts": mine[r], "rounds": rnd + 1}})
        for r, p in zip(ranks, plans)]


def parts_of(plan: Any) -> Optional[Tuple[List[Part], int]]:
    """This rank's cooperative parts (maybe none) and the job's number of
    rounds, from its final plan, or None: no exchange."""
    sd = plan.storage_data
    if not isinstance(sd, dict) or MARK not in sd or \
            "rounds" not in sd[MARK]:
        return None
    return list(sd[MARK]["parts"]), int(sd[MARK]["rounds"])


#: seconds a rank whose status exchange failed waits for the others to
#: report it too, before naming those that did not
_GRACE = 3.0


def _store() -> Any:
    """The default process group's store, or None."""
    try:
        import torch.distributed.distributed_c10d as c10d
        return c10d._get_default_store()
    except Exception:   # noqa: B902 - a private call: best effort
        return None


def comm_device() -> Any:
    """The device the exchange's tensors travel on: the current CUDA
    device under NCCL (which moves CUDA tensors only), else the CPU."""
    import torch.distributed as dist
    if str(dist.get_backend()) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


class Exchange:
    """One rank's side of the cooperative rounds of a plan."""

    def __init__(self, rank: int, parts: List[Part], bytes_type: Any,
                 read: Callable[[List[Tuple[Box, int, int, Any]]], None],
                 saved: Callable[[str], Any], rounds: int = 0) -> None:
        import torch.distributed as dist
        self.dist = dist
        self.rank = rank
        self.parts = parts
        self.bytes_type = bytes_type
        self.read = read        # [(box, row_from, row_to, buf)] -> None
        self.saved = saved      # fqn -> saved torch dtype
        self.rounds = max([rounds] + [p[7] + 1 for p in parts])
        self.seq = _seq[0]
        _seq[0] += 1
        self.dev = comm_device()
        self.failed: Optional[BaseException] = None
        self.failed_peer: Optional[Tuple[int, str]] = None
        self.incomplete: Set[Box] = set()   # a part of it did not arrive

    def boxes(self) -> Set[Box]:
        """The boxes this rank takes part in."""
        return {p[1] for p in self.parts}

    def run(self, items: Dict[Box, List[Tuple[Any, Any]]],
            planner: Any) -> None:
        """Run every round; items maps each shared box to its
        (ReadItem, resolved target) pairs on this rank.  Commits each
        item once its box is in, or hands bytes to the planner."""
        rounds: Dict[int, List[Part]] = {}
        for p in self.parts:
            rounds.setdefault(p[7], []).append(p)
        left: Dict[Box, int] = {}      # parts of each box still to come
        for p in self.parts:
            left[p[1]] = left.get(p[1], 0) + 1
        for r in range(self.rounds):
            self._round(r, rounds.get(r, []), items, planner, left)
        if self.failed is not None:
            raise self.failed
        if self.failed_peer is not None:
            peer, fqn = self.failed_peer
            raise OSError(5, f"ckptfs.StorageReader: rank {peer} could not "
                             f"read key '{fqn}' it was to share (see that "
                             f"rank's error)")

    def _buf(self, pt: Part, items: Dict[Box, List[Tuple[Any, Any]]]
             ) -> Tuple[Any, Any]:
        """The buffer part pt arrives in, and the destination tensor it
        is (a view of) (None: a buffer of its own, copied after)."""
        b, a, z = pt[1], pt[2], pt[3]
        if b[2] is None:
            return torch.empty(pt[4], dtype=torch.uint8,
                               device=self.dev), None
        dt = self.saved(b[0])
        shape = list(b[2]) if a is None else [z - a] + list(b[2][1:])
        for _, t in items.get(b, []):
            if (t.dtype == dt and t.device == self.dev and
                    t.is_contiguous() and list(t.shape) == list(b[2])):
                return (t if a is None else t[a:z]), t
        return torch.empty(shape, dtype=dt, device=self.dev), None

    @staticmethod
    def _raw(t: Any) -> Any:
        """t's bytes as a flat uint8 tensor (a view)."""
        return t.reshape(-1).view(torch.uint8) if t.numel() else \
            torch.empty(0, dtype=torch.uint8, device=t.device)

    def _statuses(self, rnd: int, have: bool, ready: bool
                  ) -> Dict[int, Tuple[bool, bool]]:
        """Every rank's (has its parts, can take parts) for round rnd:
        one all_gather of a one-element int64 over the default group.
        The value carries a mark, this exchange's number and the round,
        so a rank that is in another collective (it left the exchange)
        is an error naming it, never a status."""
        dist = self.dist
        me = ((_MAGIC << 48) | ((self.seq & 0xffff) << 32) |
              ((rnd & 0xfffffff) << 4) | (1 if have else 0) |
              (2 if ready else 0))
        mine = torch.tensor([me], dtype=torch.int64, device=self.dev)
        world = dist.get_world_size()
        got = [torch.zeros(1, dtype=torch.int64, device=self.dev)
               for _ in range(world)]
        store = _store()
        key = f"ckptfs-coop/{self.seq}/{rnd}"
        if store is not None:
            store.add(f"{key}/at/{self.rank}", 1)
        try:
            dist.all_gather(got, mine)
        except Exception as e:
            raise self._lost(store, key, world, rnd, e) from e
        out: Dict[int, Tuple[bool, bool]] = {}
        for r, t in enumerate(got):
            v = int(t.item())
            if v >> 4 != me >> 4:
                raise OSError(5, f"ckptfs.StorageReader: rank {r} is not in "
                                 f"round {rnd} of the cooperative exchange "
                                 f"(it left it, or runs another collective)")
            out[r] = (bool(v & 1), bool(v & 2))
        return out

    def _lost(self, store: Any, key: str, world: int, rnd: int,
              e: BaseException, among: Optional[Set[int]] = None
              ) -> OSError:
        """The error of a failed status exchange (a rank died or left
        it; the process group's timeout or a closed connection ended
        the all_gather), naming the ranks that did not reach the round
        or, when all did, those that did not also report the failure
        within a short grace (or, for the parts, those of the ranks in
        among that neither finished nor failed them).  Also logged: the caller's own collectives
        (DCP gathers every rank's error) may fail on the same rank and
        hide it."""
        gone: List[int] = []
        if store is not None:
            try:
                store.add(f"{key}/failed/{self.rank}", 1)

                def has(k: str) -> bool:
                    return bool(store.add(k, 0))
                peers = sorted(among) if among is not None else \
                    list(range(world))
                gone = [r for r in peers if not has(f"{key}/at/{r}")]
                if not gone:
                    end = time.monotonic() + _GRACE
                    while True:
                        gone = [r for r in peers
                                if not has(f"{key}/failed/{r}") and
                                not has(f"{key}/done/{r}")]
                        if not gone or time.monotonic() > end:
                            break
                        time.sleep(0.05)
            except Exception:   # noqa: B902 - the store went with it
                gone = []
        who = (f"rank {', '.join(map(str, gone))} died or left it"
               if gone else "a rank died or left it")
        err = OSError(5, f"ckptfs.StorageReader: rank {self.rank}: "
                         f"round {rnd} of the "
                         f"cooperative read failed: {who} ({e})")
        logging.getLogger("ckptfs").error("%s", err.strerror)
        return err

    def _round(self, rnd: int, parts: List[Part],
               items: Dict[Box, List[Tuple[Any, Any]]], planner: Any,
               left: Dict[Box, int]) -> None:
        dist, me = self.dist, self.rank
        bufs: Dict[int, Tuple[Any, Any]] = {}
        owned = [pt for pt in parts if pt[5] == me]
        # ok: this rank has the parts it owns; ready: it can take the
        # parts it needs.  A rank that failed earlier still serves its
        # own parts (its peers need them), but takes nothing.
        ok = ready = True
        for pt in sorted(parts):
            try:
                bufs[pt[0]] = self._buf(pt, items)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # noqa: B902 - re-raised at the end
                self._fail(e)
                if pt[5] == me:
                    ok = False
                else:
                    ready = False
        if self.failed is not None:
            ready = False
        if owned and ok:
            host = []
            for pt in owned:
                buf = bufs[pt[0]][0]
                if buf.device.type != "cpu":
                    # the store's bytes reach host memory first
                    buf = torch.empty(buf.shape, dtype=buf.dtype)
                host.append((pt, buf))
            try:
                self.read([(pt[1], pt[2], pt[3], buf) for pt, buf in host])
                for pt, buf in host:
                    dst = bufs[pt[0]][0]
                    if dst is not buf:
                        dst.copy_(buf)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # noqa: B902 - re-raised at the end
                self._fail(e)
                ok = False
        st = self._statuses(rnd, ok, ready)
        # The parts go where the owner has them and the needer can take
        # them.  Every rank posts its round's operations in one batch, in
        # part order and, within a part, in needer order: both ends of a
        # pair derive the same order from the plan, which is what NCCL
        # matches on (it ignores tags).  The status all_gather above
        # means the batch is never the group's first collective (NCCL's
        # batch_isend_irecv requires all ranks in that one).
        ops = []
        for pt in sorted(parts):
            if pt[5] == me:
                if ok:
                    raw = self._raw(bufs[pt[0]][0])
                    for r in sorted(pt[6]):
                        if r != me and st[r][1]:
                            ops.append(dist.P2POp(dist.isend, raw, r))
            elif ready and st[pt[5]][0]:
                ops.append(dist.P2POp(dist.irecv,
                                      self._raw(bufs[pt[0]][0]), pt[5]))
            elif ready and self.failed_peer is None:
                self.failed_peer = (pt[5], pt[1][0])
        if ops:
            key = f"ckptfs-coop/{self.seq}/{rnd}"
            try:
                for q in dist.batch_isend_irecv(ops):
                    q.wait()
            except Exception as e:
                # a peer died or left between the statuses and the parts
                raise self._lost(_store(), key, dist.get_world_size(), rnd,
                                 e, {op.peer for op in ops}) from e
            store = _store()
            if store is not None:
                store.add(f"{key}/done/{me}", 1)
        for pt in sorted(parts):
            b = pt[1]
            left[b] -= 1
            if not ((pt[5] == me and ok) or (ready and st[pt[5]][0])):
                self.incomplete.add(b)
                continue
            buf, placed = bufs[pt[0]]
            try:
                self._place(pt, buf, placed, items.get(b, []))
                # committed only once every part of the box is in
                if left[b] == 0 and b not in self.incomplete:
                    self._finish(b, buf, items.get(b, []), planner)
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # noqa: B902 - re-raised at the end
                self._fail(e)

    def _fail(self, e: BaseException) -> None:
        """Keep the first failure of this rank, raised after the rounds
        (which it still takes part in, so no peer waits for it)."""
        if self.failed is None:
            self.failed = e

    def _place(self, pt: Part, buf: Any, placed: Any,
               its: List[Tuple[Any, Any]]) -> None:
        """Copy part pt (in buf) into each destination of its box but the
        one buf is (a view of)."""
        b, a, z = pt[1], pt[2], pt[3]
        if b[2] is None:
            return
        for _, t in its:
            if t is placed:
                continue
            if a is not None:
                t[a:z].copy_(buf)
            elif list(t.shape) == list(buf.shape):
                t.copy_(buf)
            else:           # the whole box, as many items in another shape
                t.copy_(buf.reshape(t.shape))

    def _finish(self, b: Box, buf: Any, its: List[Tuple[Any, Any]],
                planner: Any) -> None:
        for it, t in its:
            if it.type == self.bytes_type:
                planner.load_bytes(it, io.BytesIO(
                    buf.cpu().numpy().tobytes()))
            else:
                planner.commit_tensor(it, t)
