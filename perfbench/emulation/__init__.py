"""Emulators: run device-specific code paths on CPU so they are exercised without the hardware."""
