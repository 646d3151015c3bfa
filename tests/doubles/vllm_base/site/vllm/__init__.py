"""TEST DOUBLE of the installed `vllm` package (kimi.deploy tests/doubles/vllm_base): only the module the NVFP4 image
patch edits, at its real import path, and the two imports that module makes. No engine: the engine double serves."""
