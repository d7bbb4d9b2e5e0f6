# Finds the optional and required dependencies and prints one line per feature (✓ found, ✗ missing).
function(tb_feature name found detail)
  if(found)
    message(STATUS "  ✓ ${name} ${detail}")
  else()
    message(STATUS "  ✗ ${name} ${detail}")
  endif()
endfunction()

# Resolves an ON/OFF/AUTO option: ON makes a missing dependency fatal, AUTO enables what is found.
function(tb_resolve option found out)
  if("${${option}}" STREQUAL "OFF")
    set(${out} FALSE PARENT_SCOPE)
  elseif(found)
    set(${out} TRUE PARENT_SCOPE)
  elseif("${${option}}" STREQUAL "ON")
    message(FATAL_ERROR "${option}=ON but its dependencies were not found")
  else()
    set(${out} FALSE PARENT_SCOPE)
  endif()
endfunction()

message(STATUS "Towerbench features:")

# Required: oneDNN (CPU kernels), a CBLAS (OpenBLAS), OpenMP (threads of both), zlib (.gz datasets),
# nlohmann-json (model and run files).
# Debian's dnnl-config.cmake demands the OpenCL SDK (its GPU runtime); the CPU engine needs
# only the library and its headers, so find those directly.
find_library(TB_DNNL_LIB NAMES dnnl REQUIRED)
find_path(TB_DNNL_INCLUDE NAMES oneapi/dnnl/dnnl.hpp REQUIRED)
file(STRINGS ${TB_DNNL_INCLUDE}/oneapi/dnnl/dnnl_version.h _dnnl_v REGEX "#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
string(REGEX REPLACE "[^0-9;]" "" _dnnl_v "${_dnnl_v}")
string(REPLACE ";" "." dnnl_VERSION "${_dnnl_v}")
find_package(OpenMP REQUIRED)
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(Threads REQUIRED)
find_library(TB_OPENBLAS_LIB NAMES openblas REQUIRED)
find_path(TB_CBLAS_INCLUDE NAMES cblas.h PATH_SUFFIXES openblas REQUIRED)
tb_feature("oneDNN" TRUE "${dnnl_VERSION}")
tb_feature("OpenBLAS" TRUE "${TB_OPENBLAS_LIB}")

# Optional: CUDA toolkit (backend lands with the GPU engine).
include(CheckLanguage)
set(_cuda_found FALSE)
if(NOT TB_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(_cuda_found TRUE)
  endif()
endif()
tb_resolve(TB_WITH_CUDA ${_cuda_found} TB_HAVE_CUDA)
tb_feature("CUDA" "${TB_HAVE_CUDA}" "(toolkit ${CMAKE_CUDA_COMPILER}; the GPU backend is not built yet)")

# Optional: Qt 6 Widgets + QCustomPlot (window) and Qt Test (suite).
set(_qt_found FALSE)
if(NOT TB_WITH_GUI STREQUAL "OFF")
  find_package(Qt6 QUIET COMPONENTS Widgets PrintSupport Test)
  if(Qt6_FOUND)
    set(_qt_found TRUE)
  endif()
endif()
tb_resolve(TB_WITH_GUI ${_qt_found} TB_HAVE_QT)
tb_feature("Qt 6" "${TB_HAVE_QT}" "${Qt6_VERSION}")

# Optional: MPI (multi-process reducer, a later issue).
set(_mpi_found FALSE)
if(NOT TB_WITH_MPI STREQUAL "OFF")
  find_package(MPI QUIET COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(_mpi_found TRUE)
  endif()
endif()
tb_resolve(TB_WITH_MPI ${_mpi_found} TB_HAVE_MPI)
tb_feature("MPI" "${TB_HAVE_MPI}" "")
