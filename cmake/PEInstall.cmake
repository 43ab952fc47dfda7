# cmake/PEInstall.cmake — PE as an installed library (included at the end of
# CMakeLists.txt; issue 18).
#
# What: `cmake --install build --prefix P` installs
#   lib/libpe.so.<ver> (+ SONAME link libpe.so.<major>.<minor>, libpe.so), lib/libpe.a,
#   include/pe/*.h, bin/pe, lib/cmake/PE/ (find_package(PE CONFIG): PE::pe,
#   the shared library, and PE::pe_static) and lib/pkgconfig/pe.pc.
# How: both libraries are made of the stage libraries' object files
#   ($<TARGET_OBJECTS:pe_runtime> ... pe_executor), compiled once; the stage
#   libraries stay what the tool, the Python extension, tests and benchmarks
#   link (they may use internal symbols). The stages are compiled with
#   -fvisibility=hidden; the public headers wrap their declarations in
#   `#pragma GCC visibility push(default)`, and cmake/pe.map keeps every
#   other symbol out of libpe.so's dynamic table, so it exports the public
#   API only (tests/install/check_install.sh checks `nm -D`).
# Why: a user project links PE like any system library — find_package or
#   pkg-config — without knowing the stage split or the -u pe_ops_op_lookup
#   trick (libpe.so holds every object; PE::pe_static and pe.pc's
#   Libs.private carry it for static links).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# ---- visibility: the stages export nothing but the public API ---------------
foreach(stage ${PE_STAGES})
  set_target_properties(pe_${stage} PROPERTIES
    C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
endforeach()

set(_pe_objects)
foreach(stage ${PE_STAGES})
  list(APPEND _pe_objects $<TARGET_OBJECTS:pe_${stage}>)
endforeach()

# The compile definitions the public headers read (device.h: PE_WITH_CUDA).
set(_pe_public_defs)
if(PE_CUDA_ENABLED)
  list(APPEND _pe_public_defs PE_WITH_CUDA=1)
endif()
if(PE_MPI_ENABLED)
  list(APPEND _pe_public_defs PE_WITH_MPI=1)
endif()
if(PE_CUDA_ENABLED AND NCCL_INCLUDE_DIR AND NCCL_LIB)
  set(PE_NCCL_ENABLED ON)
  list(APPEND _pe_public_defs PE_WITH_NCCL=1)
else()
  set(PE_NCCL_ENABLED OFF)
endif()

# ---- libpe.so -----------------------------------------------------------------
add_library(pe_shared SHARED ${_pe_objects})
set_target_properties(pe_shared PROPERTIES
  OUTPUT_NAME pe EXPORT_NAME pe LINKER_LANGUAGE CXX
  VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
# The external libraries come from the stage libraries' link interface
# (their objects are all here already, so the archives add nothing else).
target_link_libraries(pe_shared PRIVATE pe_executor)
target_link_options(pe_shared PRIVATE "LINKER:--version-script=${CMAKE_CURRENT_LIST_DIR}/pe.map")
if(NOT PE_SANITIZE AND NOT PE_BUILD_FUZZ) # their runtimes come with the executable
  target_link_options(pe_shared PRIVATE "LINKER:--no-undefined")
endif()
set_property(TARGET pe_shared APPEND PROPERTY LINK_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/pe.map)
target_include_directories(pe_shared INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_definitions(pe_shared INTERFACE ${_pe_public_defs})

# ---- libpe.a --------------------------------------------------------------------
# Its external libraries are added by PEConfig.cmake (found there with
# find_dependency) and by pe.pc's Libs.private.
add_library(pe_static STATIC ${_pe_objects})
set_target_properties(pe_static PROPERTIES OUTPUT_NAME pe EXPORT_NAME pe_static LINKER_LANGUAGE CXX)
target_include_directories(pe_static INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_definitions(pe_static INTERFACE ${_pe_public_defs})
target_link_options(pe_static INTERFACE "LINKER:--undefined=pe_ops_op_lookup")

# ---- install ----------------------------------------------------------------------
set(PE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/PE)
install(TARGETS pe_shared pe_static EXPORT PETargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/include/pe DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  FILES_MATCHING PATTERN "*.h")
if(TARGET pe_tool)
  install(TARGETS pe_tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT PETargets NAMESPACE PE:: DESTINATION ${PE_CMAKE_DIR})

# PEConfig.cmake: the dependencies the static library needs, as the build
# found them (the shared library carries them as DT_NEEDED).
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/PEConfig.cmake.in
  ${CMAKE_BINARY_DIR}/pe_package/PEConfig.cmake INSTALL_DESTINATION ${PE_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/pe_package/PEConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/pe_package/PEConfig.cmake ${CMAKE_BINARY_DIR}/pe_package/PEConfigVersion.cmake
  DESTINATION ${PE_CMAKE_DIR})

# pe.pc, relocatable: prefix is found from the file's own place (${pcfiledir}),
# so `cmake --install build --prefix P` works for any P.
set(PE_PC_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
file(RELATIVE_PATH PE_PC_TO_PREFIX /__prefix/${PE_PC_DIR} /__prefix)
string(REGEX REPLACE "/$" "" PE_PC_TO_PREFIX "${PE_PC_TO_PREFIX}")
set(PE_PC_CFLAGS "")
foreach(d ${_pe_public_defs})
  string(APPEND PE_PC_CFLAGS " -D${d}")
endforeach()
get_filename_component(_pe_blas_dir ${OPENBLAS_LIB} DIRECTORY)
set(PE_PC_LIBS_PRIVATE "-Wl,-u,pe_ops_op_lookup -L${_pe_blas_dir} -lopenblas -ldnnl -lcjson -lflatbuffers")
if(PE_MPI_ENABLED)
  foreach(l ${MPI_C_LIBRARIES})
    string(APPEND PE_PC_LIBS_PRIVATE " ${l}")
  endforeach()
endif()
if(PE_ZMQ_ENABLED)
  string(APPEND PE_PC_LIBS_PRIVATE " -lzmq")
endif()
if(PE_CUDA_ENABLED)
  get_filename_component(_pe_cudnn_dir ${CUDNN_LIB} DIRECTORY)
  string(APPEND PE_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart -lcublas -L${_pe_cudnn_dir} -lcudnn")
  if(PE_NCCL_ENABLED)
    get_filename_component(_pe_nccl_dir ${NCCL_LIB} DIRECTORY)
    string(APPEND PE_PC_LIBS_PRIVATE " -L${_pe_nccl_dir} -lnccl")
  endif()
endif()
string(APPEND PE_PC_LIBS_PRIVATE " -lstdc++ -fopenmp -lm -lpthread")
configure_file(${CMAKE_CURRENT_LIST_DIR}/pe.pc.in ${CMAKE_BINARY_DIR}/pe_package/pe.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/pe_package/pe.pc DESTINATION ${PE_PC_DIR})

# ---- test: install into a temporary prefix, build README's C example against it -
if(PE_BUILD_TESTS)
  set(_skip "")
  if(PE_SANITIZE)  # a user project would have to link the sanitizer runtime first
    set(_skip "a PE_SANITIZE build is not installed for users")
  endif()
  add_test(NAME test_install COMMAND bash -c
    "if [ -n \"$1\" ]; then echo \"skipped: $1\"; exit 77; fi; exec bash \"$0\" \"$2\" \"$3\""
    ${CMAKE_SOURCE_DIR}/tests/install/check_install.sh "${_skip}" ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(test_install PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
