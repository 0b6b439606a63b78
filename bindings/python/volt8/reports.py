"""Read-only reports: memory of one rank's experts, what a load did, what a plan found."""
import dataclasses
from typing import Tuple

from ._library import load
from .shape import MoeShape


def _fields_from(cls, struct, **extra):
    names = [field.name for field in dataclasses.fields(cls) if field.name not in extra]
    return cls(**{name: getattr(struct, name) for name in names}, **extra)


def route_name(route):
    """"native", "online" or "unknown" (volt8_route_name)."""
    return load().volt8_route_name(route).decode()


@dataclasses.dataclass(frozen=True)
class MemoryReport:
    """Bytes of one rank's experts (volt8_memory_report)."""

    resident_bytes: int
    weight_bytes: int
    scale_bytes: int
    workspace_bytes: int
    fp16_bytes: int
    padded_bytes: int

    @classmethod
    def from_c(cls, report):
        return _fields_from(cls, report)


@dataclasses.dataclass(frozen=True)
class LoadReport:
    """What a load did (volt8_load_report); route is "native" or "online"."""

    route: str
    num_experts: int
    scale_max_relative_error: float
    online_relative_l2: float
    online_max_abs_error: float
    staging_peak_bytes: int
    workspace_bytes: int  # the forward workspace, for max_tokens x max_top_k (0 for a host load)

    @classmethod
    def from_c(cls, report):
        return _fields_from(cls, report, route=route_name(report.route))


@dataclasses.dataclass(frozen=True)
class RankPlan:
    rank: int
    shape: MoeShape
    memory: MemoryReport


@dataclasses.dataclass(frozen=True)
class PlanReport:
    """What a load would do (volt8_plan_report), with every rank's shape and memory."""

    route: str
    hidden: int
    intermediate: int  # the checkpoint's full width
    num_experts: int
    tp_size: int
    block_n: int
    block_k: int
    quant_format: str
    scale_dtype: str
    tensor_prefix: str
    scale_max_relative_error: float
    max_tokens: int  # the workspace each rank's memory.workspace_bytes is for
    max_top_k: int
    ranks: Tuple[RankPlan, ...]

    @classmethod
    def from_c(cls, plan, ranks):
        text = {name: getattr(plan, name).decode("utf-8", "replace") for name in ("quant_format", "scale_dtype",
                                                                                  "tensor_prefix")}
        return cls(route=route_name(plan.route), hidden=plan.hidden, intermediate=plan.intermediate,
                   num_experts=plan.num_experts, tp_size=plan.tp_size, block_n=plan.block_n, block_k=plan.block_k,
                   scale_max_relative_error=plan.scale_max_relative_error, max_tokens=plan.max_tokens,
                   max_top_k=plan.max_top_k, ranks=tuple(ranks), **text)

