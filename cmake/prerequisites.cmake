# What the build needs, each missing one named with what to install (Debian package names; other
# systems have the same libraries under similar names). scripts/bootstrap.sh installs all of them.
find_package(PkgConfig QUIET)
if(NOT PKG_CONFIG_FOUND)
  message(FATAL_ERROR "volt8: pkg-config is missing: install it (apt-get install pkg-config)")
endif()

# Lua 5.4 generates the kernels' variant space when the library is built (codegen/); nothing runs it
# later. VOLT8_LUA names another interpreter.
find_program(VOLT8_LUA NAMES lua5.4 DOC "the Lua 5.4 interpreter that generates the variant space (codegen/)")
if(NOT VOLT8_LUA OR NOT EXISTS "${VOLT8_LUA}")
  message(FATAL_ERROR "volt8: lua5.4 was not found (VOLT8_LUA=${VOLT8_LUA}): the build generates the kernels' "
    "variant space with it (codegen/): install it (apt-get install lua5.4)")
endif()

# Only the toolkit's headers (cuda.h) are needed: the driver, NVRTC and cuBLASLt are opened at run time.
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND OR NOT EXISTS "${CUDAToolkit_INCLUDE_DIRS}/cuda.h")
  message(FATAL_ERROR
    "volt8: the CUDA toolkit's headers (cuda.h) were not found. Building volt8 needs them, though it "
    "links nothing of the toolkit: install a CUDA toolkit 12 or 13 (NVIDIA's cuda-toolkit package, or "
    "Debian's nvidia-cuda-toolkit) and, if it is not in /usr/local/cuda, set CUDAToolkit_ROOT (or put its "
    "nvcc on PATH).")
endif()

# VOLT8_STATIC_DEPS: a folder of static, position-independent cJSON (lib/libcjson.a, include/cjson/),
# which the wheel's build makes for glibc 2.28 (scripts/wheel_deps.sh) and links in; else the
# system's, through pkg-config.
set(VOLT8_STATIC_DEPS "" CACHE PATH "static cJSON to link in (scripts/wheel_deps.sh); empty: pkg-config's")
if(VOLT8_STATIC_DEPS)
  if(NOT EXISTS "${VOLT8_STATIC_DEPS}/lib/libcjson.a")
    message(FATAL_ERROR "volt8: VOLT8_STATIC_DEPS=${VOLT8_STATIC_DEPS} has no lib/libcjson.a (scripts/wheel_deps.sh makes it)")
  endif()
  add_library(PkgConfig::CJSON STATIC IMPORTED)
  set_target_properties(PkgConfig::CJSON PROPERTIES IMPORTED_LOCATION "${VOLT8_STATIC_DEPS}/lib/libcjson.a"
                        INTERFACE_INCLUDE_DIRECTORIES "${VOLT8_STATIC_DEPS}/include")
else()
  pkg_check_modules(CJSON QUIET IMPORTED_TARGET libcjson)
  if(NOT CJSON_FOUND)
    message(FATAL_ERROR "volt8: cJSON was not found through pkg-config: install libcjson-dev")
  endif()
endif()
find_package(Threads REQUIRED)
