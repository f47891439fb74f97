# The install test: installs the built project into a fresh prefix, then configures, builds and
# runs tests/consumer against it, as a user's project would find mxlinear.
#   cmake -DBUILD_DIR=... -DCONSUMER_DIR=... -DWORK_DIR=... -DGENERATOR=... -DBUILD_TYPE=...
#         -DCXX_COMPILER=... -DCUDA_ROOT=... [-DLINK_FLAGS=...] -P run_consumer_test.cmake
foreach(var BUILD_DIR CONSUMER_DIR WORK_DIR GENERATOR CXX_COMPILER)
  if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
    message(FATAL_ERROR "run_consumer_test.cmake: -D${var}=... is required")
  endif()
endforeach()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer test: ${what} failed (exit ${rc}):\n${out}")
  endif()
  message(STATUS "${what}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run_step("install into ${prefix}" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(file include/mxlinear/linear.hpp include/mxlinear/version.hpp
             include/mxlinear/version_macros.hpp)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "consumer test: the install lacks ${file}")
  endif()
endforeach()

# Warnings are errors in the consumer too: the installed headers must compile cleanly there.
run_step("configure the consumer"
  ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
  -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
  "-DCMAKE_CXX_FLAGS=-Wall -Wextra -Wpedantic -Wconversion -Werror"
  "-DCMAKE_EXE_LINKER_FLAGS=${LINK_FLAGS}" -DCMAKE_PREFIX_PATH=${prefix}
  -DCUDAToolkit_ROOT=${CUDA_ROOT})
# The package must come from the fresh prefix, not from an mxlinear installed elsewhere.
file(STRINGS ${WORK_DIR}/build/CMakeCache.txt found REGEX "^mxlinear_DIR:")
file(REAL_PATH ${prefix} real_prefix)
if(NOT found MATCHES "=${real_prefix}/" AND NOT found MATCHES "=${prefix}/")
  message(FATAL_ERROR "consumer test: found ${found}, not the package under ${prefix}")
endif()
run_step("build the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run_step("run the consumer" ${WORK_DIR}/build/mxlinear_consumer)
message("${step_output}")
