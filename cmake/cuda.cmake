# CUDA backend (Hopper sm_90a). Included by the top CMakeLists.txt when INVAR_CUDA is ON.
# Builds only when nvcc is found; CI without a GPU still compiles and links everything, and
# the device tests skip (exit 77) when no sm_90 device is present.
include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "invar: nvcc not found, CUDA backend skipped")
  return()
endif()
# Architectures come from INVAR_CUDA_GENCODE on the CUDA target; C targets that link it
# (the engine's backend, the CLI) must not be given CMake's default list.
set(CMAKE_CUDA_ARCHITECTURES OFF)
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

set(INVAR_CUDA_GENCODE -gencode=arch=compute_90a,code=sm_90a)

file(GLOB INVAR_CUDA_SRCS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/kernels/cuda/*.cu)
add_library(invar_cuda STATIC ${INVAR_CUDA_SRCS})
# The project-wide add_compile_options are gcc flags nvcc would reject: replace them with
# nvcc's own. No fast-math: the kernels' arithmetic is spelled out (fixed order, explicit
# rounding intrinsics where two kernels must agree).
set_property(TARGET invar_cuda PROPERTY COMPILE_OPTIONS "")
set_target_properties(invar_cuda PROPERTIES CUDA_ARCHITECTURES OFF POSITION_INDEPENDENT_CODE ON)
target_compile_options(invar_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:${INVAR_CUDA_GENCODE} -O3 -std=c++17 -Xptxas=-warn-spills
    -Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror>)
target_include_directories(invar_cuda PUBLIC ${CMAKE_SOURCE_DIR}/include)
invar_layer_headers(invar_cuda src/kernels/cuda) # "kernels/cuda/file.h", as every layer
target_link_libraries(invar_cuda PUBLIC CUDA::cudart_static CUDA::cublas)

# Targets made before this file (the layers, the CLI) link CUDA through invar_backend but
# were created without the variable above: they take no CMake architecture list either.
get_property(invar_targets_before DIRECTORY ${CMAKE_SOURCE_DIR} PROPERTY BUILDSYSTEM_TARGETS)
if(invar_targets_before)
  set_target_properties(${invar_targets_before} PROPERTIES CUDA_ARCHITECTURES OFF)
endif()

# The engine's CUDA backend (host C in src/backend) drives these kernels (absent in a
# kernels-only build).
if(TARGET invar_backend)
  target_compile_definitions(invar_backend PRIVATE INVAR_HAVE_CUDA=1)
  target_link_libraries(invar_backend PUBLIC invar_cuda)
endif()

# Device tests: plain C host programs; registered with ctest, skipped without a device.
file(GLOB INVAR_CUDA_TESTS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/cuda/test_*.c)
file(GLOB INVAR_CUDA_TEST_COMMON CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/cuda/cuda_test_util.c)
foreach(t ${INVAR_CUDA_TESTS})
  get_filename_component(tname ${t} NAME_WE)
  add_executable(${tname} ${t} ${INVAR_CUDA_TEST_COMMON})
  target_include_directories(${tname} PRIVATE ${CMAKE_SOURCE_DIR}/tests/cuda)
  target_link_libraries(${tname} PRIVATE invar_cuda m)
  if(INVAR_TESTS)
    add_test(NAME ${tname} COMMAND ${tname})
    set_tests_properties(${tname} PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
  endif()
endforeach()

file(GLOB INVAR_CUDA_BENCH CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/bench/cuda/*.c)
if(INVAR_CUDA_BENCH)
  add_executable(bench_cuda ${INVAR_CUDA_BENCH} ${INVAR_CUDA_TEST_COMMON})
  target_include_directories(bench_cuda PRIVATE ${CMAKE_SOURCE_DIR}/tests/cuda)
  target_link_libraries(bench_cuda PRIVATE invar_cuda m)
endif()

if(NOT TARGET invar) # a kernels-only build: the engine's targets do not exist
  return()
endif()

# The engine on the GPU: the invariance suite through the public API (needs a model file;
# the device script runs it on the default and generated models).
add_executable(test_cuda_engine ${CMAKE_SOURCE_DIR}/tests/cuda/engine/test_cuda_engine.c)
target_link_libraries(test_cuda_engine PRIVATE invar m)
if(INVAR_TESTS)
  add_test(NAME test_cuda_engine
           COMMAND test_cuda_engine ${CMAKE_SOURCE_DIR}/models/SmolLM2-135M-Instruct.Q4_1.gguf --quick)
  set_tests_properties(test_cuda_engine PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77)
endif()

# The device sampler against the host sampler, bit for bit (no model needed).
add_executable(test_cuda_sampler ${CMAKE_SOURCE_DIR}/tests/cuda/engine/test_cuda_sampler.c)
target_link_libraries(test_cuda_sampler PRIVATE invar m)
if(INVAR_TESTS)
  add_test(NAME test_cuda_sampler COMMAND test_cuda_sampler)
  set_tests_properties(test_cuda_sampler PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()

# End-to-end GPU benchmark of the engine (bench/cuda/engine/README in bench/cuda/README.md).
add_executable(bench_engine ${CMAKE_SOURCE_DIR}/bench/cuda/engine/engine_bench.c)
target_link_libraries(bench_engine PRIVATE invar m)
