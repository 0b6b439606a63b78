#!/usr/bin/env python3
"""Checks an installed volt8 wheel (scripts/wheel_check.sh): its tag, what its ELF files need at run
time, their run paths, and that no installed file names a forbidden folder (the source or build tree).

    wheel_inspect.py --wheel DIST.whl --site SITE_PACKAGES --forbid /src [--forbid /src/build/wheel]

Exit 0 when every check passes; otherwise each failure is printed and the exit status is 1.
"""
import argparse
import os
import subprocess
import sys

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

# glibc's own libraries and the dynamic loader: present on every manylinux system.
GLIBC_LIBRARIES = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1", "ld-linux-x86-64.so.2"}
PACKAGE_FOLDERS = ("volt8", "volt8.libs")


def installed_files(site):
    for folder in PACKAGE_FOLDERS + tuple(entry for entry in os.listdir(site) if entry.startswith("volt8-")):
        for directory, _, names in os.walk(os.path.join(site, folder)):
            for name in names:
                yield os.path.join(directory, name)


def elf_dynamic(path):
    """(needed, run paths) of an ELF file, or None for a file that is not ELF."""
    with open(path, "rb") as stream:
        if stream.read(4) != b"\x7fELF":
            return None
        stream.seek(0)
        elf = ELFFile(stream)
        needed, run_paths = [], []
        for section in elf.iter_sections():
            if isinstance(section, DynamicSection):
                for tag in section.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif tag.entry.d_tag == "DT_RUNPATH":
                        run_paths.extend(tag.runpath.split(":"))
                    elif tag.entry.d_tag == "DT_RPATH":
                        run_paths.extend(tag.rpath.split(":"))
        return needed, run_paths


def check_tag(wheel, failures):
    name = os.path.basename(wheel)
    platform = name[:-len(".whl")].split("-")[-1]
    if not all(part.startswith("manylinux") for part in platform.split(".")):
        failures.append(f"{name}: platform tag {platform} is not manylinux")
    show = subprocess.run([sys.executable, "-m", "auditwheel", "show", wheel], capture_output=True, text=True)
    if show.returncode != 0 or "consistent with the following platform tag" not in " ".join(show.stdout.split()):
        failures.append(f"auditwheel show {name} failed or found no manylinux policy:\n{show.stdout}{show.stderr}")
    return platform


def check_elf_files(site, failures):
    bundled = set(os.listdir(os.path.join(site, "volt8.libs"))) if os.path.isdir(os.path.join(site, "volt8.libs")) else set()
    elf_count = 0
    for path in installed_files(site):
        dynamic = elf_dynamic(path)
        if dynamic is None:
            continue
        elf_count += 1
        needed, run_paths = dynamic
        for library in needed:
            if library not in GLIBC_LIBRARIES and library not in bundled:
                failures.append(f"{path} needs {library}, which is neither glibc's nor inside the wheel")
        for run_path in run_paths:
            if run_path and not run_path.startswith("$ORIGIN"):
                failures.append(f"{path} has the run path {run_path}, not relative to $ORIGIN")
    for required in ("volt8/libvolt8.so.0", "volt8/bin/volt8"):
        if not os.path.exists(os.path.join(site, required)):
            failures.append(f"the wheel did not install {required}")
    return elf_count, sorted(bundled)


def check_paths(site, forbidden, failures):
    needles = [os.path.realpath(folder).encode() for folder in forbidden]
    scanned = 0
    for path in installed_files(site):
        with open(path, "rb") as stream:
            data = stream.read()
        scanned += 1
        for needle in needles:
            if needle in data:
                failures.append(f"{path} names {needle.decode()}")
    return scanned


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--wheel", required=True)
    parser.add_argument("--site", required=True)
    parser.add_argument("--forbid", action="append", default=[])
    args = parser.parse_args()
    failures = []
    platform = check_tag(args.wheel, failures)
    elf_count, bundled = check_elf_files(args.site, failures)
    scanned = check_paths(args.site, args.forbid, failures)
    for failure in failures:
        print("wheel_inspect: FAIL:", failure)
    print(f"wheel_inspect: {platform}; {elf_count} ELF files, bundled {', '.join(bundled) or 'nothing'}; "
          f"{scanned} files scanned for {', '.join(args.forbid)}: {'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
