# codegen/gen.lua: the shipped space is written; the example of docs/design.md ("The variant space")
# adds its one tile and nothing else; a space it cannot write stops it, naming what is wrong. With
# -DBUILD=ON, the library and the command are also built with the example's space and `volt8 list`
# offers the new tile. Run with -DSOURCE_DIR, -DWORK_DIR, -DLUA [-DBUILD=ON -DCUDA_ROOT=...].
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(gen "${SOURCE_DIR}/codegen/gen.lua")

function(generate space out expect_result)
  execute_process(COMMAND "${LUA}" "${gen}" "${space}" "${out}" RESULT_VARIABLE result
                  OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(expect_result STREQUAL "ok" AND NOT result EQUAL 0)
    message(FATAL_ERROR "gen.lua ${space} failed (${result}):\n${output}")
  endif()
  set(generate_result "${result}" PARENT_SCOPE)
  set(generate_output "${output}" PARENT_SCOPE)
endfunction()

# The example: the first ```lua block of docs/design.md's "The variant space".
file(READ "${SOURCE_DIR}/docs/design.md" design)
string(FIND "${design}" "## The variant space" start)
if(start LESS 0)
  message(FATAL_ERROR "docs/design.md has no \"The variant space\" section")
endif()
string(SUBSTRING "${design}" ${start} -1 section)
string(FIND "${section}" "```lua\n" open)
if(open LESS 0)
  message(FATAL_ERROR "docs/design.md: no ```lua block in \"The variant space\"")
endif()
math(EXPR code_start "${open} + 7")
string(SUBSTRING "${section}" ${code_start} -1 rest)
string(FIND "${rest}" "```" close)
string(SUBSTRING "${rest}" 0 ${close} example)
file(WRITE "${WORK_DIR}/explore.lua" "${example}")

generate("${SOURCE_DIR}/codegen/variant_space.lua" "${WORK_DIR}/shipped.c" ok)
generate("${WORK_DIR}/explore.lua" "${WORK_DIR}/explore.c" ok)
file(STRINGS "${WORK_DIR}/shipped.c" shipped)
file(STRINGS "${WORK_DIR}/explore.c" explore)
set(added "    {.block_n = 64, .warps = 2, .split_k = 1},")
list(FIND shipped "${added}" in_shipped)
list(FIND explore "${added}" in_explore)
if(NOT in_shipped EQUAL -1 OR in_explore EQUAL -1)
  message(FATAL_ERROR "the example's tile (${added}) is not what it adds to the shipped space")
endif()
# Everything else is the shipped space: its lines less the first (the space's name), the new tile and
# the hmma counts, in the same order.
list(REMOVE_AT explore ${in_explore})
list(REMOVE_AT shipped 0)
list(REMOVE_AT explore 0)
set(shipped_count "")
set(explore_count "")
foreach(list_name IN ITEMS shipped explore)
  list(FILTER ${list_name} EXCLUDE REGEX "^const volt8_variant_space volt8_space_hmma")
endforeach()
if(NOT shipped STREQUAL explore)
  message(FATAL_ERROR "the example changes more of the space than its one tile")
endif()
file(READ "${WORK_DIR}/explore.c" explore_text)
string(FIND "${explore_text}" "volt8_space_hmma = {HMMA_BLOCK_MS, 4, {HMMA_GATE_UP, HMMA_DOWN}, {13, 19}};" counted)
if(counted LESS 0)
  message(FATAL_ERROR "the example's hmma space does not count 13 gate_up and 19 down tiles")
endif()

# Spaces gen.lua refuses: it exits 1 and names what is wrong.
foreach(case IN ITEMS "unknown_field|'lane' is not a tile field" "tile_twice|cc down: tile .*block_n=64, warps=4.* is listed twice"
                      "family_missing|family tok is missing" "not_whole|mma down: tile .*: block_n must be a whole number")
  string(REPLACE "|" ";" case "${case}")
  list(GET case 0 name)
  list(GET case 1 expected)
  generate("${SOURCE_DIR}/tests/fixtures/space/${name}.lua" "${WORK_DIR}/${name}.c" refused)
  if(NOT generate_result EQUAL 1 OR NOT generate_output MATCHES "${expected}" OR EXISTS "${WORK_DIR}/${name}.c")
    message(FATAL_ERROR "gen.lua on ${name}.lua: exit ${generate_result}, expected 1 naming \"${expected}\", "
                        "and no output file:\n${generate_output}")
  endif()
endforeach()
message(STATUS "gen.lua writes the shipped space, the example's one tile more, and refuses 4 bad spaces")

if(BUILD)
  execute_process(COMMAND ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -DCMAKE_BUILD_TYPE=Release
                          -DVOLT8_BUILD_TESTS=OFF -DVOLT8_BUILD_BENCH=OFF -DCUDAToolkit_ROOT=${CUDA_ROOT}
                          -DVOLT8_VARIANT_SPACE=${WORK_DIR}/explore.lua
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "configuring with the example's space failed:\n${output}")
  endif()
  execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK_DIR}/build" --target volt8_cli -j 2
                  RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "building with the example's space failed:\n${output}")
  endif()
  execute_process(COMMAND "${WORK_DIR}/build/volt8" list --arch sm_90 RESULT_VARIABLE result OUTPUT_VARIABLE listed
                  ERROR_VARIABLE output)
  string(REGEX MATCHALL "down\\.hmma\\.bm[0-9]+\\.bn64\\.w2\\.sk1\n" new_variants "${listed}")
  list(LENGTH new_variants new_count)
  if(NOT result EQUAL 0 OR NOT new_count EQUAL 4)
    message(FATAL_ERROR "volt8 list --arch sm_90 built with the example's space offers ${new_count} "
                        "down.hmma.*.bn64.w2.sk1 variants, not one a block_m (4):\n${listed}${output}")
  endif()
  message(STATUS "built with the example's space, volt8 list offers its tile at each of hmma's 4 block_m")
endif()
