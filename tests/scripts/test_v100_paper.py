"""scripts/v100_paper.py's pieces on hand-made input: the tables from `volt8 list --explain --json` and
`--resources --json` objects, the HMMA share of a listing's inner loop, and a cuobjdump that refuses."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import v100_paper  # noqa: E402

LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDS.U.128 R4, [R2] ;
        /*0020*/                   HMMA.884.F32.F32.STEP0 R8, R4.reuse.ROW, R6.reuse.COL, R8 ;
        /*0030*/                   HMMA.884.F32.F32.STEP1 R10, R4.reuse.ROW, R6.reuse.COL, R10 ;
        /*0040*/                   PRMT R12, R13, 0x1404, RZ ;
        /*0050*/                   HMUL2 R12, R12, R14 ;
        /*0060*/                   STS.128 [R3], R12 ;
        /*0070*/               @P0 BRA 0x10 ;
        /*0080*/                   EXIT ;
"""


def kernel(variant, us, limit):
    return {"variant": variant, "us": us, "limited_by": limit}


def account(m_values):
    forwards = []
    for m in m_values:
        small = m < 1024
        gate_up = "gate_up.mma.bm8.bn32.w8.sk2" if small else "gate_up.tile.bm64.bn64.w8.sk1.o2"
        down = "down.mma.bm8.bn32.w4.sk1" if small else "down.tile.bm64.bn128.w8.sk1.o2"
        forwards.append({"m": m, "gate_up": kernel(gate_up, 1.0, "DRAM" if small else "m8n8k4 issue"),
                         "down": kernel(down, 1.0, "L2" if small else "dequant"), "forward_us": float(m)})
    return {"device": "V100", "top_k": 8, "forwards": forwards}


# A longer loop without HMMA (0x10..0x40), the products' loop (0x50..0x80) and the trap loop at the end.
NESTED = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E R4, [R2] ;
        /*0020*/                   IADD3 R2, R2, 0x4, RZ ;
        /*0030*/                   ISETP.NE.AND P0, PT, R2, R5, PT ;
        /*0040*/               @P0 BRA 0x10 ;
        /*0050*/                   LDS.U.128 R4, [R2] ;
        /*0060*/                   HMMA.884.F32.F32.STEP0 R8, R4.reuse.ROW, R6.reuse.COL, R8 ;
        /*0070*/                   HMMA.884.F32.F32.STEP1 R10, R4.reuse.ROW, R6.reuse.COL, R10 ;
        /*0080*/               @P1 BRA 0x50 ;
        /*0090*/                   EXIT ;
        /*00a0*/                   BRA 0xa0 ;
"""
# K unrolled: the products in no loop, only the trap loop.
UNROLLED = """
        /*0000*/                   LDS.U.128 R4, [R2] ;
        /*0010*/                   HMMA.884.F32.F32.STEP0 R8, R4.reuse.ROW, R6.reuse.COL, R8 ;
        /*0020*/                   HMMA.884.F32.F32.STEP1 R10, R4.reuse.ROW, R6.reuse.COL, R10 ;
        /*0030*/                   EXIT ;
        /*0040*/                   BRA 0x40 ;
"""


def test_the_inner_loops_hmma_share():
    # 0x10..0x70: LDS, two HMMA, PRMT, HMUL2, STS, BRA
    assert v100_paper.hmma_share(LISTING) == (2, 7, True)
    assert v100_paper.hmma_share("        /*0000*/   EXIT ;\n") is None
    # the loop that holds the products, not the longest one nor the trap loop
    assert v100_paper.hmma_share(NESTED) == (2, 4, True)
    # no loop holds them: the whole kernel's share, said to be so
    assert v100_paper.hmma_share(UNROLLED) == (2, 5, False)


def test_the_forward_tables_name_choice_time_and_bounds():
    shape = "hidden=7168,intermediate=256,num_experts=256"
    text = v100_paper.forward_tables([(("deepseek-v3", 8, shape), account(v100_paper.M_VALUES))])
    rows = [line for line in text.splitlines() if line.startswith("| deepseek-v3 TP8 |")]
    assert len(rows) == 2
    choice, times = (row.split(" | ")[1:] for row in rows)
    assert choice[0] == "mma bm8 / mma bm8" and choice[2] == "tile bm64 / tile bm64"
    assert times[0] == "0.26 ms: bytes (DRAM) / bytes (L2)"
    assert times[-1].rstrip(" |") == "16.38 ms: m8n8k4 issue / dequant"


def test_the_variant_table_keeps_tiles_and_the_picked_mma():
    shape = "hidden=7168,intermediate=256,num_experts=256"
    report = {"variants": [
        {"variant": name, "registers": 108, "spill_store_bytes": 0, "spill_load_bytes": 0, "ctas_per_sm": 2,
         "warps_per_sm": 16, "limited_by": "registers"}
        for name in ("route", "gate_up.mma.bm8.bn32.w8.sk2", "gate_up.mma.bm16.bn32.w8.sk2",
                     "gate_up.tile.bm64.bn64.w8.sk1.o2", "gate_up.tile.bm128.bn64.w8.sk1.o2")]}
    picked = {(shape, "gate_up.mma.bm8.bn32.w8.sk2"), (shape, "gate_up.tile.bm64.bn64.w8.sk1.o2")}
    shares = {(shape, "gate_up.tile.bm64.bn64.w8.sk1.o2"): "2 of 7 (29%)"}
    rows = v100_paper.variant_rows(picked, [(("deepseek-v3", 8, shape), report)], shares).splitlines()[2:]
    names = [row.split(" | ")[1] for row in rows]
    assert names == ["`gate_up.mma.bm8.bn32.w8.sk2` (picked)", "`gate_up.tile.bm64.bn64.w8.sk1.o2` (picked)",
                     "`gate_up.tile.bm128.bn64.w8.sk1.o2`"]
    assert rows[1].endswith("| 2 of 7 (29%) |") and rows[2].endswith("| not measured |")


def test_a_cuobjdump_that_refuses_sm70_is_named(tmp_path):
    tool = tmp_path / "cuobjdump"
    tool.write_text("#!/bin/sh\necho 'cuobjdump fatal   : SM70 is deprecated' >&2\nexit 1\n")
    tool.chmod(0o755)
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(b"\x7fELF")
    listing, why = v100_paper.listing_of(str(tool), str(cubin))
    assert listing is None and why == f"{tool}: cuobjdump fatal   : SM70 is deprecated"
    shares, note = v100_paper.sass_shares("volt8", {}, {}, [])
    assert shares == {} and note.startswith("not measured: no cuobjdump here")


def test_the_peak_table_sets_the_models_time_beside_the_tensor_peak():
    shape = "hidden=7168,intermediate=256,num_experts=256"
    text = v100_paper.peak_table([(("deepseek-v3", 8, shape), account(v100_paper.M_VALUES))])
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| deepseek-v3 TP8 |")]
    assert [row[1] for row in rows] == ["2048", "16384"]
    # 6 x 2048 x 8 x 7168 x 256 = 0.18 TFLOP in 2048 us (the account's time is M us): 88.1 TFLOP/s, 70%
    assert rows[0][2] == "0.18" and rows[0][3] == "2.05 ms" and rows[0][4] == "1.44 ms"
    assert rows[0][5] == "88.1 (70%)" and rows[0][6].rstrip(" |") == "m8n8k4 issue / dequant"
