"""TEST DOUBLE of vllm.platforms: a CUDA platform (not ROCm), as the NVFP4 image runs on."""


class _Platform:
    device_name = "cuda"

    @staticmethod
    def is_rocm():
        return False


current_platform = _Platform()
