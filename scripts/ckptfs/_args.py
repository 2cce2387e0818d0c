# SPDX-License-Identifier: MIT
"""Checking arguments before they reach C: integers through
``operator.index`` within the C type's range, paths through
``os.fsencode``, and errors that name the argument."""
from __future__ import annotations

import operator
import os
from typing import Dict, Iterable, List, Mapping, Optional, Set, Union

from .errors import CheckpointError

PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
#: index_cache=: a directory, True/None (the default one) or False (none).
IndexCacheArg = Union[PathArg, bool, None]

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def integer(name: str, value: object, lo: int, hi: int) -> int:
    """value as an int in [lo, hi]: TypeError when it is not an integer
    (a float, a str), ValueError (CheckpointError) naming the argument when
    it is out of range, worded as the ckptfs command words it for the
    option of the same name ("must be a whole number", "must be at most
    N", "must be at least N")."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not bool")
    try:
        v = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an integer, not "
                        f"{type(value).__name__}") from None
    if v < 0:
        raise CheckpointError(f"{name} must be a whole number, got '{v}'")
    if v > hi:
        raise CheckpointError(f"{name} must be at most {hi}, got '{v}'")
    if v < lo:
        raise CheckpointError(f"{name} must be at least {lo}, got '{v}'")
    return v


def path(name: str, value: object) -> bytes:
    """A str, bytes or os.PathLike path as bytes (os.fsencode); a NUL in
    it is a ValueError (CheckpointError), any other type a TypeError."""
    if not isinstance(value, (str, bytes, os.PathLike)):
        raise TypeError(f"{name} must be a str, bytes or os.PathLike path, "
                        f"not {type(value).__name__}")
    b = os.fsencode(os.fspath(value))
    if b"\0" in b:
        raise CheckpointError(f"{name} contains a NUL byte: {value!r}")
    if not b:
        raise CheckpointError(f"{name} needs a value")
    return b


def text(name: str, value: object) -> bytes:
    """A str (UTF-8) or bytes argument such as a prefix, without NUL."""
    if isinstance(value, str):
        b = value.encode("utf-8", "surrogateescape")
    elif isinstance(value, bytes):
        b = value
    else:
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if b"\0" in b:
        raise CheckpointError(f"{name} contains a NUL byte: {value!r}")
    return b


def world_rank(world: object, rank: object, ranks: Optional[Iterable[object]]
               ) -> tuple[int, int, Optional[List[int]]]:
    """(world, rank, ranks) checked as ``ckptfs mount`` checks --world,
    --rank and --ranks, refusing what it refuses with its message: world
    in [1, 2**32-1]; rank with a world (None: not given); a world above 1
    with a rank or ranks (rank 0 of it is not a default; a world of 1
    alone is rank 0, the only one, for the CLI too); ranks with a world, distinct, not empty, each
    in [0, world); not both rank and ranks.  world None is 1."""
    if world is not None:
        w = integer("world", world, 0, U32_MAX)
        if w == 0:
            raise CheckpointError("world must be at least 1, got 0")
    if ranks is not None:
        if rank is not None:
            raise CheckpointError("give either rank or ranks, not both")
        if isinstance(ranks, (str, bytes)):
            raise TypeError("ranks must be a list of integers, not "
                            f"{type(ranks).__name__}")
        lst = list(ranks)
        for r in lst:
            if isinstance(r, bool) or not _is_index(r):
                integer("ranks[]", r, 0, U32_MAX)   # the TypeError
        vals = [operator.index(r) for r in lst]  # type: ignore[arg-type]
        spec = ",".join(str(r) for r in vals)
        if not vals:
            raise CheckpointError("ranks needs a value")
        if world is None:
            raise CheckpointError("world is required with ranks")
        for r in vals:
            if r < 0:
                raise CheckpointError("ranks must be a list such as 0-7 or "
                                      f"0,2,4-6, got '{spec}'")
            if r >= U32_MAX:
                raise CheckpointError(f"ranks '{spec}': rank {r} is more "
                                      "than the largest rank, "
                                      f"{U32_MAX - 1}")
        seen: Set[int] = set()
        for r in sorted(vals):
            if r in seen:
                raise CheckpointError(f"ranks '{spec}': rank {r} is listed "
                                      "twice")
            seen.add(r)
        for r in vals:
            if r >= w:
                raise CheckpointError(f"ranks '{spec}': rank {r} is out of "
                                      f"range: need 0 <= rank < world ({w})")
        return w, 0, vals
    if rank is not None:
        r = integer("rank", rank, 0, U32_MAX)
        if world is None:
            raise CheckpointError("world is required with rank")
    elif world is not None and w > 1:
        raise CheckpointError("rank is required with world")
    else:
        r = 0
    if world is None:
        w = 1
    if r >= w:
        raise CheckpointError(f"rank {r} is out of range: need 0 <= rank < "
                              f"world ({w})")
    return w, r, None


def _is_index(value: object) -> bool:
    try:
        operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True


def threads(value: object) -> Optional[int]:
    """A count in [1, 4096], or None for None or 0 (the default: this
    process's share of the CPUs)."""
    if value is None:
        return None
    return integer("threads", value, 0, 4096) or None


#: The S3 settings as keyword arguments (the mount's -o keys of the same
#: names), and each one's kind: "str", "count" (an int >= 1), "size"
#: (bytes, an int >= 1), "retries" (an int >= 0) or "bool".  Credentials
#: are not among them: they come from the chain the AWS SDKs walk
#: (docs/s3-credentials.md); s3_no_sign_request=True asks for unsigned
#: requests (public buckets).
S3_OPTIONS: Dict[str, str] = {
    "s3_endpoint": "str", "s3_region": "str", "s3_profile": "str",
    "s3_credentials_file": "str", "s3_config_file": "str",
    "s3_parallel": "count", "s3_part_size": "size", "s3_merge_gap": "size",
    "s3_retries": "retries", "s3_timeout_ms": "count",
    "s3_no_sign_request": "bool",
    "s3_connect_timeout_ms": "count", "s3_low_speed_limit": "count",
    "s3_low_speed_time": "count", "s3_open_deadline_ms": "count",
    "s3_read_deadline_ms": "count", "s3_list_max_keys": "count",
    "s3_ca_bundle": "str",
    "s3_addressing_style": "str",
    # Azure (az://ACCOUNT/CONTAINER/PREFIX, docs/azure.md); the s3_
    # settings but the AWS ones apply to it too.
    "az_endpoint": "str", "az_anonymous": "bool",
}

#: What an object-store root begins with (used as given, never a local
#: path): S3, Azure's az:// and its blob URLs.
REMOTE_PREFIXES = (b"s3://", b"az://", b"http://", b"https://")


def is_remote(path: bytes) -> bool:
    """Whether path names an object store, not a local directory."""
    return path.startswith(REMOTE_PREFIXES)


def shown(path: bytes) -> bytes:
    """path as messages may show it: an Azure URL less its query (a SAS
    token, a secret), as libckptfs shows it."""
    if path.startswith(REMOTE_PREFIXES[1:]) and b"?" in path:
        return path.split(b"?", 1)[0]
    return path


def s3_options(values: Dict[str, object]) -> Dict[str, Union[bytes, int]]:
    """The S3 keyword arguments given (not None), checked: strings as
    bytes (no NUL, not empty), numbers in the C fields' ranges (the
    library checks the real bounds and names them).  A name that is not
    an S3 option is a TypeError, as for any unexpected keyword."""
    out: Dict[str, Union[bytes, int]] = {}
    for name, v in values.items():
        kind = S3_OPTIONS.get(name)
        if kind is None:
            raise TypeError(f"unexpected keyword argument {name!r}")
        if v is None:
            continue
        if kind == "bool":
            if not isinstance(v, bool):
                raise TypeError(f"{name} must be True or False, not "
                                f"{type(v).__name__}")
            if v:
                out[name] = 1
        elif kind == "str":
            out[name] = path(name, v)
        elif kind == "size":
            out[name] = integer(name, v, 0, U64_MAX)
            if not out[name]:
                raise CheckpointError(f"{name} must be a size such as "
                                      f"262144, 256K or 8M, got '{v}'")
        else:
            out[name] = integer(name, v, 0 if kind == "retries" else 1,
                                U32_MAX - 1)
    return out


#: The most memory -o cache_mb (and cache_mb=) may give, in MiB: 1 TiB.
CACHE_MB_MAX = 1 << 20


def cache_mb(value: object) -> Optional[int]:
    """None (libckptfs's default, 1024), or MiB in [1, CACHE_MB_MAX], the
    bounds and message of ``-o cache_mb``."""
    if value is None:
        return None
    v = integer("cache_mb", value, 0, U32_MAX)
    if not 1 <= v <= CACHE_MB_MAX:
        raise CheckpointError(f"cache_mb must be between 1 and "
                              f"{CACHE_MB_MAX} (MiB), got {v}")
    return v


def s3_only(path: bytes, given: Mapping[str, object]) -> None:
    """Refuse S3 settings for a checkpoint that is not s3://..., as the
    ckptfs command does: they would be silently ignored."""
    if is_remote(path):
        return
    for name, v in given.items():
        if v is not None:
            raise CheckpointError(f"{name} is only for s3:// checkpoints, "
                                  f"not '{os.fsdecode(path)}'")


#: The environment variable that names the index cache directory (empty:
#: no cache) when ``index_cache`` is not given.
INDEX_CACHE_ENV = "CKPTFS_INDEX_CACHE"


#: statfs f_type of filesystems shared between nodes, where flock is
#: unreliable and a "node-local" cache would be cluster-wide: NFS, SMB and
#: CIFS, Lustre, GPFS, CephFS, AFS, 9p, BeeGFS, and FUSE (sshfs, s3fs,
#: gcsfuse, JuiceFS...).
NETWORK_FS = {0x6969: "nfs", 0x517B: "smb", 0xFF534D42: "cifs",
              0xFE534D42: "smb2", 0x0BD00BD0: "lustre", 0x47504653: "gpfs",
              0x00C36400: "ceph", 0x5346414F: "afs", 0x01021997: "9p",
              0x19830326: "beegfs", 0x65735546: "fuse"}


def network_fs(p: bytes) -> Optional[str]:
    """The name of the network filesystem holding p (or its nearest
    existing parent), or None for a local one or when statfs fails."""
    import ctypes
    import ctypes.util
    while p and not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    except OSError:
        return None
    buf = ctypes.create_string_buffer(256)     # struct statfs, f_type first
    if libc.statfs(p, buf) != 0:
        return None
    ftype = ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF
    return NETWORK_FS.get(ftype)


def default_index_cache() -> Optional[bytes]:
    """The node-local index cache directory when none is given:
    ``$CKPTFS_INDEX_CACHE`` (set but empty: None, no cache), else
    ``$XDG_CACHE_HOME/ckptfs``, else ``~/.cache/ckptfs``; but when that
    one is on a network filesystem (:data:`NETWORK_FS`: a home on NFS is
    common on clusters), ``/var/tmp/ckptfs-UID`` instead, with a warning
    saying so."""
    env = os.environb.get(INDEX_CACHE_ENV.encode())
    if env is not None:
        return env or None
    xdg = os.environb.get(b"XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        d = os.path.join(xdg, b"ckptfs")
    else:
        home = os.path.expanduser(b"~")
        if home == b"~" or not home:
            return None
        d = os.path.join(home, b".cache", b"ckptfs")
    fs = network_fs(d)
    if fs is None:
        return d
    local = b"/var/tmp/ckptfs-%d" % os.getuid()
    import warnings
    warnings.warn(f"ckptfs: {os.fsdecode(d)} is on a network filesystem "
                  f"({fs}), where the index cache would not be node-local; "
                  f"using {os.fsdecode(local)} (set CKPTFS_INDEX_CACHE or "
                  f"index_cache= to choose)", stacklevel=3)
    return local


def index_cache(value: object) -> Optional[bytes]:
    """The index cache directory as bytes: None or True for the default
    (:func:`default_index_cache`), False for none, else a path."""
    if value is None or value is True:
        return default_index_cache()
    if value is False:
        return None
    return path("index_cache", value)


def choice(name: str, value: object, allowed: tuple[Optional[str], ...]
           ) -> Optional[str]:
    """value, which must be one of allowed (None among them: may be
    left out).  The message is the ckptfs command's for the option of
    the same name: "dtype must be float32 or bfloat16, got 'x'"."""
    if value not in allowed:
        names = " or ".join(str(a) for a in allowed if a is not None)
        raise CheckpointError(f"{name} must be {names}, got '{value}'")
    return value  # type: ignore[return-value]


def prefix(value: object) -> Optional[bytes]:
    """A prefix= argument: None, or a non-empty str/bytes without NUL."""
    if value is None:
        return None
    b = text("prefix", value)
    if not b:
        raise CheckpointError("prefix must not be empty")
    return b


#: Where launchers say how many processes of the job run on this node:
#: torchrun, Open MPI, MPICH and Intel MPI, MVAPICH, Slurm (one count).
LOCAL_SIZE_VARS = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE",
                   "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE",
                   "SLURM_NTASKS_PER_NODE")


def local_processes() -> int:
    """The processes of the job on this node, as the first of
    LOCAL_SIZE_VARS set to a positive integer says; 1 when none is."""
    for var in LOCAL_SIZE_VARS:
        try:
            n = int(os.environ.get(var, ""))
        except ValueError:
            continue
        if n > 0:
            return n
    return 1


def default_threads(path: Optional[bytes] = None) -> int:
    """This process's share of the CPUs: the CPUs it may run on divided
    by the processes of the job on this node (local_processes(): 8 ranks
    on 2 CPUs start 8 readers, not 16 that contend), at least 1.  For an
    object store (path ``s3://...``) 0: libckptfs then runs as many
    readers as GETs may be in flight (s3_parallel), since they wait on
    the network, not on a CPU."""
    if path is not None and is_remote(path):
        return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, cpus // local_processes())
