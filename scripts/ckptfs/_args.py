# SPDX-License-Identifier: MIT
"""Checking arguments before they reach C: integers through
``operator.index`` within the C type's range, paths through
``os.fsencode``, and errors that name the argument."""
from __future__ import annotations

import operator
import os
from typing import Dict, Iterable, List, Optional, Union

from .errors import CheckpointError

PathArg = Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"]
#: index_cache=: a directory, True/None (the default one) or False (none).
IndexCacheArg = Union[PathArg, bool, None]

U32_MAX = 2**32 - 1
U64_MAX = 2**64 - 1


def integer(name: str, value: object, lo: int, hi: int) -> int:
    """value as an int in [lo, hi]: TypeError when it is not an integer
    (a float, a str), ValueError (CheckpointError) naming the argument when
    it is out of range."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, not bool")
    try:
        v = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an integer, not "
                        f"{type(value).__name__}") from None
    if not lo <= v <= hi:
        raise CheckpointError(f"{name} must be in [{lo}, {hi}], got {v}")
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
        raise CheckpointError(f"{name} is empty")
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
    """(world, rank, ranks) checked: world in [1, 2**32-1], each rank in
    [0, world), ranks distinct and not empty, and not both rank and
    ranks."""
    w = integer("world", world, 1, U32_MAX)
    if ranks is not None:
        if rank is not None:
            raise TypeError("give rank or ranks, not both")
        if isinstance(ranks, (str, bytes)):
            raise TypeError("ranks must be a list of integers, not "
                            f"{type(ranks).__name__}")
        lst = [integer("ranks[]", r, 0, U32_MAX) for r in ranks]
        if not lst:
            raise CheckpointError("ranks is empty")
        for r in lst:
            if r >= w:
                raise CheckpointError(f"rank {r} is out of range: need 0 <= "
                                      f"rank < world ({w})")
        if len(set(lst)) != len(lst):
            raise CheckpointError(f"ranks must be distinct, got {lst}")
        return w, 0, lst
    r = integer("rank", 0 if rank is None else rank, 0, U32_MAX)
    if r >= w:
        raise CheckpointError(f"rank {r} is out of range: need 0 <= rank < "
                              f"world ({w})")
    return w, r, None


def threads(value: object) -> Optional[int]:
    """A count in [1, 4096], or None for None or 0 (the default: this
    process's share of the CPUs)."""
    if value is None:
        return None
    return integer("threads", value, 0, 4096) or None


#: The S3 settings as keyword arguments (the mount's -o keys of the same
#: names), and each one's kind: "str", "count" (an int >= 1), "size"
#: (bytes, an int >= 1) or "retries" (an int >= 0).  Credentials are not
#: among them: they come from the AWS environment variables or files.
S3_OPTIONS: Dict[str, str] = {
    "s3_endpoint": "str", "s3_region": "str", "s3_profile": "str",
    "s3_credentials_file": "str", "s3_config_file": "str",
    "s3_parallel": "count", "s3_part_size": "size", "s3_merge_gap": "size",
    "s3_retries": "retries", "s3_timeout_ms": "count",
    "s3_connect_timeout_ms": "count", "s3_low_speed_limit": "count",
    "s3_low_speed_time": "count", "s3_open_deadline_ms": "count",
    "s3_read_deadline_ms": "count", "s3_list_max_keys": "count",
}


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
        if kind == "str":
            out[name] = path(name, v)
        elif kind == "size":
            out[name] = integer(name, v, 1, U64_MAX)
        else:
            out[name] = integer(name, v, 0 if kind == "retries" else 1,
                                U32_MAX - 1)
    return out


def cache_mb(value: object) -> Optional[int]:
    """None (libckptfs's default, 1024), or MiB in [1, 2**44 - 1]."""
    if value is None:
        return None
    return integer("cache_mb", value, 1, (U64_MAX >> 20))


#: The environment variable that names the index cache directory (empty:
#: no cache) when ``index_cache`` is not given.
INDEX_CACHE_ENV = "CKPTFS_INDEX_CACHE"


def default_index_cache() -> Optional[bytes]:
    """The node-local index cache directory when none is given:
    ``$CKPTFS_INDEX_CACHE`` (set but empty: None, no cache), else
    ``$XDG_CACHE_HOME/ckptfs``, else ``~/.cache/ckptfs``."""
    env = os.environb.get(INDEX_CACHE_ENV.encode())
    if env is not None:
        return env or None
    xdg = os.environb.get(b"XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return os.path.join(xdg, b"ckptfs")
    home = os.path.expanduser(b"~")
    if home == b"~" or not home:
        return None
    return os.path.join(home, b".cache", b"ckptfs")


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
    """value, which must be one of allowed."""
    if value not in allowed:
        names = " or ".join(repr(a) for a in allowed)
        raise CheckpointError(f"{name} must be {names}, not {value!r}")
    return value  # type: ignore[return-value]


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
    if path is not None and path.startswith(b"s3://"):
        return 0
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, cpus // local_processes())
