"""scripts/sass_mix.py on a hand-written `cuobjdump -sass` listing."""
import os
import struct
import subprocess
import sys

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "sass_mix.py")
LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                /* 0x00000a0000017a02 */
        /*0010*/                   PRMT R4, R2, 0x1404, RZ ;             /* 0x0000140402047816 */
        /*0020*/                   SHF.R.U32.HI R5, RZ, 0x1, R4 ;       /* 0x0000000104057819 */
        /*0030*/                   LOP3.LUT R5, R5, 0x3f803f80, RZ, 0xc0, !PT ;
        /*0040*/                   LOP3.LUT R4, R4, 0x80008000, R5, 0xf8, !PT ;
        /*0050*/                   HADD2.F32 R6, -RZ, R4.H0_H0 ;
        /*0060*/                   HADD2.F32 R7, -RZ, R4.H1_H1 ;
        /*0070*/                   FFMA R8, R6, R9, R8 ;
        /*0080*/                   FFMA R8, R7, R10, R8 ;
        /*0090*/               @P0 BRA 0x10 ;                            /* 0xfffffff000000947 */
        /*00a0*/                   HADD2 R3, R3, R3 ;
        /*00b0*/              @!P1 BRA 0xa0 ;
        /*00c0*/                   EXIT ;
"""


def run(tmp_path, text, *args):
    path = tmp_path / "kernel.sass"
    path.write_text(text)
    return subprocess.run([sys.executable, SCRIPT, str(path), *args], capture_output=True, text=True)


def test_the_longest_loop_per_converted_code(tmp_path):
    result = run(tmp_path, LISTING, "--loops", "2")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    # 0x10..0x90: PRMT, SHF, 2 LOP3, 2 HADD2.F32, 2 FFMA, BRA = 9 instructions over 2 codes; ALU: 4
    assert lines[0] == "loop 0x10-0x90: 9 instructions, 2 codes (HADD2.F32), 4.50 a code, ALU 2.00 a code"
    assert lines[1].split(", ")[:3] == ["  LOP3 2", "HADD2.F32 2", "FFMA 2"]
    # a plain HADD2 is no conversion
    assert lines[2] == "loop 0xa0-0xb0: 2 instructions, 0 codes (HADD2.F32)"


def test_codes_given_for_the_longest_loop(tmp_path):
    result = run(tmp_path, LISTING, "--codes", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "loop 0x10-0x90: 9 instructions, 3 codes (given), 3.00 a code, ALU 1.33 a code"


def test_fifos_are_refused_or_passed_over_without_waiting(tmp_path):
    os.mkfifo(tmp_path / "kernel.sass")
    result = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "kernel.sass")], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 2 and "not a regular file" in result.stderr
    (tmp_path / "cache").mkdir()
    os.mkfifo(tmp_path / "cache" / "k.entry")
    result = subprocess.run([sys.executable, SCRIPT, "--ptx-from", str(tmp_path / "cache"), "--kernel", "volt8_k"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 1 and "no PTX entry" in result.stderr


def test_no_loop_and_bad_arguments(tmp_path):
    result = run(tmp_path, "        /*0000*/                   EXIT ;\n")
    assert result.returncode == 1 and "no backward branch" in result.stderr
    assert run(tmp_path, LISTING, "--codes", "0").returncode == 2
    assert run(tmp_path, LISTING, "--loops", "0").returncode == 2


def entry(name, payload, kind=0, nvrtc=b"12.9"):
    """A cache entry as docs/design.md lays it out (checksums are not read by the script)."""
    header = b"VOLT8KCE" + struct.pack("<IIIIQ", 1, kind, 70, len(name), len(payload))
    header += bytes(64) + nvrtc.ljust(16, b"\0") + bytes(32)
    assert len(header) == 144
    return header + name + payload


def test_ptx_from_a_cache_takes_the_newest_nvrtc(tmp_path):
    folder = tmp_path / "cache" / "v1" / "sm_70" / "ab" / "abcd"
    folder.mkdir(parents=True)
    (folder / "1.entry").write_bytes(entry(b"volt8_k", b"// old\n\0", nvrtc=b"12.4"))
    (folder / "2.entry").write_bytes(entry(b"volt8_k", b"// new\n\0", nvrtc=b"12.9"))
    (folder / "3.entry").write_bytes(entry(b"volt8_k", b"\x7fELF", kind=1))
    (folder / "4.entry").write_bytes(entry(b"volt8_other", b"// other\n\0"))
    result = subprocess.run([sys.executable, SCRIPT, "--ptx-from", str(tmp_path / "cache"), "--kernel", "volt8_k"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "// new\n"
    missing = subprocess.run([sys.executable, SCRIPT, "--ptx-from", str(tmp_path / "cache"), "--kernel", "volt8_x"],
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "no PTX entry of volt8_x" in missing.stderr
    alone = subprocess.run([sys.executable, SCRIPT, "--kernel", "volt8_k"], capture_output=True, text=True)
    assert alone.returncode == 2
