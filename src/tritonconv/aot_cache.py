"""AOTAutograd's on-disk cache for compiled graphs that hold tritonconv's convolutions.

Under ``torch.compile`` each convolution is one call of ``functional._convolution_in_graph``
in Dynamo's graph. AOTAutograd caches a compiled graph (forward, backward and their Inductor
code) only when every function in it is one it knows to be safe to key on by name: PyTorch's
own, or a function named in ``torch._inductor.config.unsafe_marked_cacheable_functions``
with a string that stands for everything its result depends on. Unmarked, every graph with a
convolution of ours bypassed the cache, so a second run of a script traced and lowered its
graphs again (session 16: 5.1 s against 2.5 s with ``nn.Conv2d`` for an 8-convolution
stack).

:func:`mark` names the function with a digest of what a traced convolution depends on beyond
the call's own arguments (which are in the graph, and so in the key): tritonconv's source
files, its cache directory's files (recorded algorithm choices, tuned configs: name, size and
modification time) and the ``TRITONCONV_*`` environment. A change to any of them makes new
keys, and the graph is traced again. PyTorch's version, the GPU and Triton's version are in
PyTorch's part of the key. Set ``TRITONCONV_AOT_CACHE=0`` to leave the function unmarked.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path


@functools.cache
def _source_digest() -> str:
    """The digest of tritonconv's own source files (once a process: they do not change)."""
    digest = hashlib.sha256()
    root = Path(__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _state() -> tuple:
    """What else a traced convolution reads: the cache directory's files and the environment."""
    from .choice import cache_dir

    directory = cache_dir()
    files = []
    if directory.is_dir():
        for path in sorted(directory.iterdir()):
            if path.is_file():
                stat = path.stat()
                files.append((path.name, stat.st_size, stat.st_mtime_ns))
    environment = sorted((k, v) for k, v in os.environ.items() if k.startswith("TRITONCONV_"))
    return tuple(files), tuple(environment)


def digest() -> str:
    """The string :func:`mark` keys a function with."""
    state = hashlib.sha256(repr(_state()).encode()).hexdigest()
    return f"tritonconv-{_source_digest()[:24]}-{state[:24]}"


def mark(fn) -> bool:
    """Name ``fn`` (a module-level function) as cacheable with :func:`digest`, anew at each
    call (the state may have changed since); True where marked."""
    if os.environ.get("TRITONCONV_AOT_CACHE", "1") == "0":
        return False
    import torch._inductor.config as config

    marked = getattr(config, "unsafe_marked_cacheable_functions", None)
    if not isinstance(marked, dict):  # (a torch without it)
        return False
    name = f"{fn.__module__}.{fn.__name__}"
    value = digest()
    if marked.get(name) != value:
        config.unsafe_marked_cacheable_functions = {**marked, name: value}
    return True
