#!/usr/bin/env bash
# cJSON for the wheel: static, position-independent, compiled by `zig cc` for glibc 2.28, so that
# libvolt8 and the volt8 command carry it and need nothing newer than glibc 2.28.
# Its source is Debian's source package (cjson, Debian's patches applied), fetched
# with apt-get source through a private apt state made from this machine's own apt sources turned to
# deb-src: nothing of the system's apt set-up changes. Needs apt-get and dpkg-source (dpkg-dev).
#
#   wheel_deps.sh ZIG OUT    (bindings/python/backend runs it; OUT is kept, so later builds reuse it)
#
# OUT gets zig-cc (the C compiler the wheel's CMake build uses), lib/libcjson.a and
# include/cjson/cJSON.h, licenses/ (the package's copyright file), and stamp,
# which names the zig and source versions; a stamp that matches skips the work.
set -euo pipefail
zig="$1"
out="$(mkdir -p "$2" && cd "$2" && pwd)"
target=x86_64-linux-gnu.2.28

# zig cc writes debug information unless told not to: none, as gcc without -g (a later -g still wins).
printf '#!/bin/sh\nexec "%s" cc -target %s -g0 "$@"\n' "$zig" "$target" >"$out/zig-cc.new"
chmod +x "$out/zig-cc.new"
mv "$out/zig-cc.new" "$out/zig-cc"

# The versions installed here, where they are, else the archive's newest.
wanted() {
  local version
  version="$(dpkg-query -W -f='${source:Version}' "$2" 2>/dev/null || true)"
  echo "$1${version:+=$version}"
}
packages=("$(wanted cjson libcjson-dev)")
stamp="zig $("$zig" version) $target ${packages[*]}"
if [ -f "$out/stamp" ] && [ "$(cat "$out/stamp")" = "$stamp" ]; then
  exit 0
fi
rm -rf "$out/apt" "$out/src" "$out/lib" "$out/include" "$out/licenses" "$out/stamp"
mkdir -p "$out/apt/lists/partial" "$out/apt/cache/archives/partial" "$out/apt/sources.list.d" "$out/src" \
  "$out/lib" "$out/include/cjson" "$out/licenses"

# This machine's sources as deb-src entries, one-line and deb822 files alike.
for list in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$list" ] && sed -n 's/^deb \(.*\)/deb-src \1/p' "$list" >>"$out/apt/sources.list.d/$(basename "$list")"
done
for sources in /etc/apt/sources.list.d/*.sources; do
  [ -f "$sources" ] && sed 's/^Types:.*/Types: deb-src/' "$sources" >"$out/apt/sources.list.d/$(basename "$sources")"
done
apt_options=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$out/apt/sources.list.d"
             -o "Dir::State::Lists=$out/apt/lists" -o "Dir::Cache=$out/apt/cache"
             -o "APT::Sandbox::User=$(id -un)" -o "Debug::NoLocking=1")
echo "wheel_deps: apt-get source ${packages[*]} (Debian's source packages, for glibc $target)"
apt-get "${apt_options[@]}" -qq update >"$out/apt/update.log" 2>&1 ||
  { cat "$out/apt/update.log" >&2; echo "wheel_deps: apt-get update of the deb-src lists failed" >&2; exit 1; }
(cd "$out/src" && apt-get "${apt_options[@]}" -qq source --download-only "${packages[@]}") >"$out/apt/source.log" 2>&1 ||
  { cat "$out/apt/source.log" >&2; echo "wheel_deps: apt-get source ${packages[*]} failed" >&2; exit 1; }
for dsc in "$out"/src/*.dsc; do
  name="$(basename "$dsc" .dsc)"
  dpkg-source -x "$dsc" "$out/src/${name%%_*}" >>"$out/apt/source.log" 2>&1 ||
    { cat "$out/apt/source.log" >&2; echo "wheel_deps: dpkg-source -x $dsc failed" >&2; exit 1; }
done

# Each source to an object, on every core; no debug information, so no path of this folder travels.
compile() {
  local flags="$1" objects="$2"
  shift 2
  mkdir -p "$objects"
  printf '%s\n' "$@" | xargs -P "$(nproc)" -I{} sh -c \
    "\"$out/zig-cc\" -O2 -fPIC -fvisibility=hidden $flags -c {} -o \"$objects/\$(basename {} .c).o\""
}
compile "" "$out/src/cjson-objects" "$out/src/cjson/cJSON.c" || { echo "wheel_deps: compiling cJSON failed" >&2; exit 1; }
"$zig" ar rcs "$out/lib/libcjson.a" "$out"/src/cjson-objects/*.o
cp "$out/src/cjson/cJSON.h" "$out/include/cjson/"
cp "$out/src/cjson/debian/copyright" "$out/licenses/cjson.copyright"
echo "$stamp" >"$out/stamp"
echo "wheel_deps: $out/lib/libcjson.a"
