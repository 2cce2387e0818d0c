# SPDX-License-Identifier: MIT
"""The exceptions ckptfs raises.  Every one is a :class:`Error` carrying
what libckptfs reported as fields (``code``, ``path``, ``key``,
``offset``); the class is chosen from the code, never from the message:

- :class:`CheckpointError` (also a :class:`ValueError`): the checkpoint is
  bad (malformed, inconsistent, refused) or an argument is;
- :class:`ReadError` (also an :class:`OSError`, with ``errno`` set): the
  bytes could not be read (a data file truncated or replaced since it was
  opened, an I/O error, a ``verify`` mismatch);
  :class:`PermissionDeniedError` (a ReadError and a
  :class:`PermissionError`) when the code is EACCES or EPERM;
- :class:`NotFoundError` (also a :class:`FileNotFoundError`): the
  checkpoint opened does not exist.  A directory that exists but holds no
  checkpoint is a CheckpointError, as is a checkpoint missing a data file.

Arguments of the wrong type raise :class:`TypeError`, as Python does.
"""
from __future__ import annotations

import errno as _errno
import os
from typing import Any, Optional

__all__ = ["Error", "CheckpointError", "ReadError", "NotFoundError",
           "PermissionDeniedError"]

#: Codes that mean "the bytes could not be read", not "the input is bad".
IO_CODES = frozenset({
    _errno.EIO, _errno.EACCES, _errno.EPERM, _errno.EMFILE, _errno.ENFILE,
    _errno.ESTALE, _errno.ENODEV, _errno.ENXIO, _errno.ETIMEDOUT,
    _errno.ECONNRESET, _errno.ECONNREFUSED, _errno.EHOSTUNREACH,
    _errno.ENETUNREACH, _errno.EAGAIN, _errno.EBADF, _errno.EINTR,
    _errno.ENOSPC, _errno.EROFS,
})


class Error(Exception):
    """Base of ckptfs's errors.

    Attributes:
        code: the errno value libckptfs returned (``errno.EINVAL``,
            ``errno.EIO``, ...); 0 for a check made in Python.
        path: the file (or checkpoint directory) concerned, or None.
        key: the checkpoint key (FQN) concerned, or None: set whenever
            the message names one ("key 'K'"), refusals at open included,
            as libckptfs recorded it (a key that is not UTF-8 decoded
            with surrogateescape).
        offset: the byte offset in ``path`` concerned, or None.
    """

    code: int
    path: Optional[str]
    key: Optional[str]
    offset: Optional[int]

    def __init__(self, message: str, *, code: int = 0,
                 path: Optional[str] = None, key: Optional[str] = None,
                 offset: Optional[int] = None) -> None:
        super().__init__(message)
        self._fields(message, code, path, key, offset)

    def _fields(self, message: str, code: int, path: Optional[str],
                key: Optional[str], offset: Optional[int]) -> None:
        self.message = message
        self.code = code
        self.path = path
        self.key = key
        self.offset = offset

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> Any:
        # Picklable with its fields: torch.distributed.checkpoint gathers
        # each rank's exception to every rank (pickle), and the default
        # reduce calls __init__ with OSError's positional args.
        return (_rebuild, (type(self), self.message, self.code, self.path,
                           self.key, self.offset))


def _rebuild(cls: Any, message: str, code: int, path: Optional[str],
             key: Optional[str], offset: Optional[int]) -> "Error":
    """An Error of class cls with these fields (unpickling)."""
    e: Error = cls(message, code=code, path=path, key=key, offset=offset)
    return e


class CheckpointError(Error, ValueError):
    """A bad checkpoint (malformed, inconsistent or refused metadata, a
    missing or short data file, no key matching a prefix) or a bad
    argument value.  The message names the file, the key and the fact."""


class ReadError(Error, OSError):
    """Bytes that could not be read: ``errno`` is the code (usually EIO),
    the message names the file, the offset and the key."""

    def __init__(self, message: str, *, code: int = _errno.EIO,
                 path: Optional[str] = None, key: Optional[str] = None,
                 offset: Optional[int] = None) -> None:
        OSError.__init__(self, code, message)
        self._fields(message, code, path, key, offset)

    def __str__(self) -> str:
        return self.message


class PermissionDeniedError(ReadError, PermissionError):
    """A file or directory that may not be read (EACCES, EPERM)."""


class NotFoundError(Error, FileNotFoundError):
    """The checkpoint path given does not exist (ENOENT): ``errno`` and
    ``filename`` are set, as for any FileNotFoundError."""

    def __init__(self, message: str, *, code: int = _errno.ENOENT,
                 path: Optional[str] = None, key: Optional[str] = None,
                 offset: Optional[int] = None) -> None:
        OSError.__init__(self, code, message, path)
        self._fields(message, code, path, key, offset)

    def __str__(self) -> str:
        return self.message


def _same_path(a: Optional[str], b: Optional[str]) -> bool:
    """Whether a and b are the same local path (an s3:// root never is:
    what is missing there is a file an option names, or an object)."""
    return a is not None and b is not None and \
        not b.startswith(("s3://", "az://", "http://", "https://")) and \
        os.path.normpath(os.path.abspath(a)) == \
        os.path.normpath(os.path.abspath(b))


def from_code(code: int, message: str, path: Optional[str] = None,
              key: Optional[str] = None,
              offset: Optional[int] = None,
              opened: Optional[str] = None) -> BaseException:
    """The exception for a libckptfs failure: MemoryError for ENOMEM,
    NotFoundError for ENOENT of the local path opened itself (opened: the
    checkpoint path given, when this is the failure to open it),
    PermissionDeniedError for EACCES and EPERM, ReadError for another I/O
    code, CheckpointError for any other (ENOENT of a data file
    included)."""
    if code == _errno.ENOMEM:
        return MemoryError(message)
    if code == _errno.ENOENT and _same_path(path, opened):
        return NotFoundError(message, code=code, path=path, key=key,
                             offset=offset)
    if code in (_errno.EACCES, _errno.EPERM):
        return PermissionDeniedError(message, code=code, path=path, key=key,
                                     offset=offset)
    cls = ReadError if code in IO_CODES else CheckpointError
    return cls(message, code=code, path=path, key=key, offset=offset)


def from_lib(err: object, fallback: str = "",
             opened: Optional[str] = None) -> BaseException:
    """The exception for a ``struct ckpt_error`` (ckptfs._lib.Error);
    opened as for :func:`from_code`."""
    from . import _lib
    assert isinstance(err, _lib.Error)
    text = err.message.decode("utf-8", "replace") or fallback or \
        os.strerror(err.code)
    path = os.fsdecode(err.path) if err.path else None
    key = err.key.decode("utf-8", "surrogateescape") if err.key else None
    off = None if err.offset == _lib.NO_OFFSET else int(err.offset)
    return from_code(int(err.code) or _errno.EIO, text, path, key, off,
                     opened)
