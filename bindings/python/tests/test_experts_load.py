"""Experts.load reads the checkpoint once: the library loads it, and the rank's shape (expert
parallelism included) is then asked of the loaded handle, never planned first in Python."""
import ctypes

import volt8
from fakes import RecordingContext

LOADED = volt8.MoeShape(hidden=256, intermediate=320, num_experts=3, block_n=128, block_k=128, intermediate_offset=64,
                        expert_start=3, global_experts=6)


class LoadingContext(RecordingContext):
    """A device context whose library loads a handle and says LOADED is its shape."""

    def require_device(self):
        pass

    def call(self, function, *args):
        super().call(function, *args)
        if function == "volt8_experts_load":
            ctypes.cast(args[2], ctypes.POINTER(ctypes.c_void_p))[0] = 0x1000
        elif function == "volt8_experts_shape":
            ctypes.memmove(args[1], ctypes.byref(LOADED.to_c()), ctypes.sizeof(volt8._abi.MoeShape))


def test_load_reads_the_checkpoint_once_and_asks_the_handle_its_shape():
    ctx = LoadingContext()
    experts = volt8.Experts.load(ctx, "/models/ckpt", tp_size=2, tp_rank=1, expert_start=3, expert_count=3)
    assert [function for function, _ in ctx.calls] == ["volt8_experts_load", "volt8_experts_shape"]
    assert ctx.calls[1][1][0].value == 0x1000
    assert experts.shape == LOADED
    assert experts.shape.model_experts == 6
    experts._finalizer.detach()
