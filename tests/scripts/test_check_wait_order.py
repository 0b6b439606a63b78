"""The SASS rules of scripts/check_wait_order.py on hand-written listings, and its reading of cache
entries. The script itself runs on the GPU machine (it needs ptxas and cuobjdump); these tests need
neither."""
import importlib.util
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("check_wait_order", ROOT / "scripts" / "check_wait_order.py")
checker = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(checker)

WEIGHTS = "        /*0100*/              @!P5 LDG.E.NA.128 R44, desc[UR4][R16.64] ;"
WEIGHTS_FETCH_256 = "        /*0100*/              @!P5 LDG.E.NA.LTC256B.128 R44, desc[UR4][R16.64] ;"
WEIGHTS_FETCH_READ_ONLY = "        /*0100*/              @!P5 LDG.E.NA.LTC128B.128.CONSTANT R44, desc[UR4][R16.64] ;"
WEIGHTS_READ_ONLY = "        /*0100*/              @!P5 LDG.E.NA.128.CONSTANT R44, desc[UR4][R16.64] ;"
IDS = "        /*0080*/                   LDG.E.CONSTANT R6, desc[UR4][R6.64] ;"
WAIT = "        /*0200*/                   ACQBULK ;"
LAUNCH = "        /*0220*/                   PREEXIT ;"
H_L2 = "        /*0300*/              @!P1 LDG.E.128.STRONG.GPU R4, desc[UR4][R2.64] ;"
H_READ_ONLY = "        /*0300*/              @!P4 LDG.E.128.CONSTANT R36, desc[UR8][R44.64] ;"
EARLY_EXIT = ["        /*0060*/                   ACQBULK ;", "        /*0070*/                   EXIT ;"]

DOWN_BM1 = "volt8_down_hmma_bm1_bn64_w4_sk1__H2560_I160_E512_b128x128_o32"
TOK = "volt8_down_tok_bm1_bn16_w4_sk1_l2__H2560_I160_E512_b128x128_o32"
REDUCE = "volt8_reduce__H2560_I160_E512_b128x128_o32"
ROUTED = "volt8_down_cc_bm4_bn64_w4_sk1_l2_o10__H2560_I160_E512_b128x128_o32"
ROUTED_GATE_UP = "volt8_gate_up_hmma_bm4_bn16_w4_sk4__H2560_I160_E512_b128x128_o32"
ROUTED_HMMA_DOWN = "volt8_down_hmma_bm8_bn128_w4_sk1__H2560_I160_E512_b128x128_o32"


def test_a_down_kernel_in_the_right_order_passes():
    lines = EARLY_EXIT + [IDS, WEIGHTS, WAIT, LAUNCH, H_L2]
    assert checker.problems(DOWN_BM1, lines) == []
    assert checker.problems(TOK, lines) == []


def test_the_main_wait_is_the_one_before_launch_dependents():
    # An early-exit wait first in the text does not count: h read before the main wait is caught.
    lines = EARLY_EXIT + [IDS, WEIGHTS, H_L2, WAIT, LAUNCH]
    found = checker.problems(DOWN_BM1, lines)
    assert len(found) == 1 and "produced data before the wait" in found[0]


def test_h_through_the_read_only_path_is_caught_anywhere():
    found = checker.problems(TOK, [IDS, WEIGHTS, WAIT, LAUNCH, H_READ_ONLY])
    assert len(found) == 1 and "read-only path" in found[0]


def test_weights_moved_below_the_wait_are_caught():
    found = checker.problems(DOWN_BM1, [IDS, WAIT, LAUNCH, WEIGHTS_READ_ONLY, H_L2])
    assert found == ["no weight load before the wait"]


def test_a_kernel_that_can_start_early_needs_its_wait():
    assert checker.problems(REDUCE, [IDS, H_L2]) == ["no griddepcontrol.wait before griddepcontrol.launch_dependents"]
    assert checker.problems(REDUCE, [IDS, WAIT, LAUNCH, H_L2]) == []


def test_reduce_ids_moved_below_the_wait_are_caught():
    assert checker.problems(REDUCE, [WAIT, LAUNCH, IDS, H_L2]) == ["no id load before the wait"]
    # z read before the wait is no id load.
    found = checker.problems(REDUCE, [H_L2, WAIT, LAUNCH])
    assert "no id load before the wait" in found and any("produced data before the wait" in f for f in found)


def test_routed_kernels_must_not_wait():
    assert checker.problems(ROUTED, [IDS, WEIGHTS_READ_ONLY, H_READ_ONLY]) == []
    assert checker.problems(ROUTED, [WAIT, IDS]) == ["a kernel that never starts early has a wait"]
    # A routed gate_up lets its down start early (launch_dependents) but never waits itself.
    assert checker.problems(ROUTED_GATE_UP, [IDS, WEIGHTS_READ_ONLY, LAUNCH]) == []
    assert checker.problems(ROUTED_GATE_UP, [IDS, WAIT, LAUNCH]) == ["a kernel that never starts early has a wait"]
    assert checker.problems("volt8_rejection_rows", [WAIT]) == []


def test_a_routed_hmma_down_is_checked_as_one_that_starts_early():
    assert checker.problems(ROUTED_HMMA_DOWN, EARLY_EXIT + [IDS, WEIGHTS, WAIT, LAUNCH, H_L2]) == []
    assert checker.problems(ROUTED_HMMA_DOWN, [IDS, WEIGHTS_READ_ONLY, H_READ_ONLY]) == [
        "no griddepcontrol.wait before griddepcontrol.launch_dependents"]
    assert checker.problems(ROUTED_HMMA_DOWN, [IDS, WAIT, LAUNCH, WEIGHTS_READ_ONLY, H_L2]) == [
        "no weight load before the wait"]


def write_entry(path, name, payload, kind=0, arch=90):
    """A cache entry as runtime/jit/cache.c lays it out: the fields the checker reads, then name and image."""
    header = bytearray(checker.HEADER_BYTES)
    header[:8] = checker.MAGIC
    struct.pack_into("<III", header, 12, kind, arch, len(name))
    struct.pack_into("<Q", header, 24, len(payload))
    path.write_bytes(bytes(header) + name.encode() + payload)


def test_cache_entries_are_read_by_their_header(tmp_path):
    (tmp_path / "sm_90" / "ab").mkdir(parents=True)
    write_entry(tmp_path / "sm_90" / "ab" / "one", DOWN_BM1, b".version 8.0\n.entry x\n\0")
    write_entry(tmp_path / "sm_90" / "ab" / "cubin", REDUCE, b"\x7fELF", kind=1)
    write_entry(tmp_path / "sm_90" / "ab" / "volta", ROUTED, b".version 8.0\n\0", arch=70)
    (tmp_path / "sm_90" / "ab" / "stray").write_bytes(b"not an entry")
    assert list(checker.cached_ptx(str(tmp_path))) == [(DOWN_BM1, ".version 8.0\n.entry x\n", 90)]


def test_weight_loads_with_an_l2_prefetch_size_count_as_weight_loads():
    # ".f128" / ".f256" variants load weights as LDG.E.NA.LTC128B.128 / LTC256B.
    assert checker.problems(DOWN_BM1, EARLY_EXIT + [IDS, WEIGHTS_FETCH_256, WAIT, LAUNCH, H_L2]) == []
    assert checker.problems(ROUTED_HMMA_DOWN, [IDS, WAIT, LAUNCH, WEIGHTS_FETCH_READ_ONLY, H_L2]) == [
        "no weight load before the wait"]
