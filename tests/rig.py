"""Compatibility shim: the rig lives in storage.sim.rig."""
from storage.sim.rig import CONFIG, Rig  # noqa: F401
