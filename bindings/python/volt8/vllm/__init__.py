"""volt8 as a vLLM general plugin: the routed experts of the MTP (speculative draft) layers run on volt8,
FP8 E4M3 with their 128x128 block scales, also on GPUs without FP8 hardware (V100).

vLLM finds register() through the "vllm.general_plugins" entry point of the volt8 wheel and calls it
in every process. It changes nothing until VOLT8_VLLM is set (volt8.vllm.settings: 1 for GPUs below
SM89, force for any GPU; VOLT8_VLLM_ONLINE=fp8 also takes unquantized MTP experts, quantized at load).
docs/vllm.md says how to run it and what it covers.

The parts: settings (the environment, the MTP layer names; no vLLM, no torch), staging (a rank's
experts gathered from the loader's tensors; no vLLM), runtime (the GPU half: upload and the
torch.ops.volt8.mtp_moe operator; no vLLM), method (the vLLM half). Importing this package imports
none of vLLM, torch or the GPU half.
"""
from . import settings


def register():
    """The vllm.general_plugins entry point: reads the settings (a bad value stops vLLM with a message
    naming the variable) and, when on, installs the MTP experts' method."""
    chosen = settings.read()
    if not chosen.enabled:
        return
    try:
        from .method import install
    except ImportError as error:
        import vllm
        raise RuntimeError(f"volt8: {settings.ENABLE} is set, but vLLM {vllm.__version__} lacks what the plugin uses "
                           f"({error}); it works with vLLM 0.33") from error
    install(chosen)
