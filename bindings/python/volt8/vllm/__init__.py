"""volt8 as a vLLM general plugin: the routed experts of the MTP (speculative draft) layers, and with
VOLT8_VLLM_LAYERS=all every block-FP8 routed-experts layer, run on volt8, FP8 E4M3 with their 128x128
block scales, also on GPUs without FP8 hardware (V100). It works in vLLM 0.33 and in engines of the
vLLM 0.2x line such as 1Cat-vLLM, the fork V100 fleets run.

vLLM finds register() through the "vllm.general_plugins" entry point of the volt8 wheel and calls it
in every process. It changes nothing until VOLT8_VLLM is set (volt8.vllm.settings: 1 for GPUs below
SM89, force for any GPU; VOLT8_VLLM_ONLINE=fp8 also takes unquantized MTP experts, quantized at load),
or, in an engine whose speculative config has the mtp_expert_quantization switch, until that is "fp8".
docs/vllm.md says how to run it and what it covers.

The parts: settings (the environment, the MTP layer names; no vLLM, no torch), staging (a rank's
experts gathered from the loader's tensors; no vLLM), runtime (the GPU half: upload and the
torch.ops.volt8.mtp_moe operator; no vLLM), method (the vLLM half). Importing this package imports
none of vLLM, torch or the GPU half.
"""
from . import settings


def switch_available():
    """True when the installed engine's SpeculativeConfig has the mtp_expert_quantization switch."""
    try:
        from vllm.config import SpeculativeConfig
    except ImportError:
        return False
    return "mtp_expert_quantization" in (getattr(SpeculativeConfig, "__dataclass_fields__", None) or {})


def register():
    """The vllm.general_plugins entry point: reads the settings (a bad value stops vLLM with a message
    naming the variable) and, when on (or when the engine has the mtp_expert_quantization switch, which
    each layer then reads from the engine's config), installs the layer class that serves the experts."""
    chosen = settings.read()
    if not chosen.enabled and not switch_available():
        return
    try:
        from .method import install
    except ImportError as error:
        import vllm
        raise RuntimeError(f"volt8: {settings.ENABLE} is set, but vLLM {vllm.__version__} lacks what the plugin uses "
                           f"({error}); it works with vLLM 0.33 and with 1Cat-vLLM") from error
    install(chosen)
