"""Backend bisection of PT2 repros, sandboxed (pure Python: no Django imports anywhere in this package).

- extract: pick the repro from an issue's Markdown (`extract_repro`).
- harness: run it under eager, backend=eager, aot_eager, aot_eager_decomp_partition,
  its crossref variant and inductor (`bisect`), through a warm fork server.
- sandbox / child / forkserver: how each mode runs isolated.
- verdict: the first failing mode -> labels with RUBRIC rule ids.

torch is imported only by the fork server and its children, never by importing this package.
"""

from .extract import Repro, detect_style, extract_repro, names_cuda
from .harness import ForkServer, ForkServerError, Report, SandboxRefused, bisect, shared_server
from .sandbox import Limits, SandboxError

__all__ = [
    "ForkServer",
    "ForkServerError",
    "Limits",
    "Report",
    "Repro",
    "SandboxError",
    "SandboxRefused",
    "bisect",
    "detect_style",
    "extract_repro",
    "names_cuda",
    "shared_server",
]
