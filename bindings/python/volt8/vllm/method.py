"""The vLLM half of the plugin: which MoE layers volt8 serves, and the quantization method that serves
them (weights in, volt8 experts out, apply).

install() registers, through vLLM's out-of-tree layer mechanism, a subclass of the routed-experts layer
class (vLLM 0.33's RoutedExperts; FusedMoE in engines of the 0.2x line such as 1Cat-vLLM, where
RoutedExperts is an alias of it). Before the layer is built, the subclass decides whether volt8 serves
it: when it does, the layer is built with Volt8QuantConfig, a wrapper around the target's quantization
config whose get_quant_method gives the layer a Volt8MoEMethod, and the layer gets its own config back
once built; every other layer is built exactly as without the plugin.

The experts volt8 takes: 128x128 block-FP8 E4M3 ones (Fp8Config with weight_block_size [128, 128],
ModelOpt FP8_PB_WO alone or in a mixed-precision config), and, when VOLT8_VLLM_ONLINE=fp8, unquantized
MTP ones (no quantization config, or a config that leaves the MTP experts out: AWQ, ModelOpt NVFP4 or
mixed, ...). VOLT8_VLLM_LAYERS=all also takes the target's block-FP8 routed experts. Experts that the
target's config quantizes another way stay with vLLM.

What differs between the engines is found by looking at what the installed vLLM has, never at its
version string: the name of the layer's prefix argument, is_layer_skipped's match_mode, the config's
intermediate size, the expert map's home and the speculative config's mtp_expert_quantization switch.
"""
import dataclasses
import inspect

import torch

from vllm.config import get_current_vllm_config_or_none
from vllm.logger import init_logger
from vllm.model_executor.layers.fused_moe import RoutedExperts
from vllm.model_executor.layers.fused_moe.fused_moe_method_base import FusedMoEMethodBase
from vllm.model_executor.layers.fused_moe.unquantized_fused_moe_method import UnquantizedFusedMoEMethod
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
from vllm.platforms import current_platform

from . import settings as settings_module
from .staging import ExpertStaging

logger = init_logger("vllm.volt8")

# The layer's parameters an experts checkpoint may fill (vLLM maps experts.<e>.gate_proj.<suffix> to
# w13_<suffix>, down_proj to w2_<suffix>), and what each is.
PARAMETERS = {"weight": "weight", "weight_scale_inv": "scale", "weight_scale": "scale", "input_scale": "input_scale"}
SHARDS = {"w1": "gate", "w3": "up", "w2": "down"}
BLOCK_FP8_ALGOS = ("FP8_PB_WO", "FP8_BLOCK_SCALES")  # ModelOpt's names of 128x128 block FP8

# ---- what the installed vLLM has ----

_LAYER_SIGNATURE = inspect.signature(RoutedExperts.__init__)
# the argument that names the layer: prefix (FusedMoE), layer_name (RoutedExperts of 0.33)
_NAME_ARGUMENT = next((name for name in ("prefix", "layer_name") if name in _LAYER_SIGNATURE.parameters), None)
if _NAME_ARGUMENT is None or "quant_config" not in _LAYER_SIGNATURE.parameters:
    raise ImportError(f"{RoutedExperts.__module__}.{RoutedExperts.__qualname__}.__init__ takes neither prefix nor "
                      f"layer_name, or no quant_config")


def _layer_skipped(quant_config, prefix):
    """Fp8Config's ignored_layers test, with its match mode where this vLLM has one."""
    from vllm.model_executor.layers.quantization.utils.quant_utils import is_layer_skipped
    options = {}
    if "match_mode" in inspect.signature(is_layer_skipped).parameters and hasattr(quant_config,
                                                                                  "ignored_layers_match_mode"):
        options["match_mode"] = quant_config.ignored_layers_match_mode
    return is_layer_skipped(prefix=prefix, ignored_layers=quant_config.ignored_layers,
                            fused_mapping=quant_config.packed_modules_mapping, **options)


def full_intermediate(moe):
    """The experts' whole intermediate size (all TP ranks): FusedMoEConfig.intermediate_size where the
    config has it, else the unpadded per-rank size times the MoE TP size."""
    whole = getattr(moe, "intermediate_size", None)
    if whole is not None:
        return int(whole)
    per_rank = getattr(moe, "intermediate_size_per_partition_unpadded", None) or moe.intermediate_size_per_partition
    return int(per_rank) * moe.moe_parallel_config.tp_size


def _expert_map(layer):
    """The layer's global -> local expert map (None: every expert on this rank)."""
    manager = getattr(layer, "expert_map_manager", None)
    return manager.expert_map if manager is not None else layer.expert_map


def _switch_on(config):
    speculative = getattr(config, "speculative_config", None)
    return getattr(speculative, "mtp_expert_quantization", None) == "fp8"


def _capability():
    capability = current_platform.get_device_capability()
    return None if capability is None else capability.to_int()


def _num_hidden_layers(config):
    model_config = getattr(config, "model_config", None)
    if model_config is None:
        return None
    return getattr(model_config.hf_text_config, "num_hidden_layers", None)


# ---- which layers, and their experts' format ----

def expert_format(quant_config, prefix):
    """("fp8_block", description) when the config makes the experts at `prefix` 128x128 block FP8,
    ("unquantized", description) when it leaves them unquantized, ("other", description) for another
    format, or (None, description) when this can only be learnt by asking the config for its method.
    Never asks the config to build a method: vLLM's FP8 MoE methods fail to build on GPUs without FP8
    hardware."""
    from vllm.model_executor.layers.quantization.fp8 import Fp8Config
    from vllm.model_executor.layers.quantization.modelopt import ModelOptFp8Config, ModelOptMixedPrecisionConfig
    if quant_config is None:
        return "unquantized", "no quantization config"
    if isinstance(quant_config, Fp8Config):
        if _layer_skipped(quant_config, prefix):
            return "unquantized", "fp8 config, layer ignored"
        block = list(quant_config.weight_block_size or [])
        if quant_config.is_checkpoint_fp8_serialized and block == [128, 128]:
            return "fp8_block", "fp8 weight_block_size [128, 128]"
        return "other", f"fp8 with weight_block_size {quant_config.weight_block_size}" + (
            "" if quant_config.is_checkpoint_fp8_serialized else " quantized by vLLM at load")
    if isinstance(quant_config, (ModelOptFp8Config, ModelOptMixedPrecisionConfig)):
        if quant_config.is_layer_excluded(prefix):
            return "unquantized", f"modelopt, {prefix} excluded"
        algo = (quant_config.quant_method if isinstance(quant_config, ModelOptFp8Config)
                else quant_config._resolve_quant_algo(prefix))
        if algo is None:
            return "unquantized", f"modelopt mixed precision, {prefix} not among the quantized layers"
        if algo.upper() in BLOCK_FP8_ALGOS:
            return "fp8_block", f"modelopt {algo}"
        return "other", f"modelopt {algo}"
    return None, quant_config.get_name()


@dataclasses.dataclass(frozen=True)
class Role:
    """A layer volt8 is asked to serve: an MTP layer's routed experts (mtp_layer its index) or, with
    VOLT8_VLLM_LAYERS=all, a target layer's (mtp_layer None)."""

    prefix: str
    mtp_layer: int | None

    @property
    def label(self):
        return "target layer" if self.mtp_layer is None else f"MTP layer {self.mtp_layer}"


@dataclasses.dataclass(frozen=True)
class Claim:
    """What Volt8QuantConfig.claims decided of routed experts volt8 may serve: their Role, their kind
    ("fp8_block" or "unquantized", None when only the config's method can tell) and expert_format's
    description of their format."""

    role: Role
    kind: str | None
    description: str


_fp8_hardware_said = []  # the one line per process about GPUs with FP8 hardware


class Volt8QuantConfig(QuantizationConfig):
    """The target's quantization config (`inner`, possibly None) with the layers volt8 serves given to
    Volt8MoEMethod. settings: the plugin's (VOLT8_VLLM...); num_hidden_layers: the target's (MTP layers
    are numbered from it); capability: major * 10 + minor, None when unknown (no GPU)."""

    def __init__(self, inner, settings, num_hidden_layers, capability):
        super().__init__()
        self.inner = inner
        self.settings = settings
        self.num_hidden_layers = num_hidden_layers
        self.capability = capability
        self._claimed = {}  # prefix -> what claims() decided of it, for volt8_method
        if inner is not None:
            self.packed_modules_mapping = inner.packed_modules_mapping
            for name in ("online_quantization_config",):
                if hasattr(inner, name):
                    setattr(self, name, getattr(inner, name))

    def __getattr__(self, name):  # anything else a layer reads of its config: the wrapped config's
        inner = self.__dict__.get("inner")
        if inner is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(inner, name)

    def get_name(self):
        return "volt8" if self.inner is None else self.inner.get_name()

    def get_supported_act_dtypes(self):
        return [torch.bfloat16, torch.float16] if self.inner is None else self.inner.get_supported_act_dtypes()

    @classmethod
    def get_min_capability(cls):
        return 70

    @staticmethod
    def get_config_filenames():
        return []

    @classmethod
    def from_config(cls, config):
        raise NotImplementedError("Volt8QuantConfig wraps a config; it is not read from a checkpoint")

    def on_this_gpu(self):
        if self.capability is None:
            return self.settings.enabled and self.settings.force
        serves = self.settings.serves_capability(self.capability)
        if self.settings.enabled and not serves and not _fp8_hardware_said:
            _fp8_hardware_said.append(self.capability)
            logger.info("volt8: %s=1 leaves the MoE layers to vLLM: this GPU (compute capability %d.%d) has FP8 "
                        "tensor cores; %s=force serves them on volt8 all the same", settings_module.ENABLE,
                        self.capability // 10, self.capability % 10, settings_module.ENABLE)
        return serves

    def role(self, prefix):
        """The Role of the routed experts named `prefix` when the settings ask volt8 to serve them on this
        GPU, else None."""
        if not self.on_this_gpu():
            return None
        mtp_layer = settings_module.mtp_layer(prefix, self.num_hidden_layers)
        if mtp_layer is not None:
            return Role(prefix, mtp_layer)
        return Role(prefix, None) if self.settings.layers == "all" else None

    def claims(self, prefix):
        """The Claim when volt8 may serve the experts at `prefix`; None when the layer stays with vLLM
        (said in the log when its format is the reason). volt8_method reuses what this decided."""
        claim = self._claim(prefix)
        self._claimed[prefix] = claim
        return claim

    def _claim(self, prefix):
        role = self.role(prefix)
        if role is None:
            return None
        kind, description = expert_format(self.inner, prefix)
        if kind == "other":
            logger.warning("volt8: %s stays with vLLM: its experts are %s; volt8 reads 128x128 block FP8 or "
                           "unquantized experts", prefix, description)
            return None
        if kind == "unquantized" and not self._online(role):
            self._say_unquantized(role, description)
            return None
        return Claim(role, kind, description)

    def _online(self, role):
        return role.mtp_layer is not None and self.settings.online_block_n

    def _say_unquantized(self, role, description):
        if role.mtp_layer is None:
            logger.info("volt8: %s stays with vLLM: its experts are unquantized (%s); volt8 serves a target "
                        "layer's experts only when they are 128x128 block FP8", role.prefix, description)
        else:
            logger.info("volt8: %s stays with vLLM: its experts are unquantized (%s); %s=fp8 quantizes them to "
                        "FP8 for volt8 at load", role.prefix, description, settings_module.ONLINE)

    def volt8_method(self, layer, prefix):
        """The Volt8MoEMethod for `layer` at `prefix`, or None when volt8 does not serve it. A config whose
        expert format cannot be told otherwise is asked for its method: none, or an unquantized one,
        means unquantized experts."""
        claim = self._claimed[prefix] if prefix in self._claimed else self.claims(prefix)
        if claim is None or not isinstance(layer, RoutedExperts):
            return None
        role, kind, description = claim.role, claim.kind, claim.description
        if kind is None:
            method = self.inner.get_quant_method(layer, prefix)
            if not (method is None or isinstance(method, UnquantizedFusedMoEMethod)):
                logger.warning("volt8: %s stays with vLLM: its experts are %s (%s); volt8 reads 128x128 block FP8 "
                               "or unquantized experts", prefix, description, type(method).__name__)
                return None
            if not self._online(role):
                self._say_unquantized(role, f"{description} ({type(method).__name__})")
                return None
            kind = "unquantized"
        online = self.settings.online_block_n if kind == "unquantized" else 0
        logger.info("volt8: %s (%s) runs on volt8: %s%s", prefix, role.label, description,
                    f", quantized at load with {online}-row scale blocks" if online else "")
        return Volt8MoEMethod(layer.moe_config, layer_name=prefix, online_block_n=online)

    def get_quant_method(self, layer, prefix):
        method = self.volt8_method(layer, prefix)
        if method is not None:
            return method
        return None if self.inner is None else self.inner.get_quant_method(layer, prefix)


Volt8MtpQuantConfig = Volt8QuantConfig  # the name of before


def effective_settings(settings, config):
    """The plugin's settings, or, when VOLT8_VLLM is off and the engine's speculative config asks for
    mtp_expert_quantization "fp8", those of VOLT8_VLLM=1 with VOLT8_VLLM_ONLINE=fp8 (MTP layers only)."""
    if not settings.enabled and _switch_on(config):
        return settings_module.Settings(enabled=True, online_block_n=128)
    return settings


class Volt8RoutedExperts(RoutedExperts):
    """The routed-experts layer class, registered in its place: a layer volt8 serves is built with a
    Volt8QuantConfig (and gets its own config back once built), every other one as before."""

    settings = settings_module.Settings()

    def __init__(self, *args, **kwargs):
        bound = _LAYER_SIGNATURE.bind(self, *args, **kwargs)
        inner = bound.arguments.get("quant_config")
        prefix = bound.arguments.get(_NAME_ARGUMENT, "")
        config = get_current_vllm_config_or_none()
        wrapper = Volt8QuantConfig(inner, effective_settings(self.settings, config), _num_hidden_layers(config),
                                   _capability())
        wrapped = wrapper.claims(prefix) is not None
        if wrapped:
            bound.arguments["quant_config"] = wrapper
        super().__init__(*bound.args[1:], **bound.kwargs)
        if wrapped and getattr(self, "quant_config", None) is wrapper:
            self.quant_config = inner


def install(settings):
    """Makes vLLM build Volt8RoutedExperts for every routed-experts layer (vLLM's out-of-tree layer
    registry, keyed by the class's own name); once per process."""
    from vllm.model_executor.custom_op import op_registry_oot
    Volt8RoutedExperts.settings = settings
    key = RoutedExperts.__name__
    registered = op_registry_oot.get(key)
    if registered is Volt8RoutedExperts:
        return
    if registered is not None:
        raise RuntimeError(f"volt8: another plugin replaces {key} already ({registered.__module__}."
                           f"{registered.__qualname__}); the two cannot both serve the MoE layers")
    RoutedExperts.register_oot(Volt8RoutedExperts, name=key)


# ---- the method ----

def _placeholder(kind, loader):
    parameter = torch.nn.Parameter(torch.empty(0, dtype=torch.uint8, device="cpu"), requires_grad=False)
    parameter.weight_loader = loader
    parameter.volt8_kind = kind
    return parameter


def _local_experts(layer, global_experts):
    """(expert_start, expert_count) of the experts this rank holds, from vLLM's expert map (count 0: all)."""
    expert_map = _expert_map(layer)
    if expert_map is None:
        return 0, 0
    mapped = expert_map[:global_experts].tolist()
    local = sorted((slot, expert) for expert, slot in enumerate(mapped) if slot >= 0)
    experts = [expert for _, expert in local]
    if not experts or experts != list(range(experts[0], experts[0] + len(experts))):
        raise NotImplementedError(f"volt8: {layer.layer_name}: this rank's experts {experts[:8]}... are not one "
                                  f"contiguous range in order (the 'linear' expert placement); volt8 holds a range")
    return experts[0], (0 if len(experts) == global_experts else len(experts))


class Volt8MoEMethod(FusedMoEMethodBase):
    """A layer's routed experts on volt8. create_weights registers empty placeholders whose loader
    hands each checkpoint tensor to an ExpertStaging (host memory, this rank's share only, sharded by
    the library); process_weights_after_loading uploads them into volt8 and frees the staging; apply
    runs torch.ops.volt8.mtp_moe on vLLM's current stream. Shared experts stay with vLLM's runner."""

    requires_device_loading = False  # the placeholders are empty; the experts go to the device through volt8

    def __init__(self, moe_config, *, layer_name, online_block_n):
        super().__init__(moe_config)
        self.layer_name = layer_name
        self.online_block_n = online_block_n
        self.staging = None
        self.experts = None

    @property
    def method_name(self):
        return "volt8"

    def maybe_roundup_sizes(self, hidden_size, intermediate_size_per_partition, act_dtype, moe_parallel_config):
        return hidden_size, intermediate_size_per_partition  # volt8 keeps each rank's slice as it is

    def create_weights(self, layer, num_experts, hidden_size, intermediate_size_per_partition, params_dtype,
                       **extra_weight_attrs):
        moe = self.moe
        if moe.activation.value != "silu":
            raise NotImplementedError(f"volt8: {self.layer_name}: activation {moe.activation.value}; volt8's experts "
                                      f"are SiLU(gate) * up")
        if moe.has_bias or layer.swiglu_limit is not None or layer.apply_router_weight_on_input:
            raise NotImplementedError(f"volt8: {self.layer_name}: expert biases, a SwiGLU limit or router weights "
                                      f"applied to the input are not part of volt8's experts")
        parallel = moe.moe_parallel_config
        global_experts = extra_weight_attrs.get("global_num_experts", moe.num_experts)
        if moe.num_experts != moe.num_logical_experts:
            raise NotImplementedError(f"volt8: {self.layer_name}: redundant experts (EPLB) are not supported")
        start, count = _local_experts(layer, global_experts)
        hidden = extra_weight_attrs.get("unpadded_hidden_size") or hidden_size
        self.staging = ExpertStaging(hidden, full_intermediate(moe), global_experts, parallel.tp_size, parallel.tp_rank,
                                     start, count, online_block_n=self.online_block_n, layer=self.layer_name)
        for stem in ("w13", "w2"):
            for suffix, kind in PARAMETERS.items():
                layer.register_parameter(f"{stem}_{suffix}", _placeholder(kind, self.load_weight))

    def load_weight(self, param, loaded_weight, weight_name, shard_id, expert_id, return_success=False):
        """vLLM's weight loader call for one expert's tensor (expert_id global); False for another rank's."""
        if not self.staging.holds(expert_id):
            return False if return_success else None
        if param.volt8_kind == "input_scale":
            raise NotImplementedError(f"volt8: {weight_name}: activation scales (static per-tensor FP8) are not "
                                      f"a format volt8 reads (128x128 block FP8 weights, dynamic activations)")
        if shard_id not in SHARDS:
            raise ValueError(f"volt8: {weight_name}: shard {shard_id!r} is not w1, w2 or w3")
        self.staging.add(expert_id, SHARDS[shard_id], param.volt8_kind, loaded_weight,
                         f"{weight_name} (expert {expert_id}, {SHARDS[shard_id]})")
        return True if return_success else None

    load_weight.supports_moe_loading = True

    def process_weights_after_loading(self, layer):
        """Uploads the staged experts into volt8 on this process's CUDA device and frees the staging, also
        when the upload fails (the error names the layer)."""
        if self.experts is not None:
            return
        staging, self.staging = self.staging, None
        if staging is None:
            raise RuntimeError(f"volt8: {self.layer_name}: the experts' staging is gone (an earlier upload failed)")
        try:
            self.experts = self._upload(staging)
        finally:
            staging.release()

    def _upload(self, staging):
        from .runtime import MtpExperts
        from ..errors import Error
        if not torch.cuda.is_available():
            raise RuntimeError(f"volt8: {self.layer_name}: no CUDA GPU is usable in this process "
                               f"(torch.cuda.is_available() is False), so its experts cannot be uploaded; the "
                               f"{staging.nbytes / 2**20:.1f} MiB of host staging were freed")
        config = get_current_vllm_config_or_none()
        max_tokens, counts = token_counts(config, self.moe)
        device = torch.cuda.current_device()
        staged = staging.nbytes
        try:
            experts = MtpExperts(context(device), staging, max_tokens=max_tokens,
                                 max_top_k=self.moe.experts_per_token)
            experts.prepare(counts)
        except Error as error:
            raise type(error)(f"volt8: {self.layer_name}: uploading its experts to cuda:{device} failed: "
                              f"{error.message}", error.status, error.function) from error
        memory = experts.memory()
        logger.info("volt8: %s: %d experts resident, %.1f MiB (FP16 would be %.1f MiB, padded %.1f MiB), "
                    "workspace %.1f MiB for %d tokens; %.1f MiB of host staging freed", self.layer_name,
                    experts.shape.num_experts, memory.resident_bytes / 2**20, memory.fp16_bytes / 2**20,
                    memory.padded_bytes / 2**20, memory.workspace_bytes / 2**20, experts.experts.max_tokens,
                    staged / 2**20)
        return experts

    def get_fused_moe_quant_config(self, layer):
        return None

    def apply(self, layer, x, topk_weights, topk_ids, shared_experts, shared_experts_input):
        return self.experts.apply(x, topk_ids, topk_weights)


_contexts = {}


def context(device):
    """One volt8.Context per CUDA device of the process."""
    import volt8
    if device not in _contexts:
        _contexts[device] = volt8.Context(device=device)
    return _contexts[device]


def token_counts(config, moe):
    """(max_tokens, counts to prepare): the most tokens one volt8 forward takes, the largest CUDA graph
    capture size (a larger batch runs as several forwards; VOLT8_VLLM_MAX_TOKENS overrides it), and the
    capture sizes with max_num_batched_tokens, all capped at it."""
    from .runtime import forward_token_limit
    scheduler = getattr(config, "scheduler_config", None)
    compilation = getattr(config, "compilation_config", None)
    batched = getattr(scheduler, "max_num_batched_tokens", None) or 8192
    sizes = [int(size) for size in (getattr(compilation, "cudagraph_capture_sizes", None) or [])]
    max_tokens = settings_module.max_tokens_override() or (max(sizes + [1]) if sizes else 512)
    max_tokens = min(max_tokens, batched, forward_token_limit(moe.experts_per_token))
    return max_tokens, sorted({min(size, max_tokens) for size in sizes + [batched]})
