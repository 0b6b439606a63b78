"""The real MTP (and target) model classes of the installed vLLM-based engine (vLLM 0.33 or 1Cat-vLLM),
built on the CPU with tiny configs, with and without the volt8 plugin, one process a tensor-parallel
rank on a gloo group; each model's own load_weights over a synthetic block-FP8 (or BF16) checkpoint
under the real layer names. Used by tests/vllm and tests/onecat, both as a module and as the worker
each rank runs:

    python real_models.py --tp N --rank R --port P --scratch DIR --out RESULT.json

What is stubbed, because a CPU machine has no kernels for it (nothing of the MoE layers or the plugin):
- the platform: vLLM's CPU platform, with one change: MLA attention, which has no CPU backend, is given
  TritonMLA's backend classes (built, never run), and MLA's prefill backend is a stand-in class;
- the FP8 linear kernel choice (init_fp8_linear_kernel): a stand-in object, never run; the linear
  layers' weights are still created and loaded by their real FP8 method;
- FP8 config's view of the platform (quantization/fp8.py only): a CUDA GPU of the capability asked
  for (--capability, default 7.0), so that the engine's Fp8Config picks the method it picks on such a
  GPU for every layer volt8 leaves alone;
- the other layers' post-load step is not run (it would repack weights for kernels the CPU lacks);
  volt8's own post-load step is run and must fail cleanly, naming the layer, with no GPU.
"""
import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "fixtures"))

STUBS = ("platform: vLLM's CPU platform; MLA attention gets TritonMLA's backend classes (never run) and a stand-in "
         "prefill backend",
         "init_fp8_linear_kernel: a stand-in kernel object (never run)",
         "quantization/fp8.py's current_platform: a CUDA GPU of the simulated capability",
         "post-load (process_weights_after_loading) of every layer but volt8's: not run")

HIDDEN = 256
MOE_INTERMEDIATE = 1408  # GLM-4.5-Air's: per rank 1408, 704, 352, 176 at TP 1/2/4/8, never a multiple of 128
EXPERTS = 8
TOP_K = 2
TARGET_LAYERS = 2  # layer 0 dense, layer 1 MoE; the MTP layer is number 2 (DeepSeek, GLM) or mtp.layers.0

FP8_BLOCK = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}


def _common(quantized):
    config = {"hidden_size": HIDDEN, "num_hidden_layers": TARGET_LAYERS, "num_nextn_predict_layers": 1,
              "vocab_size": 512, "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "torch_dtype": "bfloat16",
              "tie_word_embeddings": False, "rope_theta": 10000, "num_experts_per_tok": TOP_K,
              "moe_intermediate_size": MOE_INTERMEDIATE, "intermediate_size": 2048}
    if quantized:
        # the shared experts (moe_intermediate_size wide: 176 rows a rank at TP8) and Qwen3-Next's MTP fc
        # (hidden wide: 32 a rank) stay BF16, as FP8 linear layers take only whole 128-blocks a rank
        config["quantization_config"] = dict(FP8_BLOCK, ignored_layers=[
            f"model.layers.{layer}.mlp.shared_experts.{projection}" for layer in range(TARGET_LAYERS + 1)
            for projection in ("gate_proj", "up_proj", "down_proj")] + ["mtp.fc"])
    return config


def deepseek_config(quantized):
    return dict(_common(quantized), architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3",
                num_attention_heads=8, num_key_value_heads=8, n_routed_experts=EXPERTS, n_shared_experts=1,
                n_group=1, topk_group=1, first_k_dense_replace=1, moe_layer_freq=1, q_lora_rank=256, kv_lora_rank=256,
                qk_nope_head_dim=128, qk_rope_head_dim=128, v_head_dim=128, topk_method="noaux_tc",
                scoring_func="sigmoid", norm_topk_prob=True, routed_scaling_factor=2.5)


def glm_config(quantized):
    return dict(_common(quantized), architectures=["Glm4MoeForCausalLM"], model_type="glm4_moe",
                num_attention_heads=8, num_key_value_heads=8, head_dim=128, n_routed_experts=EXPERTS,
                n_shared_experts=1, n_group=1, topk_group=1, first_k_dense_replace=1, norm_topk_prob=True,
                routed_scaling_factor=2.5, partial_rotary_factor=0.5, use_qk_norm=False, attention_bias=True)


def qwen3_next_config(quantized):
    return dict(_common(quantized), architectures=["Qwen3NextForCausalLM"], model_type="qwen3_next",
                num_attention_heads=8, num_key_value_heads=8, head_dim=128, num_experts=EXPERTS,
                shared_expert_intermediate_size=1024, decoder_sparse_step=1, mlp_only_layers=[],
                full_attention_interval=1, layer_types=["full_attention"] * TARGET_LAYERS, norm_topk_prob=True,
                partial_rotary_factor=0.25,
                linear_num_value_heads=8, linear_num_key_heads=8, linear_key_head_dim=128, linear_value_head_dim=128,
                linear_conv_kernel_dim=4)


# name -> (config, the MTP class, the target class, the MTP layer's experts prefix, the target's MoE experts)
MODELS = {
    "deepseek-v3": (deepseek_config, "vllm.model_executor.models.deepseek_mtp:DeepSeekMTP",
                    "vllm.model_executor.models.deepseek_v2:DeepseekV3ForCausalLM",
                    f"model.layers.{TARGET_LAYERS}.mlp.experts", ["model.layers.1.mlp.experts"]),
    "glm-4.5": (glm_config, "vllm.model_executor.models.glm4_moe_mtp:Glm4MoeMTP",
                "vllm.model_executor.models.glm4_moe:Glm4MoeForCausalLM",
                f"model.layers.{TARGET_LAYERS}.mlp.experts", ["model.layers.1.mlp.experts"]),
    "qwen3-next": (qwen3_next_config, "vllm.model_executor.models.qwen3_next_mtp:Qwen3NextMTP",
                   "vllm.model_executor.models.qwen3_next:Qwen3NextForCausalLM",
                   "mtp.layers.0.mlp.experts", ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"]),
}


def _resolve(path):
    import importlib
    module, name = path.split(":")
    return getattr(importlib.import_module(module), name)


# ---- the stand-ins ----

_installed = {}


def install_stand_ins(capability=70):
    """The stubs STUBS names; once per process, before any model module is imported."""
    if _installed:
        return _installed["platform"]
    import vllm.platforms
    from vllm.platforms.cpu import CpuPlatform
    from vllm.platforms.interface import DeviceCapability

    class CpuStandIn(CpuPlatform):
        @classmethod
        def get_attn_backend_cls(cls, selected_backend, attn_selector_config, *args, **kwargs):
            if attn_selector_config.use_mla:
                return "vllm.v1.attention.backends.mla.triton_mla.TritonMLABackend"
            return super().get_attn_backend_cls(selected_backend, attn_selector_config, *args, **kwargs)

        @classmethod
        def get_device_capability(cls, device_id=0):
            return DeviceCapability(capability // 10, capability % 10)

    platform = CpuStandIn()
    vllm.platforms._current_platform = platform

    import vllm.model_executor.layers.attention.mla_attention as mla_attention

    class PrefillStandIn:
        def __init__(self, *args, **kwargs):
            pass

    mla_attention.get_mla_prefill_backend = lambda *args, **kwargs: PrefillStandIn

    import vllm.model_executor.layers.quantization.fp8 as fp8

    class KernelStandIn:
        def __init__(self, **kwargs):
            self.arguments = kwargs

    fp8.init_fp8_linear_kernel = lambda **kwargs: KernelStandIn(**kwargs)

    class CudaView:
        """The platform as FP8 config sees it: a CUDA GPU of the simulated capability."""

        def __getattr__(self, name):
            return getattr(platform, name)

        def is_cuda(self):
            return True

        def has_device_capability(self, wanted, device_id=0):
            value = wanted if isinstance(wanted, int) else wanted[0] * 10 + wanted[1]
            return capability >= value

        def get_device_capability(self, device_id=0):
            return DeviceCapability(capability // 10, capability % 10)

    fp8.current_platform = CudaView()
    _installed["platform"] = platform
    return platform


# ---- configs and checkpoints ----

def write_model_folder(folder, model, quantized):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as stream:
        json.dump(MODELS[model][0](quantized), stream)
    return folder


def vllm_configs(folder, tp, ep=False):
    """(target VllmConfig, draft VllmConfig) of the model in `folder` at TP `tp`."""
    from vllm.config import (CacheConfig, DeviceConfig, LoadConfig, ModelConfig, ParallelConfig,
                             SpeculativeConfig, VllmConfig)
    parallel = ParallelConfig(tensor_parallel_size=tp, enable_expert_parallel=ep)
    target = ModelConfig(model=folder, tokenizer=folder, skip_tokenizer_init=True, dtype="bfloat16",
                         enforce_eager=True)
    speculative = SpeculativeConfig(method="mtp", num_speculative_tokens=1, target_model_config=target,
                                    target_parallel_config=parallel)
    # a hybrid model's (Qwen3-Next's) mamba block: the whole model length, as without prefix caching
    common = dict(parallel_config=parallel, device_config=DeviceConfig(device="cpu"), load_config=LoadConfig(),
                  speculative_config=speculative)
    target_config = VllmConfig(model_config=target, cache_config=CacheConfig(mamba_block_size=512), **common)
    draft_config = VllmConfig(model_config=speculative.draft_model_config,
                              cache_config=CacheConfig(mamba_block_size=512), **common)
    return target_config, draft_config


def synthetic_experts(seed, kind):
    import numpy as np
    from make_checkpoints import Experts
    return Experts(np.random.default_rng(seed), HIDDEN, MOE_INTERMEDIATE, EXPERTS, kind)


def expert_tensors(experts, prefix):
    """{name: torch tensor} of the experts under `prefix` (E4M3 codes and BF16 scales, or BF16 values)."""
    import torch
    tensors = {}
    for name, array in experts.per_expert_tensors(prefix + ".").items():
        if array.dtype.name == "float8_e4m3fn":
            tensors[name] = torch.from_numpy(array.view("uint8").copy()).view(torch.float8_e4m3fn)
        elif array.dtype.name == "bfloat16":
            tensors[name] = torch.from_numpy(array.view("uint16").copy()).view(torch.bfloat16)
        else:
            tensors[name] = torch.from_numpy(array.copy())
    return tensors


def oracle_folder(scratch, name, model, experts, quantized):
    """A checkpoint volt8's own loader reads: these experts as the MTP layer's, with the model's config."""
    from make_checkpoints import write_safetensors
    folder = os.path.join(scratch, name)
    if os.path.isdir(folder):
        return folder
    write_model_folder(folder, model, quantized)
    write_safetensors(os.path.join(folder, "model.safetensors"), experts.per_expert_tensors(MODELS[model][3] + "."))
    return folder


# ---- building and looking ----

def methods(model):
    """{module name: its quant_method's class name} of every module that has one."""
    return {name: type(module.quant_method).__name__ for name, module in model.named_modules()
            if getattr(module, "quant_method", None) is not None}


def plugin_on(environ):
    """Installs the plugin with these VOLT8_* settings (the rest unset); {} turns it off."""
    import volt8.vllm
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.layers.fused_moe import RoutedExperts
    from volt8.vllm import settings
    op_registry_oot.pop(RoutedExperts.__name__, None)
    for key in (settings.ENABLE, settings.ONLINE, settings.ONLINE_BLOCK, settings.LAYERS):
        os.environ.pop(key, None)
    os.environ.update(environ)
    volt8.vllm.register()


def build(cls_path, config):
    from vllm.config import set_current_vllm_config
    config.compilation_config.static_forward_context.clear()  # each build registers its attention layers anew
    with set_current_vllm_config(config):
        return _resolve(cls_path)(vllm_config=config, prefix="")


def volt8_layers(model):
    from volt8.vllm.method import Volt8MoEMethod
    return {name: module for name, module in model.named_modules()
            if isinstance(getattr(module, "quant_method", None), Volt8MoEMethod)}


def staged_equals_oracle(layer, folder, tp, rank, expert_range=None, online=False):
    """None when the layer's staged arrays are the bytes volt8.load_host_checkpoint gives this rank, else
    what differs."""
    import numpy as np
    import volt8
    staging = layer.quant_method.staging
    start, count = expert_range or (0, 0)
    options = {"mtp_expert_quantization": "fp8", "online_block_n": 128} if online else {}
    host = volt8.load_host_checkpoint(folder, tp_size=tp, tp_rank=rank, expert_start=start, expert_count=count,
                                      **options)
    shape, *arrays = staging.arrays()
    if shape != host.shape:
        return f"shape {shape} != {host.shape}"
    for got, name in zip(arrays, ("w13", "s13", "w2", "s2")):
        if got.tobytes() != np.asarray(getattr(host, name)).tobytes():
            return f"{name} differs"
    return None


def engine_scales(layer, experts, tp, rank):
    """Whether the engine's own method (plugin off) holds, for each expert's gate projection, the scale
    blocks of the rank's rows: {"method", "rows", "blocks_needed", "blocks_held", "right"}."""
    import numpy as np
    method = type(layer.quant_method).__name__
    scales = getattr(layer, "w13_weight_scale_inv", None)
    width = MOE_INTERMEDIATE // tp
    first, last = rank * width // 128, (rank * width + width - 1) // 128
    report = {"method": method, "rows": [rank * width, rank * width + width], "blocks_needed": last - first + 1}
    if scales is None or scales.dim() != 3:
        return dict(report, blocks_held=None, right=None)
    held = scales.shape[1] // 2
    report["blocks_held"] = held
    right = True
    for expert in range(EXPERTS):
        want = np.asarray(experts.scales[expert, "gate_proj"], dtype=np.float32)[first:last + 1]
        got = scales[expert, :held].float().numpy()
        right = right and want.shape == got.shape and bool(np.array_equal(want, got))
    return dict(report, right=right)


# ---- the worker: every check of one rank ----

def run_rank(tp, rank, scratch, capability, models, result, enable="1"):
    """Every check of one rank; VOLT8_VLLM=`enable` (1 or force), so volt8 serves the layers unless the
    simulated GPU has FP8 hardware and enable is 1."""
    install_stand_ins(capability)
    serving = enable == "force" or capability < 89
    from vllm.distributed import parallel_state
    checks = result["checks"]

    def check(name, ok, detail=""):
        checks.append({"check": name, "ok": bool(ok), "detail": detail})

    first = True
    for model in models:
        _, mtp_class, target_class, mtp_prefix, target_prefixes = MODELS[model]
        folder = write_model_folder(os.path.join(scratch, f"{model}-fp8"), model, True)
        target_config, draft_config = vllm_configs(folder, tp)
        if first:
            from vllm.config import set_current_vllm_config
            with set_current_vllm_config(target_config):
                parallel_state.init_distributed_environment(world_size=tp, rank=rank, local_rank=rank,
                                                            distributed_init_method=result["init"], backend="gloo")
                parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp)
            first = False
        mtp_experts = synthetic_experts(11, "fp8")
        target_experts = synthetic_experts(12, "fp8")
        weights = expert_tensors(mtp_experts, mtp_prefix)
        for prefix in target_prefixes:  # every target MoE layer holds the same experts: one oracle for all
            weights.update(expert_tensors(target_experts, prefix))
        mtp_oracle = oracle_folder(scratch, f"{model}-oracle-mtp", model, mtp_experts, True)
        target_oracle = oracle_folder(scratch, f"{model}-oracle-target", model, target_experts, True)

        plugin_on({})
        base_draft = methods(build(mtp_class, draft_config))
        built = build(target_class, target_config)
        base_target = methods(built)
        # what the engine's own method loads of a rank's scale blocks (recorded; the suites check it)
        built.load_weights(iter(weights.items()))
        layer = next(module for name, module in built.named_modules()  # (0.33 wraps it in a runner)
                     if name.startswith(target_prefixes[-1]) and getattr(module, "quant_method", None) is not None)
        result.setdefault("engine_scales", {})[model] = engine_scales(layer, target_experts, tp, rank)
        check(f"{model}: off: no volt8", "Volt8MoEMethod" not in set(base_draft.values()) | set(base_target.values()))
        result.setdefault("baseline", {})[model] = {"draft": base_draft, "target": base_target}

        for layer_set in ("mtp", "all"):
            plugin_on({"VOLT8_VLLM": enable, **({"VOLT8_VLLM_LAYERS": "all"} if layer_set == "all" else {})})
            for role, cls_path, config, base, prefixes, oracle in (
                    ("draft", mtp_class, draft_config, base_draft, [mtp_prefix], mtp_oracle),
                    ("target", target_class, target_config, base_target, target_prefixes, target_oracle)):
                built = build(cls_path, config)
                got = methods(built)
                served = volt8_layers(built)
                wanted = prefixes if serving and (role == "draft" or layer_set == "all") else []
                served_prefixes = sorted(layer.quant_method.layer_name for layer in served.values())
                check(f"{model} {layer_set} {role}: volt8 serves exactly {wanted}", served_prefixes == sorted(wanted),
                      f"served {served_prefixes}")
                changed = sorted(name for name in base if got.get(name) != base[name])
                check(f"{model} {layer_set} {role}: every other module keeps the engine's method",
                      set(changed) == set(served) and set(got) == set(base), f"changed {changed}")
                if not served:
                    continue
                built.load_weights(iter(weights.items()))
                for layer in served.values():
                    problem = staged_equals_oracle(layer, oracle, tp, rank)
                    check(f"{model} {layer_set} {role}: {layer.quant_method.layer_name} staged bytes at TP{tp} "
                          f"rank {rank}", problem is None, problem or "")
                if tp == 1 and role == "draft" and layer_set == "mtp":
                    layer = next(iter(served.values()))
                    staging = layer.quant_method.staging
                    try:
                        layer.quant_method.process_weights_after_loading(layer)
                        check(f"{model}: post-load without a GPU fails", False, "it did not")
                    except RuntimeError as error:
                        text = str(error)
                        check(f"{model}: post-load without a GPU names the layer and frees the staging",
                              text.startswith(f"volt8: {mtp_prefix}: no CUDA GPU") and staging._arrays is None
                              and layer.quant_method.staging is None, text)

        # unquantized MTP experts (an unquantized draft config), quantized at load
        online_folder = write_model_folder(os.path.join(scratch, f"{model}-bf16"), model, False)
        _, online_draft = vllm_configs(online_folder, tp)
        bf16_experts = synthetic_experts(13, "bfloat16")
        online_oracle = oracle_folder(scratch, f"{model}-oracle-bf16", model, bf16_experts, False)
        plugin_on({"VOLT8_VLLM": enable})
        left = volt8_layers(build(mtp_class, online_draft))
        check(f"{model} online: unquantized experts stay with vLLM unless asked", not left, str(sorted(left)))
        plugin_on({"VOLT8_VLLM": enable, "VOLT8_VLLM_ONLINE": "fp8"})
        built = build(mtp_class, online_draft)
        served = volt8_layers(built)
        check(f"{model} online: volt8 serves the MTP experts" + ("" if serving else ": not on this GPU"),
              len(served) == (1 if serving else 0), str(sorted(served)))
        if served:
            built.load_weights(iter(expert_tensors(bf16_experts, mtp_prefix).items()))
            layer = next(iter(served.values()))
            problem = staged_equals_oracle(layer, online_oracle, tp, rank, online=True)
            check(f"{model} online: staged bytes at TP{tp} rank {rank}", problem is None, problem or "")
    plugin_on({})


def run_expert_parallel(tp, rank, scratch, capability, models, result):
    """The same ranks with expert parallelism (vLLM's enable_expert_parallel: MoE TP 1, experts split)."""
    import volt8
    checks = result["checks"]
    for model in models:
        _, mtp_class, _, mtp_prefix, _ = MODELS[model]
        folder = os.path.join(scratch, f"{model}-fp8")
        _, draft_config = vllm_configs(folder, tp, ep=True)
        plugin_on({"VOLT8_VLLM": "1"})
        built = build(mtp_class, draft_config)
        served = volt8_layers(built)
        ok = len(served) == 1
        checks.append({"check": f"{model} ep{tp}: volt8 serves the MTP experts", "ok": ok, "detail": str(sorted(served))})
        if not ok:
            continue
        mtp_experts = synthetic_experts(11, "fp8")
        built.load_weights(iter(expert_tensors(mtp_experts, mtp_prefix).items()))
        layer = next(iter(served.values()))
        start, count = volt8.expert_range(EXPERTS, tp, rank)
        problem = staged_equals_oracle(layer, os.path.join(scratch, f"{model}-oracle-mtp"), 1, 0, (start, count))
        checks.append({"check": f"{model} ep{tp} rank {rank}: staged experts [{start}, {start + count})",
                       "ok": problem is None, "detail": problem or ""})
    plugin_on({})


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--tp", type=int, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--scratch", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--capability", type=int, default=70)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--expert-parallel", action="store_true")
    parser.add_argument("--enable", default="1", choices=("1", "force"))
    args = parser.parse_args(argv)
    result = {"tp": args.tp, "rank": args.rank, "checks": [], "init": f"tcp://127.0.0.1:{args.port}",
              "stubs": list(STUBS), "volt8_log": []}
    import logging

    import vllm.logger  # noqa: F401  (vLLM's logging set-up first: it would disable a logger made before it)

    class Recorder(logging.Handler):
        def emit(self, record):
            result["volt8_log"].append(record.getMessage())

    # the plugin's INFO lines too, where this process has not had vLLM's logging configured (a server has)
    logging.getLogger("vllm.volt8").setLevel(logging.INFO)
    logging.getLogger("vllm.volt8").addHandler(Recorder())
    scratch = os.path.join(args.scratch, f"rank{args.rank}")  # each rank writes its own files
    os.makedirs(scratch, exist_ok=True)
    args.scratch = scratch
    try:
        run_rank(args.tp, args.rank, args.scratch, args.capability, args.models.split(","), result, args.enable)
        if args.expert_parallel:
            run_expert_parallel(args.tp, args.rank, args.scratch, args.capability, args.models.split(","), result)
    except Exception as error:  # reported to the test, which names it
        import traceback
        result["error"] = "".join(traceback.format_exception(error))
    with open(args.out, "w") as stream:
        json.dump(result, stream, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
