"""ctypes mirror of include/volt8.h: structs, their *_INIT defaults, and function prototypes."""
import ctypes
from ctypes import (POINTER, Structure, c_char, c_char_p, c_double, c_int, c_int32, c_int64, c_size_t,
                    c_uint8, c_uint16, c_uint64, c_void_p)

# The version of volt8.h this module mirrors.
HEADER_VERSION = (0, 4, 0)


class _Sized(Structure):
    """A struct whose first field is `size_t size`, set to sizeof on construction like its *_INIT macro."""

    _defaults = {}

    def __init__(self, **fields):
        values = dict(self._defaults)
        values.update(fields)
        super().__init__(size=ctypes.sizeof(self), **values)


class CtxOptions(_Sized):
    _fields_ = [("size", c_size_t), ("device", c_int32), ("cache_dir", c_char_p), ("cache_disable", c_int32),
                ("target_arch", c_char_p), ("early_launch_disable", c_int32), ("nvrtc_dirs", c_char_p),
                ("nvrtc_dir_list", POINTER(c_char_p)), ("nvrtc_dir_count", c_int32)]


NVRTC_DIR_LIST_MAX = 64  # VOLT8_NVRTC_DIR_LIST_MAX


# VOLT8_MOE_SHAPE_INIT (tests/test_library.py holds the two equal): the reference model's TP4 rank 1.
DEFAULT_SHAPE = {"hidden": 2560, "intermediate": 160, "num_experts": 512, "block_n": 128, "block_k": 128,
                 "intermediate_offset": 32, "expert_start": 0, "global_experts": 0}


class MoeShape(_Sized):
    _fields_ = [("size", c_size_t), ("hidden", c_int32), ("intermediate", c_int32), ("num_experts", c_int32),
                ("block_n", c_int32), ("block_k", c_int32), ("intermediate_offset", c_int32),
                ("expert_start", c_int32), ("global_experts", c_int32)]
    _defaults = DEFAULT_SHAPE


class MoeLayout(_Sized):
    _fields_ = [("size", c_size_t), ("model_experts", c_int32), ("s13_row_blocks", c_int32),
                ("s13_k_blocks", c_int32), ("s2_row_blocks", c_int32), ("s2_k_blocks", c_int32)]


class HostExperts(_Sized):
    _fields_ = [("size", c_size_t), ("w13", POINTER(c_uint8)), ("s13", POINTER(c_uint16)),
                ("w2", POINTER(c_uint8)), ("s2", POINTER(c_uint16))]


class MoeArgs(_Sized):
    _fields_ = [("size", c_size_t), ("num_tokens", c_int32), ("top_k", c_int32), ("x", c_void_p),
                ("topk_ids", c_void_p), ("topk_weights", c_void_p), ("out", c_void_p), ("check_ids", c_int32)]


class LoadReport(_Sized):
    _fields_ = [("size", c_size_t), ("route", c_int32), ("num_experts", c_int32),
                ("scale_max_relative_error", c_double), ("online_relative_l2", c_double),
                ("online_max_abs_error", c_double), ("staging_peak_bytes", c_int64), ("workspace_bytes", c_int64)]


class LoadOptions(_Sized):
    _fields_ = [("size", c_size_t), ("checkpoint_dir", c_char_p), ("draft_checkpoint_dir", c_char_p),
                ("tp_size", c_int32), ("tp_rank", c_int32), ("max_tokens", c_int32), ("max_top_k", c_int32),
                ("mtp_expert_quantization", c_char_p), ("online_block_n", c_int32), ("mtp_layer", c_int32),
                ("report", POINTER(LoadReport)), ("expert_start", c_int32), ("expert_count", c_int32)]
    _defaults = {"tp_size": 1, "tp_rank": 0, "max_tokens": 64, "max_top_k": 16, "online_block_n": 128, "mtp_layer": 0}


class HostCheckpoint(Structure):
    _fields_ = [("size", c_size_t), ("shape", MoeShape), ("experts", HostExperts), ("report", LoadReport)]


class MemoryReport(_Sized):
    _fields_ = [("size", c_size_t), ("resident_bytes", c_int64), ("weight_bytes", c_int64), ("scale_bytes", c_int64),
                ("workspace_bytes", c_int64), ("fp16_bytes", c_int64), ("padded_bytes", c_int64)]


class PlanReport(_Sized):
    _fields_ = [("size", c_size_t), ("route", c_int32), ("hidden", c_int32), ("intermediate", c_int32),
                ("num_experts", c_int32), ("tp_size", c_int32), ("block_n", c_int32), ("block_k", c_int32),
                ("quant_format", c_char * 32), ("scale_dtype", c_char * 8), ("tensor_prefix", c_char * 192),
                ("scale_max_relative_error", c_double), ("max_tokens", c_int32), ("max_top_k", c_int32)]


class ExpertTensors(_Sized):
    _fields_ = [("size", c_size_t), ("hidden", c_int32), ("intermediate", c_int32), ("weight_dtype", c_char_p),
                ("scale_dtype", c_char_p), ("weights", c_void_p * 3), ("scales", c_void_p * 3), ("names", c_char_p * 3),
                ("expert", c_int32)]


class ForwardInfo(_Sized):
    _fields_ = [("size", c_size_t), ("single_launch", c_int32), ("pinned", c_int32), ("gate_up", c_char * 96),
                ("down", c_char * 96), ("gate_up_origin", c_char * 256), ("down_origin", c_char * 256)]


class RejectionArgs(_Sized):
    _fields_ = [("size", c_size_t), ("batch", c_int32), ("max_draft", c_int32), ("num_draft", c_void_p),
                ("draft_ids", c_void_p), ("draft_probs", c_void_p), ("target_probs", c_void_p), ("vocab", c_int32),
                ("greedy", c_void_p), ("seed", c_uint64), ("offset", c_uint64), ("out_ids", c_void_p),
                ("num_accepted", c_void_p)]


# name -> (restype, argtypes). Every status-returning function returns c_int (the volt8_status enum).
PROTOTYPES = {
    "volt8_version_number": (c_int, []),
    "volt8_version_string": (c_char_p, []),
    "volt8_status_string": (c_char_p, [c_int]),
    "volt8_ctx_create": (c_int, [POINTER(CtxOptions), POINTER(c_void_p)]),
    "volt8_ctx_destroy": (None, [c_void_p]),
    "volt8_last_error": (c_char_p, [c_void_p]),
    "volt8_ctx_target_arch": (c_int, [c_void_p, c_char_p, c_size_t]),
    "volt8_ctx_require_device": (c_int, [c_void_p]),
    "volt8_ctx_early_launch": (c_int32, [c_void_p]),
    "volt8_experts_create_from_host": (c_int, [c_void_p, POINTER(MoeShape), POINTER(HostExperts), c_int32, c_int32,
                                               POINTER(c_void_p)]),
    "volt8_experts_destroy": (None, [c_void_p]),
    "volt8_experts_shape": (c_int, [c_void_p, POINTER(MoeShape)]),
    "volt8_shape_layout": (c_int, [c_void_p, POINTER(MoeShape), POINTER(MoeLayout)]),
    "volt8_expert_split": (c_int, [c_int32, c_int32, c_int32, POINTER(c_int32), POINTER(c_int32)]),
    "volt8_moe_forward": (c_int, [c_void_p, POINTER(MoeArgs), c_void_p]),
    "volt8_experts_bad_id_count": (c_int, [c_void_p, POINTER(c_int32)]),
    "volt8_experts_prepare": (c_int, [c_void_p, POINTER(c_int32), c_int32]),
    "volt8_reference_moe_forward": (c_int, [c_void_p, POINTER(MoeShape), POINTER(HostExperts), c_void_p, c_void_p,
                                            c_void_p, c_int32, c_int32, c_void_p]),
    "volt8_relative_l2": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, POINTER(c_double)]),
    "volt8_relative_l2_half": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t, POINTER(c_double)]),
    "volt8_graph_capture": (c_int, [c_void_p, POINTER(MoeArgs), c_void_p, POINTER(c_void_p)]),
    "volt8_graph_launch": (c_int, [c_void_p, c_void_p]),
    "volt8_graph_destroy": (None, [c_void_p]),
    "volt8_tuning_warnings": (c_int, [c_char_p, c_size_t, POINTER(c_int32)]),
    "volt8_cache_store_failures": (c_int, [c_void_p, POINTER(c_int32), c_char_p, c_size_t]),
    # the experimental section of volt8.h (VOLT8_EXPERIMENTAL_API): exported, outside the stable ABI
    "volt8_variant_count": (c_int, [c_void_p, POINTER(MoeShape), POINTER(c_int32)]),
    "volt8_variant_name": (c_int, [c_void_p, POINTER(MoeShape), c_int32, c_char_p, c_size_t]),
    "volt8_variant_compile": (c_int, [c_void_p, POINTER(MoeShape), c_char_p, POINTER(c_int32)]),
    "volt8_experts_set_variants": (c_int, [c_void_p, c_char_p, c_char_p]),
    "volt8_shard_rank_shape": (c_int, [c_void_p, c_int32, c_int32, c_int32, c_int32, c_int32, POINTER(MoeShape)]),
    "volt8_expert_shard_host": (c_int, [c_void_p, POINTER(ExpertTensors), c_int32, c_int32, c_int32,
                                        POINTER(HostExperts)]),
    "volt8_forward_describe": (c_int, [c_void_p, POINTER(MoeShape), c_void_p, c_int32, c_int32,
                                       POINTER(ForwardInfo)]),
    "volt8_route_name": (c_char_p, [c_int32]),
    "volt8_experts_load": (c_int, [c_void_p, POINTER(LoadOptions), POINTER(c_void_p)]),
    "volt8_checkpoint_load_host": (c_int, [c_void_p, POINTER(LoadOptions), POINTER(POINTER(HostCheckpoint))]),
    "volt8_host_checkpoint_free": (None, [POINTER(HostCheckpoint)]),
    "volt8_experts_memory": (c_int, [c_void_p, POINTER(MemoryReport)]),
    "volt8_plan": (c_int, [c_void_p, POINTER(LoadOptions), POINTER(PlanReport)]),
    "volt8_plan_rank": (c_int, [c_void_p, POINTER(PlanReport), c_int32, POINTER(MoeShape), POINTER(MemoryReport)]),
    "volt8_rejection_sample_host": (c_int, [POINTER(RejectionArgs)]),
    "volt8_rejection_prepare": (c_int, [c_void_p]),
    "volt8_rejection_sample": (c_int, [c_void_p, POINTER(RejectionArgs), c_void_p]),
}


def declare(library):
    """Sets restype/argtypes of every function volt8.h declares; a missing symbol raises AttributeError."""
    for name, (restype, argtypes) in PROTOTYPES.items():
        function = getattr(library, name)
        function.restype = restype
        function.argtypes = argtypes
    return library
