"""Kimi engine double: a stdlib-only stand-in for the vLLM / SGLang servers in kimi.deploy's tests."""
