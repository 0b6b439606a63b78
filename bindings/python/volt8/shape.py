"""MoeShape: one rank's expert shape (volt8_moe_shape) and the array shapes of its device layout."""
import dataclasses

from . import _abi


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
