"""Two arms' `model/` packages in one process, each as its own set of modules, swapped in around each call.

`model/` imports itself absolutely (`from model.config import ...`) and lazily (`model.__getattr__` ->
`importlib.import_module`), so an arm cannot be imported under another name. Instead each arm is imported whole
with its checkout first on sys.path: `model` and every submodule, then the harness modules that bind names from
`model` (perfbench.measure.run_steps and what it pulls in). Every module that import added under `model` or
`perfbench` is then moved out of sys.modules into the arm's own table. `ArmModules.active()` puts that table
back into sys.modules for the duration of a call into the arm (a dict update of some 100 entries,
microseconds, outside any timed region), so a lazy import inside the arm's code finds the arm's module.

Types that cross between the arms and the harness come from modules imported before any arm (perfbench.results:
RunSpec, RunPlan, RunResult), so they are one class for both arms.

Process-global state is shared by both arms, so an arm that changes it during its build would change what the
other arm measures. `ProcessState` fingerprints what an arm can change (thread counts, matmul precision,
backend flags, dynamo and inductor config, the environment) so that the caller can compare the two arms'
fingerprints, each taken after building from the same restored starting state, and fall back to two processes
when they differ.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import os
import pkgutil
import secrets
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from perfbench.results.env_allowlist import is_recorded

# harness modules that hold the names an arm's code is called through; imported inside each arm (perfbench's own
# code, found on perfbench's path: only `model/` comes from the arm's checkout)
ARM_BOUND_HARNESS = ("perfbench.measure.run_steps",)


# variables torch sets for itself, not settings: inductor puts a pointer into _TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR
# whenever it loads a compiled C++ kernel (torch/_inductor/codecache.py), so the arm that loads one first would
# look like an arm that changed the environment, and every scenario with compiled CPU kernels fell back to two
# processes
TORCH_PRIVATE_ENV = ("_TORCHINDUCTOR_",)
_DIGEST_KEY = secrets.token_bytes(16)  # per process: a digest compares two captures, and reveals nothing later


def _shown_env(name: str, value: str) -> str:
    """A variable's value as a difference line may show it (the line reaches ab.json): itself when the allow-list
    would record it, else a keyed digest, equal for equal values within this process and nothing outside it."""
    if is_recorded(name, value):
        return value
    return f"<withheld {hashlib.blake2b(value.encode(errors='replace'), key=_DIGEST_KEY, digest_size=6).hexdigest()}>"


def _ours(name: str) -> bool:
    return name == "model" or name.startswith("model.") or name.startswith("perfbench.")


@dataclass
class ArmModules:
    """One arm's own modules: `model` and its submodules, and the harness modules bound to them."""

    name: str
    checkout: Path
    modules: dict[str, ModuleType] = field(default_factory=dict)

    def module(self, name: str) -> ModuleType:
        return self.modules[name]

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """sys.modules holds this arm's modules for the duration (restored after)."""
        saved = {name: sys.modules.get(name) for name in self.modules}
        sys.modules.update(self.modules)
        try:
            yield
        finally:
            for name, module in saved.items():
                if module is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module

    @property
    def model_path(self) -> str:
        return str(Path(self.modules["model"].__file__ or "").resolve().parent)


def load_arm(name: str, checkout: Path) -> ArmModules:
    """Import the arm whose `model/` package lies in `checkout`, and take its modules out of sys.modules.

    The harness's own modules under the same names (e.g. `model.toggles`, imported by perfbench.results) are
    put back afterwards, so the harness keeps seeing its own."""
    harness = {n: m for n, m in sys.modules.items() if n == "model" or n.startswith("model.")}
    for n in harness:
        del sys.modules[n]
    before = set(sys.modules)
    sys.path.insert(0, str(checkout))
    try:
        package = importlib.import_module("model")
        if Path(package.__file__ or "").resolve().parent != (checkout / "model").resolve():
            raise ImportError(f"{name} arm: `model` resolved to {package.__file__}, not {checkout / 'model'}")
        for info in pkgutil.walk_packages(package.__path__, "model."):
            importlib.import_module(info.name)
        for module in ARM_BOUND_HARNESS:
            importlib.import_module(module)
    finally:
        sys.path.remove(str(checkout))
        added = {n: sys.modules[n] for n in set(sys.modules) - before if _ours(n)}
        for n in added:
            del sys.modules[n]
        sys.modules.update(harness)
    return ArmModules(name, checkout, added)


def _config_items(module: Any) -> dict[str, str]:
    """A torch config module's settings as reprs (values may be objects without equality)."""
    try:
        return {k: repr(v) for k, v in module.get_config_copy().items()}
    except Exception:  # noqa: BLE001 - a config without the copy API is compared by nothing
        return {}


@dataclass(frozen=True)
class ProcessState:
    """What an arm could change for the whole process, as comparable strings."""

    values: dict[str, str]

    @classmethod
    def capture(cls) -> ProcessState:
        import torch

        values = {
            "torch.num_threads": repr(torch.get_num_threads()),
            "torch.num_interop_threads": repr(torch.get_num_interop_threads()),
            "torch.float32_matmul_precision": torch.get_float32_matmul_precision(),
            "torch.default_dtype": repr(torch.get_default_dtype()),
            "torch.deterministic_algorithms": repr(torch.are_deterministic_algorithms_enabled()),
            "torch.backends.mkldnn.enabled": repr(torch.backends.mkldnn.enabled),
            "torch.backends.cudnn.benchmark": repr(torch.backends.cudnn.benchmark),
            "torch.backends.cudnn.allow_tf32": repr(torch.backends.cudnn.allow_tf32),
            "torch.backends.cuda.matmul.allow_tf32": repr(torch.backends.cuda.matmul.allow_tf32),
        }
        import torch._dynamo
        import torch._inductor.config

        values.update({f"torch._dynamo.config.{k}": v for k, v in _config_items(torch._dynamo.config).items()})
        values.update({f"torch._inductor.config.{k}": v
                       for k, v in _config_items(torch._inductor.config).items()})
        values.update({f"env.{k}": _shown_env(k, v) for k, v in os.environ.items()
                       if not k.startswith(TORCH_PRIVATE_ENV)})
        return cls(values)

    def differences(self, other: ProcessState) -> list[str]:
        """The settings that differ, as "name: this -> other" lines."""
        keys = sorted(set(self.values) | set(other.values))
        return [f"{k}: {self.values.get(k, '(unset)')} -> {other.values.get(k, '(unset)')}"
                for k in keys if self.values.get(k) != other.values.get(k)]


@dataclass
class RestorableState:
    """The process-global settings that can be put back, so that both arms build from the same start."""

    num_threads: int
    matmul_precision: str
    flags: dict[str, bool]
    dynamo: dict[str, Any]
    inductor: dict[str, Any]
    environ: dict[str, str]

    @classmethod
    def save(cls) -> RestorableState:
        import torch
        import torch._dynamo
        import torch._inductor.config

        flags = {"mkldnn": torch.backends.mkldnn.enabled, "cudnn_benchmark": torch.backends.cudnn.benchmark,
                 "cudnn_tf32": torch.backends.cudnn.allow_tf32,
                 "matmul_tf32": torch.backends.cuda.matmul.allow_tf32}
        return cls(torch.get_num_threads(), torch.get_float32_matmul_precision(), flags,
                   torch._dynamo.config.get_config_copy(), torch._inductor.config.get_config_copy(),
                   dict(os.environ))

    def restore(self) -> None:
        import torch
        import torch._dynamo
        import torch._inductor.config

        torch.set_num_threads(self.num_threads)
        torch.set_float32_matmul_precision(self.matmul_precision)
        torch.backends.mkldnn.enabled = self.flags["mkldnn"]  # type: ignore[assignment]  # a settable ContextProp
        torch.backends.cudnn.benchmark = self.flags["cudnn_benchmark"]
        torch.backends.cudnn.allow_tf32 = self.flags["cudnn_tf32"]
        torch.backends.cuda.matmul.allow_tf32 = self.flags["matmul_tf32"]
        with warnings.catch_warnings():  # setting a deprecated entry back to its own value warns
            warnings.simplefilter("ignore", FutureWarning)
            for config, saved in ((torch._dynamo.config, self.dynamo), (torch._inductor.config, self.inductor)):
                for key, value in saved.items():
                    with contextlib.suppress(Exception):  # read-only or derived entries stay as they are
                        setattr(config, key, value)
        os.environ.clear()
        os.environ.update(self.environ)
