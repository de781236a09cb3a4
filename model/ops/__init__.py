"""Op families (one file each: reference first, then device implementations) and the plan binder."""

from model.ops.opset import OpSet, build_ops

__all__ = ["OpSet", "build_ops"]
