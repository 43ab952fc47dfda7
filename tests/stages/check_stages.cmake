# tests/stages/check_stages.cmake — the stage rule holds (DESIGN.md §1, §2):
# data moves forward only, runtime <- graph <- ops <- passes <- executor.
#
#   cmake -DSRC=<repo> -DBUILD=<build dir> -DNM=<nm> -DLIBS="<stage>=<lib.a>;..."
#         -P tests/stages/check_stages.cmake          (ctest: test_stages)
#
# (a) headers: for each stage, a probe C file compiled with that stage's
#     exact compile command (from the build's compile_commands.json: its
#     compiler, flags, include path and definitions) that includes one header
#     of a later stage must fail with "No such file"; the positive control —
#     one header of the stage itself and of every earlier stage — must
#     compile. No source of a stage may include with "../" (a quoted include
#     is first looked up next to the including file, which would bypass the
#     per-stage include roots).
#     The public-API-only consumers — tools/ and the Python extension
#     (bindings/python/pe/), when built — reach include/pe/pe.h and no
#     stage's header.
# (b) symbols: every undefined pe_ symbol of a stage library is defined in
#     the same or an earlier stage library, so the stages link in data-path
#     order only.
#
# Every violation is reported with the file or symbol; the test fails after
# listing them all.
cmake_minimum_required(VERSION 3.20)

set(STAGES runtime graph ops passes executor)
# One self-contained header per stage for the positive control.
set(CONTROL_runtime runtime/internal.h)
set(CONTROL_graph graph/ssa_graph.h)
set(CONTROL_ops ops/op.h)
set(CONTROL_passes passes/pass_manager.h)
set(CONTROL_executor executor/memory_plan/plan.h)

foreach(v SRC BUILD NM LIBS)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check_stages.cmake: -D${v}=... is required")
  endif()
endforeach()

set(failures 0)
macro(violation msg)
  message(SEND_ERROR "stage rule violated: ${msg}")
  math(EXPR failures "${failures} + 1")
endmacro()

# ---- (a) headers -------------------------------------------------------------

file(READ ${BUILD}/compile_commands.json cc_json)
string(JSON n_cmds LENGTH "${cc_json}")
math(EXPR last "${n_cmds} - 1")
foreach(stage ${STAGES} tools bindings)
  set(cmd_${stage} "")
endforeach()
foreach(i RANGE ${last})
  string(JSON file GET "${cc_json}" ${i} file)
  file(RELATIVE_PATH rel ${SRC} ${file})
  if(NOT rel MATCHES "\\.c$")
    continue()
  endif()
  string(JSON dir GET "${cc_json}" ${i} directory)
  string(JSON cmd GET "${cc_json}" ${i} command)
  foreach(stage ${STAGES} tools bindings)
    if(rel MATCHES "^${stage}/" AND cmd_${stage} STREQUAL "")
      set(cmd_${stage} "${cmd}")
      set(dir_${stage} "${dir}")
      set(src_${stage} "${file}")
    endif()
  endforeach()
endforeach()

set(probe_dir ${BUILD}/stage_probe)
file(REMOVE_RECURSE ${probe_dir})
file(MAKE_DIRECTORY ${probe_dir})

# Compiles ${probe} with stage ${stage}'s command; sets ok and out.
function(compile_probe stage probe)
  separate_arguments(args UNIX_COMMAND "${cmd_${stage}}")
  set(cmdline)
  set(skip FALSE)
  foreach(a ${args})
    if(skip)
      set(skip FALSE)
      continue()
    endif()
    if(a STREQUAL "-o" OR a STREQUAL "-c" OR a STREQUAL "-MF" OR a STREQUAL "-MT" OR a STREQUAL "-MQ")
      set(skip TRUE)
      continue()
    endif()
    if(a STREQUAL "-MD" OR a STREQUAL "-MMD" OR a STREQUAL "${src_${stage}}")
      continue()
    endif()
    list(APPEND cmdline "${a}")
  endforeach()
  execute_process(COMMAND ${cmdline} -fsyntax-only ${probe}
    WORKING_DIRECTORY ${dir_${stage}} RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e)
  if(rc EQUAL 0)
    set(ok TRUE PARENT_SCOPE)
  else()
    set(ok FALSE PARENT_SCOPE)
  endif()
  set(out "${o}${e}" PARENT_SCOPE)
endfunction()

set(seen)
set(n_probes 0)
foreach(stage ${STAGES})
  if(cmd_${stage} STREQUAL "")
    violation("no compile command for a ${stage}/*.c source in ${BUILD}/compile_commands.json")
    continue()
  endif()
  list(APPEND seen ${stage})
  # Positive control: the stage's own header and every earlier stage's.
  set(text "/* positive control for stage ${stage} */\n")
  foreach(s ${seen})
    string(APPEND text "#include \"${CONTROL_${s}}\"\n")
  endforeach()
  string(APPEND text "int pe_stage_probe(void);\nint pe_stage_probe(void) { return 0; }\n")
  file(WRITE ${probe_dir}/${stage}_control.c "${text}")
  compile_probe(${stage} ${probe_dir}/${stage}_control.c)
  math(EXPR n_probes "${n_probes} + 1")
  if(NOT ok)
    violation("the positive control of stage ${stage} (its own and earlier stages' headers) does not compile "
              "with ${stage}'s flags:\n${out}")
  endif()
  # Every header of every later stage must be out of reach.
  set(later FALSE)
  foreach(l ${STAGES})
    if(l STREQUAL stage)
      set(later TRUE)
      continue()
    endif()
    if(NOT later)
      continue()
    endif()
    file(GLOB_RECURSE headers RELATIVE ${SRC} ${SRC}/${l}/*.h)
    foreach(h ${headers})
      string(MAKE_C_IDENTIFIER "${stage}_includes_${h}" name)
      file(WRITE ${probe_dir}/${name}.c "#include \"${h}\"\nint pe_stage_probe(void);\nint pe_stage_probe(void) { return 0; }\n")
      compile_probe(${stage} ${probe_dir}/${name}.c)
      math(EXPR n_probes "${n_probes} + 1")
      if(ok)
        violation("stage ${stage} can include ${h} of the later stage ${l} (compiled with ${stage}'s flags: "
                  "${probe_dir}/${name}.c)")
      elseif(NOT out MATCHES "No such file|file not found")
        violation("including ${h} from stage ${stage} failed for another reason than the header being out "
                  "of reach:\n${out}")
      endif()
    endforeach()
  endforeach()
endforeach()

# The public API only: tools/ and bindings/ (when built).
foreach(user tools bindings)
  if(cmd_${user} STREQUAL "")
    if(user STREQUAL "tools")
      violation("no compile command for a tools/*.c source in ${BUILD}/compile_commands.json")
    endif()
    continue()
  endif()
  file(WRITE ${probe_dir}/${user}_control.c
    "#include \"pe/pe.h\"\nint pe_stage_probe(void);\nint pe_stage_probe(void) { return 0; }\n")
  compile_probe(${user} ${probe_dir}/${user}_control.c)
  math(EXPR n_probes "${n_probes} + 1")
  if(NOT ok)
    violation("the positive control of ${user}/ (pe/pe.h) does not compile with its flags:\n${out}")
  endif()
  foreach(stage ${STAGES})
    set(h ${CONTROL_${stage}})
    string(MAKE_C_IDENTIFIER "${user}_includes_${h}" name)
    file(WRITE ${probe_dir}/${name}.c "#include \"${h}\"\nint pe_stage_probe(void);\nint pe_stage_probe(void) { return 0; }\n")
    compile_probe(${user} ${probe_dir}/${name}.c)
    math(EXPR n_probes "${n_probes} + 1")
    if(ok)
      violation("${user}/ can include ${h}, an internal header of stage ${stage} (public API only: include/pe/)")
    elseif(NOT out MATCHES "No such file|file not found")
      violation("including ${h} from ${user}/ failed for another reason than the header being out of reach:\n${out}")
    endif()
  endforeach()
endforeach()

# "../" includes would bypass the include roots (and tools' and bindings'
# public-only include path).
foreach(stage ${STAGES} tools bindings)
  file(GLOB_RECURSE files ${SRC}/${stage}/*.c ${SRC}/${stage}/*.h ${SRC}/${stage}/*.cc ${SRC}/${stage}/*.cu
    ${SRC}/${stage}/*.def)
  foreach(f ${files})
    file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]*\\.\\./")
    foreach(line ${lines})
      file(RELATIVE_PATH rel ${SRC} ${f})
      violation("${rel} includes with a relative path out of its folder: ${line}")
    endforeach()
  endforeach()
endforeach()

# ---- (b) symbols -------------------------------------------------------------

set(rank 0)
foreach(stage ${STAGES})
  set(lib_${stage} "")
  foreach(entry ${LIBS})
    if(entry MATCHES "^${stage}=(.*)$")
      set(lib_${stage} "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(NOT EXISTS "${lib_${stage}}")
    violation("the library of stage ${stage} (${lib_${stage}}) does not exist: build first")
    continue()
  endif()
  execute_process(COMMAND ${NM} -g --defined-only ${lib_${stage}} OUTPUT_VARIABLE defs RESULT_VARIABLE rc ERROR_QUIET)
  if(NOT rc EQUAL 0)
    violation("${NM} failed on ${lib_${stage}}")
  endif()
  string(REGEX MATCHALL "[^\n]* [A-Za-z] pe_[A-Za-z0-9_]*" lines "${defs}")
  foreach(l ${lines})
    string(REGEX REPLACE ".* " "" sym "${l}")
    if(NOT DEFINED def_${sym})
      set(def_${sym} ${rank})
      set(defstage_${sym} ${stage})
    endif()
  endforeach()
  set(rank_${stage} ${rank})
  math(EXPR rank "${rank} + 1")
endforeach()

set(n_undef 0)
foreach(stage ${STAGES})
  if(NOT EXISTS "${lib_${stage}}")
    continue()
  endif()
  execute_process(COMMAND ${NM} -A -u ${lib_${stage}} OUTPUT_VARIABLE undefs ERROR_QUIET)
  string(REGEX MATCHALL "[^\n]*[ \t][Uw] pe_[A-Za-z0-9_]*" lines "${undefs}")
  foreach(l ${lines})
    string(REGEX REPLACE ".* " "" sym "${l}")
    string(REGEX REPLACE ":[ \t]*[Uw] .*" "" where "${l}")
    get_filename_component(where "${where}" NAME)
    math(EXPR n_undef "${n_undef} + 1")
    if(NOT DEFINED def_${sym})
      violation("${sym}, used by ${where} of stage ${stage}, is defined in no stage library")
    elseif(def_${sym} GREATER rank_${stage})
      violation("${sym}, used by ${where} of stage ${stage}, is defined in the later stage ${defstage_${sym}}")
    endif()
  endforeach()
endforeach()

if(failures GREATER 0)
  message(FATAL_ERROR "check_stages: ${failures} violation(s) of the stage rule (see above)")
endif()
message(STATUS "check_stages: ${n_probes} include probes and ${n_undef} undefined pe_ symbol references "
               "of the stage libraries obey runtime <- graph <- ops <- passes <- executor")
