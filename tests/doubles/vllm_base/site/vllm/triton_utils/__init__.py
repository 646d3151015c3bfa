"""TEST DOUBLE of vllm.triton_utils: `triton.jit` keeps the function, launches are not run (no GPU here)."""


class _Kernel:
    def __init__(self, fn):
        self.fn = fn

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            raise RuntimeError("TEST DOUBLE: Triton kernels do not run here (no GPU)")
        return launch


class triton:  # noqa: N801 - the name the real module exports
    __version__ = "3.5.0"

    @staticmethod
    def jit(fn):
        return _Kernel(fn)

    @staticmethod
    def cdiv(a, b):
        return -(-a // b)

    @staticmethod
    def next_power_of_2(n):
        return 1 << (int(n) - 1).bit_length()


class tl:  # noqa: N801
    constexpr = int
