#!/usr/bin/env python3
"""Checks an installed volt8 wheel (scripts/wheel_check.sh): its tag (manylinux, glibc 2.28 or older),
what its ELF files need at run time (libraries, run paths, and no glibc symbol version newer than
2.28), and that no installed file names a forbidden folder (the source or build tree).

    wheel_inspect.py --wheel DIST.whl --site SITE_PACKAGES --forbid /src [--forbid /src/build/wheel]

Exit 0 when every check passes; otherwise each failure is printed and the exit status is 1.
"""
import argparse
import os
import re
import subprocess
import sys

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerNeedSection

# The newest glibc the wheel may need: RHEL 8's, the manylinux_2_28 policy (torch's wheels).
NEWEST_GLIBC = (2, 28)
# The legacy manylinux tags and the glibc of each.
LEGACY_TAGS = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}

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


def tag_glibc(tag):
    """(major, minor) of glibc a manylinux platform tag stands for, or None for any other tag."""
    match = re.fullmatch(r"manylinux_(\d+)_(\d+)_\w+", tag)
    if match:
        return int(match.group(1)), int(match.group(2))
    return LEGACY_TAGS.get(tag.rsplit("_x86_64", 1)[0] if tag.endswith("_x86_64") else tag)


def check_tag(wheel, failures):
    name = os.path.basename(wheel)
    platform = name[:-len(".whl")].split("-")[-1]
    for part in platform.split("."):
        glibc = tag_glibc(part)
        if glibc is None:
            failures.append(f"{name}: platform tag {part} is not manylinux")
        elif glibc > NEWEST_GLIBC:
            failures.append(f"{name}: platform tag {part} needs glibc {glibc[0]}.{glibc[1]}, newer than "
                            f"{NEWEST_GLIBC[0]}.{NEWEST_GLIBC[1]}")
    show = subprocess.run([sys.executable, "-m", "auditwheel", "show", wheel], capture_output=True, text=True)
    if show.returncode != 0 or "consistent with the following platform tag" not in " ".join(show.stdout.split()):
        failures.append(f"auditwheel show {name} failed or found no manylinux policy:\n{show.stdout}{show.stderr}")
    return platform


def glibc_versions(path):
    """The GLIBC_x.y symbol versions an ELF file needs, as (x, y) tuples."""
    with open(path, "rb") as stream:
        elf = ELFFile(stream)
        found = set()
        for section in elf.iter_sections():
            if isinstance(section, GNUVerNeedSection):
                for _, auxiliaries in section.iter_versions():
                    for auxiliary in auxiliaries:
                        match = re.fullmatch(r"GLIBC_(\d+)\.(\d+)(?:\.\d+)?", auxiliary.name)
                        if match:
                            found.add((int(match.group(1)), int(match.group(2))))
        return found


def check_glibc(path, failures):
    """The newest glibc version the file needs; a failure when it is newer than NEWEST_GLIBC."""
    versions = glibc_versions(path)
    too_new = sorted(version for version in versions if version > NEWEST_GLIBC)
    if too_new:
        failures.append(f"{path} needs glibc symbol versions newer than {NEWEST_GLIBC[0]}.{NEWEST_GLIBC[1]}: " +
                        ", ".join(f"GLIBC_{major}.{minor}" for major, minor in too_new))
    return max(versions) if versions else None


def check_elf_files(site, failures):
    bundled = set(os.listdir(os.path.join(site, "volt8.libs"))) if os.path.isdir(os.path.join(site, "volt8.libs")) else set()
    elf_count, newest = 0, {}
    for path in installed_files(site):
        dynamic = elf_dynamic(path)
        if dynamic is None:
            continue
        elf_count += 1
        newest[os.path.relpath(path, site)] = check_glibc(path, failures)
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
    return elf_count, sorted(bundled), newest


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
    elf_count, bundled, newest = check_elf_files(args.site, failures)
    scanned = check_paths(args.site, args.forbid, failures)
    for failure in failures:
        print("wheel_inspect: FAIL:", failure)
    needs = ", ".join(f"{path} GLIBC_{version[0]}.{version[1]}" if version else f"{path} no glibc version"
                      for path, version in sorted(newest.items()))
    print(f"wheel_inspect: {platform}; {elf_count} ELF files, newest glibc needed: {needs}; bundled "
          f"{', '.join(bundled) or 'nothing'}; {scanned} files scanned for {', '.join(args.forbid)}: "
          f"{'FAILED' if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
