"""A second torch build for tests: a real second interpreter (its own virtualenv), carrying the same torch as the
project's venv through a .pth file, with a documented patch in its sitecustomize:

- it reports torch NEWER_VERSION (in its metadata, which a worker's heartbeat reads, and in torch.__version__,
  which a run records), a nightly newer than the project's 2.13.0;
- its Inductor refuses any graph that calls torch.sin (REGRESSION_MESSAGE): a deterministic regression, so a repro
  using torch.sin passes on the project's build and fails in `inductor` on this one.

Nothing else differs, so every other repro behaves alike on both builds (the sandbox tests run on it too).
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

NEWER_VERSION = "2.14.0.dev20261201+cpu"
REGRESSION_MESSAGE = "test build regression: Inductor refuses torch.sin"

SITECUSTOMIZE = f'''"""The test build's patch (tests/torch_builds.py): a newer version, one deliberate regression."""
import importlib.abc
import importlib.machinery
import sys

VERSION = {NEWER_VERSION!r}


class _Patch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in ("torch.version", "torch._inductor.compile_fx"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None:
            return None
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            if name == "torch.version":
                module.__version__ = VERSION
                return
            original = module.compile_fx

            def compile_fx(model, example_inputs, *args, **kwargs):
                if any(getattr(node.target, "__name__", "") == "sin" for node in model.graph.nodes):
                    raise RuntimeError({REGRESSION_MESSAGE!r})
                return original(model, example_inputs, *args, **kwargs)

            module.compile_fx = compile_fx

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _Patch())
'''

# Passes on the project's build, fails in inductor on the patched one.
SIN_REPRO = """import torch

def f(x):
    return torch.sin(x) * 2 + 1

x = torch.randn(16)
print(torch.compile(f)(x))
"""


def make_patched_build(root: Path) -> str:
    """Create the patched build under root; return its interpreter's path."""
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(root)], check=True)
    os.chmod(root, 0o755)  # the sandbox's uid reads the install it runs on
    packages = Path(
        subprocess.check_output(
            [str(root / "bin" / "python"), "-c", "import site; print(site.getsitepackages()[0])"], text=True
        ).strip()
    )
    ours = site.getsitepackages()[0]
    (packages / "project-venv.pth").write_text(ours + "\n")
    # Its own torch metadata, shadowing the project's (its site-packages comes first): the version it reports.
    dist = next(Path(ours).glob("torch-*.dist-info"))
    copy = packages / f"torch-{NEWER_VERSION}.dist-info"
    copy.mkdir()
    metadata = (dist / "METADATA").read_text()
    old = next(line for line in metadata.splitlines() if line.startswith("Version: "))
    (copy / "METADATA").write_text(metadata.replace(old, f"Version: {NEWER_VERSION}", 1))
    shutil.copy(dist / "top_level.txt", copy) if (dist / "top_level.txt").exists() else None
    (packages / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return str(root / "bin" / "python")
