"""The Ascend platforms the emulator can stand in for, and which one is active in this process."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Platform:
    """`key` is what users type (--emulate-npu KEY); `device_name` is what torch.npu.get_device_name returns,
    chosen so model.backend's name -> platform mapping (npu_recipe.md section 7) lands on `series`."""

    key: str
    series: str  # "A2", "A3" or "950": the product line the op documents' per-platform rules name
    chip_name: str

    @property
    def device_name(self) -> str:
        """The chip name with the emulation label, so every record of the device name says what it is."""
        return f"{self.chip_name} [{self.label}]"

    @property
    def label(self) -> str:
        return f"emulated npu ({self.key})"


PLATFORMS: dict[str, Platform] = {
    p.key: p for p in (
        Platform("910b", "A2", "Ascend910B3"),
        Platform("910_93", "A3", "Ascend910_9391"),
        Platform("950", "950", "Ascend950PR"),
    )
}


class PlatformError(ValueError):
    """An unknown platform name (a user input error)."""


def platform(key: str) -> Platform:
    try:
        return PLATFORMS[key]
    except KeyError:
        raise PlatformError(f"--emulate-npu: unknown platform {key!r}; choose one of {', '.join(PLATFORMS)}") \
            from None


_active: list[Platform] = []  # at most one: the platform activate() installed


def active() -> Platform | None:
    return _active[0] if _active else None


def require_active() -> Platform:
    current = active()
    if current is None:
        raise RuntimeError("the NPU emulator is not active: call perfbench.emulation.npu.activate(platform) first")
    return current


def set_active(p: Platform | None) -> None:
    _active.clear()
    if p is not None:
        _active.append(p)
