# SPDX-License-Identifier: MIT
"""Make Debian's torch 1.13 distributed checkpointing importable on Python
3.11, without editing system files.

torch.distributed._shard.sharded_tensor.metadata declares
``tensor_properties: TensorProperties = field(default=TensorProperties())``,
which Python 3.11's dataclasses refuse ("mutable default"), so importing
torch.distributed._shard (and unpickling any DCP .metadata) fails.
install() adds an import hook that compiles that one module from its source
with the default turned into ``default_factory``; call it before anything
imports torch.distributed._shard.
"""
import importlib.abc
import importlib.machinery
import sys

_TARGET = "torch.distributed._shard.sharded_tensor.metadata"
_BAD = b"field(default=TensorProperties())"
_GOOD = b"field(default_factory=TensorProperties)"


class _PatchedLoader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname):
        # Always from the patched source, never the cached bytecode.
        src = self.get_data(self.path).replace(_BAD, _GOOD)
        return compile(src, self.path, "exec", dont_inherit=True)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.origin:
            spec.loader = _PatchedLoader(name, spec.origin)
        return spec


def install():
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
