"""MoeShape: one rank's expert shape (volt8_moe_shape) and the array shapes of its device layout."""
import dataclasses

from . import _abi
from ._integers import integer
from .errors import InvalidArgumentError

_INT32_MAX = 2**31 - 1


def _ceil_div(value, divisor):
    return -(-value // divisor)


@dataclasses.dataclass(frozen=True)
class MoeShape:
    """hidden H, intermediate I (this rank's width), num_experts E, scale block (block_n, block_k), and
    intermediate_offset, the rank's start inside the scale grid along I. Defaults: the reference model
    at TP4, rank 1. Expert parallelism: the rank holds global experts [expert_start, expert_start + E)
    of global_experts (0: all experts) and is given global ids."""

    hidden: int = 2560
    intermediate: int = 160
    num_experts: int = 512
    block_n: int = 128
    block_k: int = 128
    intermediate_offset: int = 32
    expert_start: int = 0
    global_experts: int = 0

    def __post_init__(self):
        """Each field an integer (numpy's too, kept as int), and the shape one the library takes
        (runtime/moe/moe_layout.h): a bad one is refused here with the field and its value, not later
        by a division or the C side."""
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, integer(getattr(self, field.name), f"MoeShape.{field.name}", -2**31,
                                                         _INT32_MAX))
        for name in ("hidden", "intermediate"):
            value = getattr(self, name)
            if value <= 0 or value % 16:
                raise InvalidArgumentError(f"MoeShape.{name}: {value} is not a positive multiple of 16")
        if self.num_experts <= 0:
            raise InvalidArgumentError(f"MoeShape.num_experts: {self.num_experts} is not positive")
        if self.block_k != 128:
            raise InvalidArgumentError(f"MoeShape.block_k: {self.block_k} is not 128")
        if self.block_n not in (1, 128):
            raise InvalidArgumentError(f"MoeShape.block_n: {self.block_n} is not 1 or 128")
        offset = self.intermediate_offset
        if offset < 0 or offset % 16 or offset >= self.block_n:
            raise InvalidArgumentError(f"MoeShape.intermediate_offset: {offset} is not a multiple of 16 in 0..block_n - 1 "
                                       f"(block_n {self.block_n})")
        if self.intermediate > _INT32_MAX - offset:
            raise InvalidArgumentError(f"MoeShape.intermediate: {self.intermediate} + intermediate_offset {offset} "
                                       "overflows a 32-bit integer")
        if self.expert_start < 0 or (self.global_experts == 0 and self.expert_start != 0):
            raise InvalidArgumentError(f"MoeShape.expert_start: {self.expert_start} must be 0 without global_experts, "
                                       "else non-negative")
        if self.global_experts < 0 or (self.global_experts and
                                       self.expert_start > self.global_experts - self.num_experts):
            raise InvalidArgumentError(f"MoeShape.global_experts: {self.global_experts} does not hold experts "
                                       f"[{self.expert_start}, {self.expert_start + self.num_experts})")

    @property
    def model_experts(self):
        """The model's expert count: global_experts, or num_experts without expert parallelism."""
        return self.global_experts or self.num_experts

    def to_c(self):
        return _abi.MoeShape(**dataclasses.asdict(self))

    @classmethod
    def from_c(cls, shape):
        return cls(**{field.name: int(getattr(shape, field.name)) for field in dataclasses.fields(cls)})

    def layout(self):
        """Array shapes of runtime/moe/moe_layout.h, name -> shape: w13 and w2 hold E4M3 bytes, s13 and s2
        FP16 bits of scale * 2^8."""
        h, i, e = self.hidden, self.intermediate, self.num_experts
        g13 = _ceil_div(self.intermediate_offset + i, self.block_n)
        g2 = _ceil_div(self.intermediate_offset + i, self.block_k)
        return {"w13": (e, 2 * i, h), "s13": (e, 2, g13, _ceil_div(h, self.block_k)), "w2": (e, h, i),
                "s2": (e, _ceil_div(h, self.block_n), g2)}
