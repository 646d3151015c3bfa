"""Engine double shim: NOT the real sglang package (see tests/doubles/engine/README.md)."""
