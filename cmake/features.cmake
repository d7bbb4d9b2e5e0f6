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

# Required: oneDNN (CPU kernels), OpenMP (its threads and ours), zlib (.gz datasets),
# nlohmann-json (model and run files), SQLite (the runs index).
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
find_package(SQLite3 REQUIRED)  # the runs index (io/run_index.hpp)
tb_feature("oneDNN" TRUE "${dnnl_VERSION}")

# Optional: the CUDA backend module (CUDA toolkit with nvcc and cuBLAS, cuDNN 9, NCCL 2). cuDNN and
# NCCL are found under the toolkit or under CUDNN_ROOT / NCCL_ROOT (e.g. the Python wheels'
# site-packages/nvidia/cudnn and .../nccl, whose libraries carry only versioned names).
include(CheckLanguage)
set(_cuda_found FALSE)
set(_cuda_detail "")
if(NOT TB_WITH_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
    # cuBLAS and cuBLASLt outside the toolkit (a Python wheel's nvidia/cublas): CUBLAS_ROOT.
    set(CUBLAS_ROOT "$ENV{CUBLAS_ROOT}" CACHE PATH "cuBLAS install (include/, lib/) when not in the toolkit")
    if(CUDAToolkit_FOUND AND NOT TARGET CUDA::cublas AND CUBLAS_ROOT)
      find_library(TB_CUBLAS_LIB NAMES cublas libcublas.so.13 libcublas.so.12 HINTS ${CUBLAS_ROOT}/lib)
      find_library(TB_CUBLASLT_LIB NAMES cublasLt libcublasLt.so.13 libcublasLt.so.12 HINTS ${CUBLAS_ROOT}/lib)
      find_path(TB_CUBLAS_INCLUDE cublas_v2.h HINTS ${CUBLAS_ROOT}/include)
      if(TB_CUBLAS_LIB AND TB_CUBLASLT_LIB AND TB_CUBLAS_INCLUDE)
        add_library(CUDA::cublas UNKNOWN IMPORTED)
        set_target_properties(CUDA::cublas PROPERTIES IMPORTED_LOCATION ${TB_CUBLAS_LIB}
          INTERFACE_INCLUDE_DIRECTORIES ${TB_CUBLAS_INCLUDE})
        add_library(CUDA::cublasLt UNKNOWN IMPORTED)
        set_target_properties(CUDA::cublasLt PROPERTIES IMPORTED_LOCATION ${TB_CUBLASLT_LIB}
          INTERFACE_INCLUDE_DIRECTORIES ${TB_CUBLAS_INCLUDE})
      endif()
    endif()
    set(CUDNN_ROOT "$ENV{CUDNN_ROOT}" CACHE PATH "cuDNN install (include/, lib/)")
    set(NCCL_ROOT "$ENV{NCCL_ROOT}" CACHE PATH "NCCL install (include/, lib/)")
    find_path(TB_CUDNN_INCLUDE cudnn.h HINTS ${CUDNN_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
    find_library(TB_CUDNN_LIB NAMES cudnn libcudnn.so.9 HINTS ${CUDNN_ROOT}/lib ${CUDNN_ROOT}/lib64 ${CUDAToolkit_LIBRARY_DIR})
    find_path(TB_NCCL_INCLUDE nccl.h HINTS ${NCCL_ROOT}/include ${CUDAToolkit_INCLUDE_DIRS})
    find_library(TB_NCCL_LIB NAMES nccl libnccl.so.2 HINTS ${NCCL_ROOT}/lib ${NCCL_ROOT}/lib64 ${CUDAToolkit_LIBRARY_DIR})
    if(CUDAToolkit_FOUND AND TARGET CUDA::cublas AND TARGET CUDA::cublasLt AND TB_CUDNN_INCLUDE AND TB_CUDNN_LIB AND TB_NCCL_INCLUDE AND TB_NCCL_LIB)
      set(_cuda_found TRUE)
      set(_cuda_detail "(CUDA ${CUDAToolkit_VERSION}, ${TB_CUDNN_LIB}, ${TB_NCCL_LIB})")
    else()
      set(_cuda_detail "(nvcc found, but not all of cuBLAS / cuDNN / NCCL: set CUDNN_ROOT and NCCL_ROOT)")
    endif()
  endif()
endif()
tb_resolve(TB_WITH_CUDA ${_cuda_found} TB_HAVE_CUDA)
if(TB_HAVE_CUDA)
  enable_language(CUDA)
  # A100 and Hopper machine code, plus Hopper PTX that newer GPUs compile at load time.
  set(TB_CUDA_ARCHITECTURES "80-real;90" CACHE STRING "GPU architectures of the CUDA backend module")
endif()
tb_feature("CUDA backend" "${TB_HAVE_CUDA}" "${_cuda_detail}")

# Optional: Qt 6 Widgets + QCustomPlot (window) and Qt Test (suite).
set(_qt_found FALSE)
if(NOT TB_WITH_GUI STREQUAL "OFF")
  find_package(Qt6 QUIET COMPONENTS Widgets PrintSupport Test)
  if(Qt6_FOUND)
    find_package(QCustomPlotQt6 QUIET)
  endif()
  if(Qt6_FOUND AND QCustomPlotQt6_FOUND)
    set(_qt_found TRUE)
  endif()
endif()
tb_resolve(TB_WITH_GUI ${_qt_found} TB_HAVE_QT)
tb_feature("Qt 6" "${TB_HAVE_QT}" "${Qt6_VERSION}")

# Optional: MPI (Open MPI from Debian: openmpi-bin, libopenmpi-dev): runs of several processes
# (mpirun -np N towerbench-run ...). Only MPI's C API is used (no C++ bindings).
set(_mpi_found FALSE)
if(NOT TB_WITH_MPI STREQUAL "OFF")
  set(MPI_CXX_SKIP_MPICXX ON)
  find_package(MPI QUIET COMPONENTS CXX)
  if(MPI_CXX_FOUND)
    set(_mpi_found TRUE)
  endif()
endif()
tb_resolve(TB_WITH_MPI ${_mpi_found} TB_HAVE_MPI)
tb_feature("MPI" "${TB_HAVE_MPI}" "${MPI_CXX_LIBRARY_VERSION_STRING}")

# Optional: protobuf (libprotobuf and protoc): TensorBoard event files and TFRecord Examples. The
# GPU machines build the core without it.
set(_protobuf_found FALSE)
if(NOT TB_WITH_PROTOBUF STREQUAL "OFF")
  find_package(Protobuf QUIET)
  if(Protobuf_FOUND AND Protobuf_PROTOC_EXECUTABLE)
    set(_protobuf_found TRUE)
  endif()
endif()
tb_resolve(TB_WITH_PROTOBUF ${_protobuf_found} TB_HAVE_PROTOBUF)
tb_feature("protobuf (TensorBoard, TFRecord)" "${TB_HAVE_PROTOBUF}" "${Protobuf_VERSION}")

# Optional: libpng and libjpeg-turbo: image files (--data folder:DIR, PNG and JPEG bytes in
# TFRecord Examples). The GPU machines may build the core without them.
set(TB_WITH_IMAGES AUTO CACHE STRING "PNG and JPEG image input through libpng and libjpeg (ON, OFF, AUTO)")
set(_images_found FALSE)
if(NOT TB_WITH_IMAGES STREQUAL "OFF")
  find_package(PNG QUIET)
  find_package(JPEG QUIET)
  if(PNG_FOUND AND JPEG_FOUND)
    set(_images_found TRUE)
  endif()
endif()
tb_resolve(TB_WITH_IMAGES ${_images_found} TB_HAVE_IMAGES)
tb_feature("libpng + libjpeg (image folders)" "${TB_HAVE_IMAGES}" "${PNG_VERSION_STRING}")
