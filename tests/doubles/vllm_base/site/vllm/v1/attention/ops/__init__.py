"""TEST DOUBLE package (tests/doubles/vllm_base)."""
