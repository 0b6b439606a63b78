"""MoeShape: one rank's expert shape (volt8_moe_shape) and the array shapes of its device layout."""
import ctypes
import dataclasses

from . import _abi
from ._integers import integer
from ._library import check, load

_INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class MoeShape:
    """hidden H, intermediate I (this rank's width), num_experts E, scale block (block_n, block_k), and
    intermediate_offset, the rank's start inside the scale grid along I. Defaults: the reference model
    at TP4, rank 1 (VOLT8_MOE_SHAPE_INIT). Expert parallelism: the rank holds global experts
    [expert_start, expert_start + E) of global_experts (0: all experts) and is given global ids."""

    hidden: int = _abi.DEFAULT_SHAPE["hidden"]
    intermediate: int = _abi.DEFAULT_SHAPE["intermediate"]
    num_experts: int = _abi.DEFAULT_SHAPE["num_experts"]
    block_n: int = _abi.DEFAULT_SHAPE["block_n"]
    block_k: int = _abi.DEFAULT_SHAPE["block_k"]
    intermediate_offset: int = _abi.DEFAULT_SHAPE["intermediate_offset"]
    expert_start: int = _abi.DEFAULT_SHAPE["expert_start"]
    global_experts: int = _abi.DEFAULT_SHAPE["global_experts"]

    def _layout(self):
        """volt8_shape_layout: what the library derives from the shape (InvalidArgumentError for a shape it
        does not take)."""
        c_shape, layout = self.to_c(), _abi.MoeLayout()
        check(load().volt8_shape_layout(None, ctypes.byref(c_shape), ctypes.byref(layout)), "volt8_shape_layout")
        return layout

    def __post_init__(self):
        """Each field an integer (numpy's too, kept as int), and the shape one the library takes: a bad one
        is refused here with the library's message naming the field and its value (volt8_shape_layout),
        not later by a division or the C side."""
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, integer(getattr(self, field.name), f"MoeShape.{field.name}", -2**31,
                                                         _INT32_MAX))
        self._layout()

    @property
    def model_experts(self):
        """The model's expert count: global_experts, or num_experts without expert parallelism."""
        return self._layout().model_experts

    def to_c(self):
        return _abi.MoeShape(**dataclasses.asdict(self))

    @classmethod
    def from_c(cls, shape):
        return cls(**{field.name: int(getattr(shape, field.name)) for field in dataclasses.fields(cls)})

    def layout(self):
        """Array shapes of runtime/moe/kernels/moe_layout.h, name -> shape, as the library gives them: w13 and
        w2 hold E4M3 bytes, s13 and s2 FP16 bits of scale * 2^8."""
        grid = self._layout()
        h, i, e = self.hidden, self.intermediate, self.num_experts
        return {"w13": (e, 2 * i, h), "s13": (e, 2, grid.s13_row_blocks, grid.s13_k_blocks), "w2": (e, h, i),
                "s2": (e, grid.s2_row_blocks, grid.s2_k_blocks)}
