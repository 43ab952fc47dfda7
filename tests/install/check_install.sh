#!/usr/bin/env bash
# tests/install/check_install.sh SRC BUILD — PE installs like a library (ctest: test_install).
#
# `cmake --install BUILD --prefix <tmp>` into a fresh temporary prefix, then:
#   - the files are there: libpe.so with a versioned SONAME, libpe.a, include/pe/*.h,
#     bin/pe, lib/cmake/PE/PEConfig.cmake, lib/pkgconfig/pe.pc;
#   - `nm -D` of libpe.so: every exported (defined, dynamic) symbol is a pe_* name that
#     the public headers declare, and internal ones (pe_ops_op_lookup) are not exported;
#   - the C API example of README (examples/c_api/infer.c, which README shows verbatim)
#     builds and runs against the prefix, from another directory, three ways: a separate CMake project with
#     find_package(PE) and PE::pe (examples/c_api/CMakeLists.txt), the same with
#     PE::pe_static (libpe.a), and `cc infer.c $(pkg-config --cflags --libs pe)`;
#     the dynamic ones load the installed libpe.so (ldd), the static one none;
#   - a C++-only project finds the package too (its OpenMP and MPI are found for CXX).
# Prints what it checks; exits non-zero on the first failure.
set -euo pipefail
src=$(cd "$1" && pwd)
build=$(cd "$2" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/pe_install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
so=$(find "$prefix" -name 'libpe.so' | head -1)
[ -n "$so" ] || fail "no libpe.so under $prefix"
libdir=$(dirname "$so")
for f in "$libdir/libpe.a" "$prefix/include/pe/pe.h" "$prefix/include/pe/parallel_executor.h" "$prefix/bin/pe" \
         "$libdir/cmake/PE/PEConfig.cmake" "$libdir/cmake/PE/PEConfigVersion.cmake" "$libdir/pkgconfig/pe.pc"; do
  [ -e "$f" ] || fail "not installed: $f"
done
soname=$(objdump -p "$so" | awk '$1 == "SONAME" {print $2}')
[[ "$soname" =~ ^libpe\.so\.[0-9]+\.[0-9]+$ ]] || fail "SONAME '$soname' is not libpe.so.<major>.<minor>"
[ -e "$libdir/$soname" ] || fail "no $soname link next to libpe.so"
"$prefix/bin/pe" inspect "$src/examples/mlp_infer.pe" > /dev/null || fail "the installed pe tool"
echo "   installed: $soname, libpe.a, headers, bin/pe, CMake package, pe.pc"

echo "== nm -D $so: only the public API"
nm -D --defined-only "$so" | awk '{print $NF}' | sort -u > "$tmp/exported"
n=$(wc -l < "$tmp/exported")
[ "$n" -gt 100 ] || fail "only $n exported symbols"
bad=$(grep -v '^pe_' "$tmp/exported" || true)
[ -z "$bad" ] || fail "libpe.so exports symbols outside pe_*: $(echo $bad | head -c 400)"
cat "$src"/include/pe/*.h | grep -o '\bpe_[a-z0-9_]*\b' | sort -u > "$tmp/public"
notpub=$(comm -23 "$tmp/exported" "$tmp/public")
[ -z "$notpub" ] || fail "libpe.so exports pe_ symbols no public header declares: $(echo $notpub | head -c 400)"
! grep -qx pe_ops_op_lookup "$tmp/exported" || fail "the internal pe_ops_op_lookup is exported"
grep -qx pe_program_load_file "$tmp/exported" || fail "pe_program_load_file is not exported"
echo "   $n symbols, all pe_* and declared in include/pe/"

loads_installed() { # binary: the libpe.so it loads is the installed one
  local got
  got=$(ldd "$1" | awk '$1 ~ /^libpe\.so/ {print $3}')
  [ -n "$got" ] && [ "$(realpath "$got")" = "$(realpath "$so")" ] || { ldd "$1"; fail "$1 does not load $so"; }
}

run_infer() { # binary, how
  (cd "$tmp" && "$1" "$src/examples") > "$tmp/out" 2>&1 || { cat "$tmp/out"; fail "$2: infer failed"; }
  tail -1 "$tmp/out" | grep -qx ok || { cat "$tmp/out"; fail "$2: infer did not print ok"; }
}

# README shows examples/c_api/infer.c from its #include on, verbatim.
/usr/bin/python3 - "$src" <<'PY' || fail "README.md does not show examples/c_api/infer.c as it is"
import sys
src = sys.argv[1]
code = open(src + "/examples/c_api/infer.c").read()
sys.exit(code[code.index("#include <pe/pe.h>"):] not in open(src + "/README.md").read())
PY

echo "== find_package(PE): examples/c_api as a separate CMake project, PE::pe"
cmake -S "$src/examples/c_api" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  > "$tmp/cm.log" 2>&1 || { cat "$tmp/cm.log"; fail "configure with find_package(PE)"; }
cmake --build "$tmp/cm" > "$tmp/cmb.log" 2>&1 || { cat "$tmp/cmb.log"; fail "build with find_package(PE)"; }
loads_installed "$tmp/cm/infer"
run_infer "$tmp/cm/infer" "find_package"
echo "   $(head -1 "$tmp/out") ... ok"

echo "== find_package(PE): the same project with PE::pe_static (libpe.a)"
cmake -S "$src/examples/c_api" -B "$tmp/cms" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  -DPE_INFER_STATIC=ON > "$tmp/cms.log" 2>&1 || { cat "$tmp/cms.log"; fail "configure with PE::pe_static"; }
cmake --build "$tmp/cms" > "$tmp/cmsb.log" 2>&1 || { cat "$tmp/cmsb.log"; fail "build with PE::pe_static"; }
! ldd "$tmp/cms/infer" | grep -q "libpe\.so" || fail "the static build loads libpe.so"
run_infer "$tmp/cms/infer" "find_package static"
echo "   ok"

echo "== find_package(PE) from a C++-only project (OpenMP and MPI found for CXX), PE::pe and PE::pe_static"
mkdir -p "$tmp/cxx"
cat > "$tmp/cxx/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(cxx_user CXX)
find_package(PE CONFIG REQUIRED)
add_executable(shared main.cpp)
target_link_libraries(shared PRIVATE PE::pe)
add_executable(static main.cpp)
target_link_libraries(static PRIVATE PE::pe_static)
CM
cat > "$tmp/cxx/main.cpp" <<'CC'
#include <pe/pe.h>
#include <cstdio>
int main() {
    pe_program *p = nullptr;
    pe_status st = pe_program_load_file("/nonexistent/model.pe", &p);
    std::printf("%s: %s\n", pe_status_name(st), pe_last_error());
    return st == PE_OK;
}
CC
cmake -S "$tmp/cxx" -B "$tmp/cxx/b" -DCMAKE_PREFIX_PATH="$prefix" > "$tmp/cxx.log" 2>&1 &&
  cmake --build "$tmp/cxx/b" >> "$tmp/cxx.log" 2>&1 || { cat "$tmp/cxx.log"; fail "the C++ project"; }
"$tmp/cxx/b/shared" | grep -q "nonexistent/model.pe" || fail "the C++ project (shared) did not report the missing file"
"$tmp/cxx/b/static" | grep -q "nonexistent/model.pe" || fail "the C++ project (static) did not report the missing file"
echo "   ok"

echo "== pkg-config --cflags --libs pe"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
flags=$(pkg-config --cflags --libs pe) || fail "pkg-config pe"
pcdir=$(pkg-config --variable=libdir pe)
[ "$(cd "$pcdir" && pwd)" = "$libdir" ] || fail "pe.pc's libdir $pcdir is not $libdir"
# shellcheck disable=SC2086
cc -std=c11 -Wall -Wextra -Werror "$src/examples/c_api/infer.c" -o "$tmp/infer_pc" $flags -lm \
  -Wl,-rpath,"$pcdir" || fail "cc infer.c \$(pkg-config --cflags --libs pe)"
loads_installed "$tmp/infer_pc"
run_infer "$tmp/infer_pc" "pkg-config"
echo "   cc infer.c $flags: ok"
echo "PASS"
