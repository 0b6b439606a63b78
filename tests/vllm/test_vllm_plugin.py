"""The volt8 vLLM plugin inside the pinned vLLM, on the CPU: vLLM's plugin loader finds the entry point;
the plugin changes nothing until VOLT8_VLLM is set; the MTP layers' routed experts of each registry
model, named as vLLM's MTP models name them, go to volt8 and every other layer to the target's config;
and create_weights plus the weight loaders, fed by vLLM's own safetensors iterator and its RoutedExperts
loader (and a DeepSeek-style params_dict loader), give each rank the bytes volt8's own loader gives it,
at TP 1/2/4/8, with expert parallelism, native and quantized at load."""
import glob
import inspect
import json
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest
import torch

import volt8
import volt8.vllm
from volt8.vllm import method as method_module
from volt8.vllm import settings

from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.model_executor.custom_op import op_registry_oot
from vllm.model_executor.layers.fused_moe.activation import MoEActivation
from vllm.model_executor.layers.fused_moe.config import (FusedMoEConfig, FusedMoEParallelConfig,
                                                         RoutingMethodType)
from vllm.model_executor.layers.fused_moe.expert_map_manager import ExpertMapManager
from vllm.model_executor.layers.fused_moe.fused_moe_method_base import FusedMoEMethodBase
from vllm.model_executor.layers.fused_moe.routed_experts import RoutedExperts
from vllm.model_executor.layers.quantization.fp8 import Fp8Config
from vllm.model_executor.layers.quantization.modelopt import (ModelOptFp8Config, ModelOptMixedPrecisionConfig,
                                                              ModelOptNvFp4Config)
from vllm.model_executor.model_loader.weight_utils import safetensors_weights_iterator
from vllm.plugins import load_plugins_by_group


@pytest.fixture
def plugin(monkeypatch):
    """Installs the plugin with the settings asked for (force: the CPU has no capability), and takes it
    away afterwards; vLLM's current config is a stand-in naming num_hidden_layers and the batch sizes."""
    saved = op_registry_oot.pop("RoutedExperts", None)
    state = types.SimpleNamespace(num_hidden_layers=4, capture_sizes=[1, 2, 4, 8], batched=256)

    def current():
        return types.SimpleNamespace(
            model_config=types.SimpleNamespace(hf_text_config=types.SimpleNamespace(
                num_hidden_layers=state.num_hidden_layers)),
            scheduler_config=types.SimpleNamespace(max_num_batched_tokens=state.batched),
            compilation_config=types.SimpleNamespace(cudagraph_capture_sizes=state.capture_sizes))

    monkeypatch.setattr(method_module, "get_current_vllm_config_or_none", current)

    def install(**environ):
        for key in (settings.ENABLE, settings.ONLINE, settings.ONLINE_BLOCK):
            monkeypatch.delenv(key, raising=False)
        for key, value in dict({settings.ENABLE: "force"}, **environ).items():
            monkeypatch.setenv(key, value)
        op_registry_oot.pop("RoutedExperts", None)
        volt8.vllm.register()
        return state

    yield install
    op_registry_oot.pop("RoutedExperts", None)
    if saved is not None:
        op_registry_oot["RoutedExperts"] = saved


def make_layer(name, hidden, intermediate, experts, top_k=2, tp=1, rank=0, ep=1, ep_rank=0, quant_config=None,
               placement="linear", activation=MoEActivation.SILU, expert_groups=None):
    """A RoutedExperts as vLLM's FusedMoE builds one (the plugin's subclass when it is installed)."""
    use_ep = ep > 1
    parallel = FusedMoEParallelConfig(tp_size=tp, pcp_size=1, dp_size=1, ep_size=ep, tp_rank=rank, pcp_rank=0,
                                      dp_rank=0, ep_rank=ep_rank, sp_size=1, use_ep=use_ep,
                                      all2all_backend="allgather_reducescatter", enable_eplb=False)
    manager = ExpertMapManager(max_num_batched_tokens=64, top_k=top_k, global_num_experts=experts,
                               num_redundant_experts=0, num_expert_group=expert_groups, moe_parallel_config=parallel,
                               placement_strategy=placement, enable_eplb=False)
    moe = FusedMoEConfig(num_experts=experts, experts_per_token=top_k, hidden_dim=hidden,
                         intermediate_size=intermediate, num_local_experts=manager.local_num_experts,
                         num_logical_experts=experts, activation=activation, device="cpu",
                         routing_method=RoutingMethodType.Renormalize, moe_parallel_config=parallel,
                         in_dtype=torch.bfloat16)
    with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
        return RoutedExperts(layer_name=name, params_dtype=torch.bfloat16, moe_config=moe, quant_config=quant_config,
                             expert_map_manager=manager)


# ---- the entry point and turning it on ----

def test_vllms_plugin_loader_finds_the_entry_point():
    plugins = load_plugins_by_group("vllm.general_plugins")
    assert plugins.get("volt8") is volt8.vllm.register, plugins


def test_nothing_changes_until_it_is_turned_on(plugin, monkeypatch):
    plugin(**{settings.ENABLE: "0"})
    assert "RoutedExperts" not in op_registry_oot
    monkeypatch.delenv(settings.ENABLE)
    volt8.vllm.register()
    assert "RoutedExperts" not in op_registry_oot
    monkeypatch.setenv(settings.ENABLE, "sometimes")
    with pytest.raises(ValueError, match="VOLT8_VLLM='sometimes' is not one of"):
        volt8.vllm.register()
    plugin(**{settings.ENABLE: "1"})
    assert op_registry_oot["RoutedExperts"] is method_module.Volt8RoutedExperts
    volt8.vllm.register()  # again (vLLM loads plugins once per process; a second call changes nothing)
    assert op_registry_oot["RoutedExperts"] is method_module.Volt8RoutedExperts


def test_gpus_below_sm89_by_default_any_gpu_when_forced(monkeypatch):
    wrapper = lambda mode, capability, layers="mtp": method_module.Volt8QuantConfig(
        None, settings.Settings(**dict(vars(settings.read({settings.ENABLE: mode})), layers=layers)), 61, capability)
    prefix = "model.layers.61.mlp.experts"
    mtp_layer = lambda role: None if role is None else role.mtp_layer
    assert mtp_layer(wrapper("1", 70).role(prefix)) == 0 and mtp_layer(wrapper("1", 86).role(prefix)) == 0
    assert wrapper("1", 89).role(prefix) is None and wrapper("1", 90).role(prefix) is None
    assert mtp_layer(wrapper("force", 90).role(prefix)) == 0
    assert wrapper("1", None).role(prefix) is None and mtp_layer(wrapper("force", None).role(prefix)) == 0
    target = "model.layers.3.mlp.experts"
    assert wrapper("1", 70).role(target) is None  # a target layer: only with VOLT8_VLLM_LAYERS=all
    assert wrapper("1", 70, "all").role(target) == method_module.Role(target, None)


# ---- which layers volt8 serves ----

REGISTRY_MTP_NAMING = {
    # registry model -> (vLLM's MTP model module, the target's num_hidden_layers, prefix of MTP layer i)
    "deepseek-v3": ("deepseek_mtp", 61, lambda i: f"model.layers.{61 + i}.mlp.experts"),
    "glm-4.5": ("glm4_moe_mtp", 92, lambda i: f"model.layers.{92 + i}.mlp.experts"),
    "glm-4.5-air": ("glm4_moe_mtp", 46, lambda i: f"model.layers.{46 + i}.mlp.experts"),
    "qwen3-next": ("qwen3_next_mtp", 48, lambda i: f"mtp.layers.{i}.mlp.experts"),
    "reference": ("qwen3_next_mtp", 48, lambda i: f"mtp.layers.{i}.mlp.experts"),  # named as the demo writes it
}


def registry_models():
    """name -> (hidden, intermediate, experts, top_k), from `volt8 models` (the venv's, or $VOLT8_CLI)."""
    command = os.environ.get("VOLT8_CLI") or os.path.join(os.path.dirname(sys.executable), "volt8")
    run = subprocess.run([command, "models"], capture_output=True, text=True, check=True)
    models = {}
    for line in run.stdout.splitlines():
        match = re.match(r"(\S+)\s+hidden\s+(\d+)\s+moe intermediate\s+(\d+)\s+experts\s+(\d+)\s+top-(\d+)", line)
        if match:
            models[match.group(1)] = tuple(int(match.group(k)) for k in range(2, 6))
    return models


def test_vllms_mtp_models_name_their_layers_as_the_table_says():
    """The MTP models of this vLLM: DeepSeek's and GLM's number their layers from num_hidden_layers under
    model., Qwen3-Next's from 0 under mtp. (a change there shows here first)."""
    from vllm.model_executor.models import deepseek_mtp, glm4_moe_mtp, qwen3_next_mtp
    for module, root in ((deepseek_mtp, "model"), (glm4_moe_mtp, "model"), (qwen3_next_mtp, "mtp")):
        source = inspect.getsource(module)
        assert 'f"{prefix}.layers.{idx}"' in source and f'maybe_prefix(prefix, "{root}")' in source, module.__name__
    assert "range(self.num_mtp_layers)" in inspect.getsource(qwen3_next_mtp.Qwen3NextMultiTokenPredictor)
    assert "self.mtp_start_layer_idx = config.num_hidden_layers" in inspect.getsource(deepseek_mtp)
    assert set(REGISTRY_MTP_NAMING) == set(registry_models())


@pytest.mark.parametrize("model", sorted(REGISTRY_MTP_NAMING))
def test_each_registry_models_mtp_experts_go_to_volt8(plugin, model):
    state = plugin(**{settings.ONLINE: "fp8"})
    _, layers, prefix = REGISTRY_MTP_NAMING[model]
    hidden, intermediate, _, top_k = registry_models()[model]
    state.num_hidden_layers = layers
    width = intermediate // 4
    for mtp_layer in (0, 1):
        # a block-FP8 target (native: the rank's offset in the 128 grid), and an unquantized one (online)
        for quant_config, offset in ((Fp8Config(weight_block_size=[128, 128]), width % 128), (None, 0)):
            layer = make_layer(prefix(mtp_layer), hidden, intermediate, 16, top_k=top_k, tp=4, rank=1,
                               quant_config=quant_config)
            assert isinstance(layer, RoutedExperts) and isinstance(layer.quant_method, method_module.Volt8MoEMethod)
            shape = layer.quant_method.staging.shape
            assert (shape.hidden, shape.intermediate, shape.intermediate_offset) == (hidden, width, offset), shape


class SentinelMethod(FusedMoEMethodBase):
    """What a target's config gives a layer, so a test can see it came through unchanged."""

    def create_weights(self, layer, num_experts, hidden_size, intermediate_size_per_partition, params_dtype, **extra):
        layer.sentinel = True

    def get_fused_moe_quant_config(self, layer):
        return None


class SentinelConfig(Fp8Config):
    def get_quant_method(self, layer, prefix):
        return SentinelMethod(layer.moe_config) if isinstance(layer, RoutedExperts) else "linear method"


def test_every_other_layer_goes_to_the_wrapped_config(plugin):
    state = plugin()
    state.num_hidden_layers = 61
    inner = SentinelConfig(weight_block_size=[128, 128])
    for prefix in ("model.layers.60.mlp.experts", "model.layers.3.mlp.experts", "model.layers.61.mlp.shared_experts"):
        layer = make_layer(prefix, 256, 640, 8, quant_config=inner)
        assert isinstance(layer.quant_method, SentinelMethod) and layer.sentinel, prefix
    layer = make_layer("model.layers.61.mlp.experts", 256, 640, 8, quant_config=inner)
    assert isinstance(layer.quant_method, method_module.Volt8MoEMethod)
    wrapper = method_module.Volt8QuantConfig(inner, settings.Settings(enabled=True, force=True), 61, None)
    assert wrapper.get_quant_method(object(), "model.layers.61.self_attn.o_proj") == "linear method"
    assert wrapper.get_name() == "fp8" and wrapper.packed_modules_mapping is inner.packed_modules_mapping
    assert method_module.Volt8QuantConfig(None, settings.Settings(), 61, None).get_quant_method(
        object(), "model.layers.0.mlp") is None


def fixture_quant_config(folder, entry):
    """vLLM's quantization config of a fixture checkpoint (config.json or hf_quant_config.json)."""
    path = os.path.join(folder, entry["dir"])
    with open(os.path.join(path, "config.json")) as stream:
        config = json.load(stream).get("quantization_config")
    if config is None and os.path.exists(os.path.join(path, "hf_quant_config.json")):
        with open(os.path.join(path, "hf_quant_config.json")) as stream:
            config = json.load(stream)
    if config is None:
        return None
    algo = config.get("quant_algo") or config.get("quantization", {}).get("quant_algo")
    if config.get("quant_method") == "fp8":
        return Fp8Config.from_config(config)
    if algo == "MIXED_PRECISION":
        return ModelOptMixedPrecisionConfig.from_config(config)
    if algo == "NVFP4":
        return ModelOptNvFp4Config.from_config(config)
    return None  # the AWQ fixture's experts are F16: the target of such a checkpoint leaves them unquantized


def test_expert_formats_of_the_targets_configs():
    fp8 = Fp8Config(weight_block_size=[128, 128], ignored_layers=["model.layers.61.mlp.experts"])
    assert method_module.expert_format(fp8, "model.layers.62.mlp.experts")[0] == "fp8_block"
    assert method_module.expert_format(fp8, "model.layers.61.mlp.experts")[0] == "unquantized"
    assert method_module.expert_format(Fp8Config(weight_block_size=[1, 128]), "mtp.layers.0.mlp.experts")[0] == "other"
    assert method_module.expert_format(Fp8Config(), "mtp.layers.0.mlp.experts")[0] == "other"  # per-tensor
    pb_wo = ModelOptFp8Config("FP8_PB_WO", True, None, [])
    assert method_module.expert_format(pb_wo, "mtp.layers.0.mlp.experts") == ("fp8_block", "modelopt FP8_PB_WO")
    assert method_module.expert_format(ModelOptFp8Config("FP8", True, None, []), "mtp.layers.0.mlp.experts")[0] == "other"
    assert method_module.expert_format(ModelOptFp8Config("FP8_PB_WO", True, None, ["mtp*"]),
                                       "mtp.layers.0.mlp.experts")[0] == "unquantized"
    assert method_module.expert_format(None, "mtp.layers.0.mlp.experts")[0] == "unquantized"
    assert method_module.expert_format(ModelOptNvFp4Config.from_config({"quant_algo": "NVFP4", "group_size": 16}),
                                       "mtp.layers.0.mlp.experts")[0] is None  # asked for its method


# ---- weights through vLLM's loaders ----

def layer_prefix(entry):
    """The layer's vLLM name: the checkpoint's, or the runtime name its quantization metadata uses."""
    if entry["dir"] == "modelopt_4d_hf_quant_config":  # tensors under mtp.layers.0, metadata under model.layers.4
        return "model.layers.4.mlp.experts"
    return entry["prefix"].rstrip(".")


def checkpoint_weights(folder, entry):
    """vLLM's safetensors iterator over the fixture's files: the MTP experts' tensors, named relative to
    the layer (what vLLM hands RoutedExperts.load_weights)."""
    files = sorted(glob.glob(os.path.join(folder, entry["dir"], "*.safetensors")))
    prefix = entry["prefix"]
    for name, tensor in safetensors_weights_iterator(files, False):
        if name.startswith(prefix):
            yield name[len(prefix):], tensor


def built_layer(plugin_state, folder, entry, quant_config, **options):
    plugin_state.num_hidden_layers = 4
    return make_layer(layer_prefix(entry), entry["hidden"], entry["intermediate"], entry["experts"],
                      quant_config=quant_config, **options)


def expect_host_load_bytes(layer, path, tp, rank, ep, ep_rank, online):
    staging = layer.quant_method.staging
    start, count = volt8.expert_range(staging.num_experts, ep, ep_rank) if ep > 1 else (0, 0)
    shape, *arrays = staging.arrays()
    host = volt8.load_host_checkpoint(path, tp_size=tp, tp_rank=rank, expert_start=start, expert_count=count, **online)
    where = f"{os.path.basename(path)} tp {tp} rank {rank} ep {ep_rank}/{ep}"
    assert shape == host.shape, where
    for got, name in zip(arrays, ("w13", "s13", "w2", "s2")):
        assert got.tobytes() == np.asarray(getattr(host, name)).tobytes(), f"{where}: {name} differs"


CASES = [("modelopt_mixed_indexed", None), ("fp8_runtime_names", None), ("modelopt_4d_hf_quant_config", None),
         ("bf16_fused", "128"), ("bf16_fused", "1"), ("f16_per_expert_opt_in_config", "128")]


@pytest.mark.parametrize("case, online", CASES, ids=[f"{c}-{o or 'native'}" for c, o in CASES])
def test_loaders_give_the_bytes_of_volt8s_own_loader(plugin, checkpoints, case, online):
    folder, manifest = checkpoints
    entry = manifest["valid"][case]
    path = os.path.join(folder, entry["dir"])
    environ = {settings.ONLINE: "fp8", settings.ONLINE_BLOCK: online} if online else {}
    state = plugin(**environ)
    quant_config = fixture_quant_config(folder, entry)
    online_options = {"mtp_expert_quantization": "fp8", "online_block_n": int(online)} if online else {}
    for tp in entry["tps"][online or "128"]:
        for rank in range(tp):
            for ep, ep_rank in ((1, 0), (2, 1)) if rank in (0, tp - 1) else ((1, 0),):
                layer = built_layer(state, folder, entry, quant_config, tp=tp if ep == 1 else 1,
                                    rank=rank if ep == 1 else 0, ep=ep, ep_rank=ep_rank)
                assert isinstance(layer.quant_method, method_module.Volt8MoEMethod), layer.quant_method
                assert layer.quant_method.online_block_n == (int(online) if online else 0)
                loaded = list(layer.load_weights(checkpoint_weights(folder, entry)))
                assert loaded, "vLLM's loader loaded nothing"
                expect_host_load_bytes(layer, path, tp if ep == 1 else 1, rank if ep == 1 else 0, ep, ep_rank,
                                       online_options)


def test_deepseek_style_params_dict_loader(plugin, checkpoints):
    """A model whose load_weights maps checkpoint names itself (DeepSeekMTP, Glm4MoeMTP) and calls
    param.weight_loader(param, tensor, name, shard_id=, expert_id=, return_success=True)."""
    folder, manifest = checkpoints
    entry = manifest["valid"]["fp8_runtime_names"]  # model.layers.4.mlp.experts.<e>.*_proj.weight(_scale_inv)
    state = plugin()
    quant_config = fixture_quant_config(folder, entry)
    for tp, rank in ((2, 1), (8, 5)):
        layer = built_layer(state, folder, entry, quant_config, tp=tp, rank=rank)
        model = torch.nn.Module()
        model.model = torch.nn.Module()
        model.model.layers = torch.nn.ModuleDict({"4": torch.nn.Module()})
        model.model.layers["4"].mlp = torch.nn.Module()
        model.model.layers["4"].mlp.experts = layer
        params = dict(model.named_parameters())
        mapping = RoutedExperts.make_expert_params_mapping(model, "gate_proj", "down_proj", "up_proj",
                                                           num_experts=entry["experts"], routed_experts_prefix="")
        files = sorted(glob.glob(os.path.join(folder, entry["dir"], "*.safetensors")))
        loaded = 0
        for name, tensor in safetensors_weights_iterator(files, False):
            if not name.startswith(entry["prefix"]):  # the target's own layers are another model's
                continue
            for param_name, weight_name, expert_id, shard_id in mapping:
                if weight_name in name:
                    mapped = name.replace(weight_name, param_name)
                    param = params[mapped]
                    assert param.weight_loader(param, tensor, mapped, shard_id=shard_id, expert_id=expert_id,
                                               return_success=True)
                    loaded += 1
                    break
        assert loaded == entry["experts"] * 6
        expect_host_load_bytes(layer, os.path.join(folder, entry["dir"]), tp, rank, 1, 0, {})


def test_what_volt8_does_not_take_is_refused_by_name(plugin, checkpoints):
    folder, manifest = checkpoints
    entry = manifest["valid"]["fp8_runtime_names"]
    state = plugin()
    quant_config = fixture_quant_config(folder, entry)
    layer = built_layer(state, folder, entry, quant_config, tp=4, rank=1)
    scale = layer.w13_input_scale
    with pytest.raises(NotImplementedError, match=r"volt8: experts.w13_input_scale: activation scales"):
        scale.weight_loader(scale, torch.ones(()), "experts.w13_input_scale", shard_id="w1", expert_id=0)
    weight = layer.w13_weight
    with pytest.raises(volt8.InvalidArgumentError, match=r"x \(expert 0, gate\): dtype BF16; native experts are"):
        weight.weight_loader(weight, torch.zeros(640, 256, dtype=torch.bfloat16), "x", shard_id="w1", expert_id=0)
    with pytest.raises(NotImplementedError, match=r"activation gelu"):
        built_layer(state, folder, entry, quant_config, activation=MoEActivation.GELU)
    with pytest.raises(NotImplementedError, match=r"not one contiguous range"):
        built_layer(state, folder, entry, quant_config, ep=2, ep_rank=1, placement="round_robin", expert_groups=2)
    layer = built_layer(state, folder, entry, quant_config, ep=2, ep_rank=1)
    weight = layer.w13_weight  # expert 0 is EP rank 0's: not loaded here, and said so
    assert weight.weight_loader(weight, torch.zeros(1), "x", shard_id="w1", expert_id=0, return_success=True) is False


def test_token_counts_follow_vllms_capture_sizes(monkeypatch):
    moe = types.SimpleNamespace(experts_per_token=8)
    config = types.SimpleNamespace(scheduler_config=types.SimpleNamespace(max_num_batched_tokens=8192),
                                   compilation_config=types.SimpleNamespace(cudagraph_capture_sizes=[1, 2, 4, 8, 512]))
    assert method_module.token_counts(config, moe) == (512, [1, 2, 4, 8, 512])
    monkeypatch.setenv("VOLT8_VLLM_MAX_TOKENS", "4")
    assert method_module.token_counts(config, moe) == (4, [1, 2, 4])
    monkeypatch.setenv("VOLT8_VLLM_MAX_TOKENS", "100000")
    assert method_module.token_counts(config, moe)[0] == 8192  # max_num_batched_tokens caps it
    config.scheduler_config.max_num_batched_tokens = 1 << 28
    monkeypatch.setenv("VOLT8_VLLM_MAX_TOKENS", str(1 << 28))
    assert method_module.token_counts(config, moe)[0] == (1 << 30) // 8  # so do a forward's 2^30 routed pairs
    monkeypatch.setenv("VOLT8_VLLM_MAX_TOKENS", "lots")
    with pytest.raises(ValueError, match="VOLT8_VLLM_MAX_TOKENS='lots'"):
        method_module.token_counts(config, moe)


# ---- vLLM's real MTP model classes, on simulated GPUs (tests/engines/real_models.py: what it stubs) ----

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "engines"))
import real_models  # noqa: E402
from ranks import expect_all_ok, run_ranks  # noqa: E402

CHECKS = sum(14 + len(targets) for _, _, _, _, targets in real_models.MODELS.values())


def test_what_is_stubbed():
    print("stubbed on the CPU:\n  " + "\n  ".join(real_models.STUBS))
    assert real_models.STUBS


def test_on_a_v100_upstream_vllm_refuses_fp8_before_any_layer(tmp_path):
    """docs/vllm.md: vLLM 0.33 refuses an FP8 checkpoint below compute capability 7.5 when it builds its
    config, before the plugin sees a layer; V100s run the fork."""
    run_ranks(tmp_path, 1, "--capability", "70", expect_error="Minimum capability: 75. Current capability: 70")


@pytest.mark.parametrize("capability", [75, 80])
def test_on_t4_and_a100_class_gpus_volt8_serves_the_layers(tmp_path, capability):
    results = run_ranks(tmp_path, 1, "--capability", str(capability))
    expect_all_ok(results, CHECKS + len(real_models.MODELS))
    assert not [line for line in results[0]["volt8_log"] if "FP8 tensor cores" in line]


def test_on_fp8_gpus_volt8_leaves_the_layers_to_vllm_and_says_so_once(tmp_path):
    results = run_ranks(tmp_path, 1, "--capability", "90")
    expect_all_ok(results)
    assert not [check for check in results[0]["checks"] if "staged bytes" in check["check"]]
    said = [line for line in results[0]["volt8_log"] if "FP8 tensor cores" in line]
    assert said == ["volt8: VOLT8_VLLM=1 leaves the MoE layers to vLLM: this GPU (compute capability 9.0) has FP8 "
                    "tensor cores; VOLT8_VLLM=force serves them on volt8 all the same"], said


def test_on_fp8_gpus_force_serves_them(tmp_path):
    expect_all_ok(run_ranks(tmp_path, 1, "--capability", "90", "--enable", "force"),
                  CHECKS + len(real_models.MODELS))


@pytest.mark.parametrize("tp", [2, 4])
def test_real_classes_at_tp(tmp_path, tp):
    expect_all_ok(run_ranks(tmp_path, tp, "--capability", "80"), CHECKS)
