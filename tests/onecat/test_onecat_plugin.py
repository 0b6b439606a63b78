"""make test-1cat SRC=DIR: the volt8 plugin inside 1Cat-vLLM (the vLLM fork V100 fleets run), installed
from DIR without kernels into the venv scripts/onecat_tests.sh makes, with the volt8 wheel of this tree.
CPU only. The fork's real MTP classes (DeepSeekMTP, Glm4MoeMTP, Qwen3NextMTP) and their targets are
built by tests/engines/real_models.py, one process a rank, on a simulated SM70 GPU; what that module
stubs is listed in its docstring and printed by test_what_is_stubbed."""
import importlib.metadata
import os
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "engines"))

import real_models  # noqa: E402
from ranks import expect_all_ok, run_ranks  # noqa: E402


def test_what_is_stubbed():
    print("stubbed on the CPU:\n  " + "\n  ".join(real_models.STUBS))
    assert real_models.STUBS


def test_the_fork_is_the_engine_and_the_wheel_brought_no_upstream_vllm():
    """The wheel declares no vllm dependency: installed with its dependencies into the fork's venv, the
    vllm package is still the fork's."""
    import vllm
    assert importlib.metadata.version("1cat-vllm")
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("vllm")
    requires = importlib.metadata.requires("volt8") or []
    assert not [line for line in requires if line.split()[0].lower().startswith("vllm")], requires
    assert os.path.dirname(vllm.__file__).endswith("site-packages/vllm")


def test_nothing_changes_until_it_is_turned_on(monkeypatch):
    import volt8.vllm
    from vllm.model_executor.custom_op import op_registry_oot
    from vllm.model_executor.layers.fused_moe import RoutedExperts
    assert RoutedExperts.__name__ == "FusedMoE"  # the fork's layer class, RoutedExperts only its alias
    for key in ("VOLT8_VLLM", "VOLT8_VLLM_LAYERS", "VOLT8_VLLM_ONLINE"):
        monkeypatch.delenv(key, raising=False)
    volt8.vllm.register()
    assert "FusedMoE" not in op_registry_oot
    monkeypatch.setenv("VOLT8_VLLM", "1")
    try:
        volt8.vllm.register()
        from volt8.vllm.method import Volt8RoutedExperts
        assert op_registry_oot["FusedMoE"] is Volt8RoutedExperts
    finally:
        op_registry_oot.pop("FusedMoE", None)


# one rank's checks of a model: off 1; mtp: draft 3, target 2; all: draft 3, target 2 + one a target MoE
# layer; online 3; and on TP1 the post-load one
CHECKS = sum(14 + len(targets) for _, _, _, _, targets in real_models.MODELS.values())
CHECKS_TP1 = CHECKS + len(real_models.MODELS)


def test_real_classes_tp1(tmp_path):
    results = run_ranks(tmp_path, 1)
    expect_all_ok(results, CHECKS_TP1)
    baseline = results[0]["baseline"]
    # what the fork gives the MoE layers volt8 leaves alone on an SM70 GPU: its TurboMind method
    for model, (_, _, _, mtp_prefix, target_prefixes) in real_models.MODELS.items():
        experts = [name for name in baseline[model]["target"] if name.endswith(".experts")]
        assert experts and all(baseline[model]["target"][name] == "Fp8SM70MoEMethod" for name in experts), baseline
        assert "Fp8SM70MoEMethod" in baseline[model]["draft"].values(), baseline[model]["draft"]
        # the control of the scale comparison below: at TP1 the engine's method holds every scale block
        assert results[0]["engine_scales"][model]["right"] is True, results[0]["engine_scales"]


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_real_classes_at_tp(tmp_path, tp):
    results = run_ranks(tmp_path, tp)
    expect_all_ok(results, CHECKS)
    # docs/vllm.md: what the fork's own method (Fp8SM70MoEMethod) loads of each rank's scale blocks when a
    # rank's rows are not whole 128-blocks (1408 / TP here), against volt8's rank, whose bytes are checked
    for result in results:
        print(f"TP{tp} rank {result['rank']}: the engine's own method:",
              {model: scales for model, scales in result["engine_scales"].items()})
        for model, scales in result["engine_scales"].items():
            assert scales["method"] == "Fp8SM70MoEMethod" and scales["right"] is False, (tp, result["rank"], model,
                                                                                         scales)


def test_real_classes_with_expert_parallelism(tmp_path):
    results = run_ranks(tmp_path, 2, "--expert-parallel")
    expect_all_ok(results, CHECKS + 2 * len(real_models.MODELS))


def test_the_seed_switch_where_the_fork_has_it(monkeypatch):
    """speculative_config.mtp_expert_quantization = "fp8" (later forks) turns on the same thing as VOLT8_VLLM=1
    with VOLT8_VLLM_ONLINE=fp8 for the MTP layers. This checkout's SpeculativeConfig has no such field, so
    the switch is simulated: a config naming it, and switch_available() answering yes."""
    import types
    import volt8.vllm
    from volt8.vllm import method, settings
    assert volt8.vllm.switch_available() is False  # this fork: the field is not there, and register() does nothing
    monkeypatch.delenv("VOLT8_VLLM", raising=False)
    config = types.SimpleNamespace(speculative_config=types.SimpleNamespace(mtp_expert_quantization="fp8"))
    chosen = method.effective_settings(settings.read({}), config)
    assert chosen == settings.Settings(enabled=True, online_block_n=128)
    assert method.effective_settings(settings.read({}), types.SimpleNamespace(speculative_config=None)).enabled is False
    from vllm.model_executor.custom_op import op_registry_oot
    monkeypatch.setattr(volt8.vllm, "switch_available", lambda: True)
    try:
        volt8.vllm.register()
        assert op_registry_oot["FusedMoE"] is method.Volt8RoutedExperts
    finally:
        op_registry_oot.pop("FusedMoE", None)
