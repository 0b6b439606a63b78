"""Whether a file is a whole ELF shared library of this machine, read before ctypes loads it.

dlopen maps each segment from the offsets the file names, so a truncated copy of a library kills the
interpreter with SIGBUS instead of raising; the C library checks its NVRTC candidates the same way
(runtime/core/elf_check.c).
"""
import os
import platform
import stat
import struct
import sys

_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21}
_HEADER = struct.Struct("=16sHHIQQQIHHHHHH")  # Elf64_Ehdr
_SEGMENT = struct.Struct("=IIQQQQQQ")  # Elf64_Phdr, in this machine's byte order (checked first)
_SECTION_BYTES = 64
_LOAD = 1
_MAX_SEGMENTS = 4096


def check(path):
    """None when `path` is a whole ELF64 shared library of this machine, else the reason, worded to
    follow the path ("is truncated: segment 0 (LOAD) ends at byte 22392, past its 10240 bytes")."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer would wait for ever
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        return f"cannot open: {error.strerror}"
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        return "is not a regular file"
    with os.fdopen(fd, "rb") as stream:
        header = stream.read(_HEADER.size)
        if len(header) < _HEADER.size:
            return f"is not an ELF library: {info.st_size} bytes, shorter than an ELF header"
        reason, segments_at, segment_count = _check_header(header, info.st_size)
        if reason:
            return reason
        stream.seek(segments_at)
        table = stream.read(segment_count * _SEGMENT.size)
    if len(table) < segment_count * _SEGMENT.size:
        return "cannot read its program header table"
    return _check_segments(table, segment_count, info.st_size) or _check_sections(header, info.st_size)


def _fields(header):
    return _HEADER.unpack(header)


def _check_header(header, size):
    if header[:4] != b"\x7fELF":
        return "is not an ELF file (no ELF magic)", 0, 0
    if header[4] != 2:
        return "is not a 64-bit ELF file", 0, 0
    if header[5] != (1 if sys.byteorder == "little" else 2):
        return "is an ELF file of the other byte order", 0, 0
    _, elf_type, machine, _, _, segments_at, _, _, _, segment_bytes, segment_count, _, _, _ = _fields(header)
    if elf_type != 3:
        return f"is not an ELF shared library (ELF type {elf_type})", 0, 0
    host = _MACHINES.get(platform.machine().lower())
    if host is not None and machine != host:
        return f"is an ELF library for another machine (e_machine {machine}, this one is {host})", 0, 0
    if segment_bytes != _SEGMENT.size or not 0 < segment_count <= _MAX_SEGMENTS:
        return (f"has a malformed program header table ({segment_count} entries of {segment_bytes} bytes)", 0, 0)
    end = segments_at + segment_count * _SEGMENT.size
    if end > size:
        return f"is truncated: its program header table ends at byte {end}, past its {size} bytes", 0, 0
    return None, segments_at, segment_count


def _check_segments(table, count, size):
    loads = 0
    for index, (kind, _, offset, _, _, file_bytes, _, _) in enumerate(_SEGMENT.iter_unpack(table[:count * _SEGMENT.size])):
        loads += kind == _LOAD
        if file_bytes and offset + file_bytes > size:
            name = "LOAD" if kind == _LOAD else f"type {kind:#x}"
            return f"is truncated: segment {index} ({name}) ends at byte {offset + file_bytes}, past its {size} bytes"
    return None if loads else "is not a loadable ELF library (no LOAD segment)"


def _check_sections(header, size):
    fields = _fields(header)
    sections_at, section_bytes, section_count = fields[6], fields[11], fields[12]
    if not sections_at:
        return None
    if section_bytes != _SECTION_BYTES:
        return f"has a malformed section header table (entries of {section_bytes} bytes)"
    end = sections_at + max(section_count, 1) * _SECTION_BYTES
    if end > size:
        return f"is truncated: its section header table ends at byte {end}, past its {size} bytes"
    return None
