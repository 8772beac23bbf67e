# The consumer test (CTest `embed`): installs the current build into a temporary prefix and configures,
# builds and runs examples/embed against it, as a host code would use the package.
#   cmake -DBUILD_DIR=<kfmm build> -DSOURCE_DIR=<examples/embed> -DWORK_DIR=<scratch>
#         -DCXX=<compiler> -DBUILD_TYPE=<type> -DGENERATOR=<generator> -P EmbedTest.cmake
# Only the install prefix is given to the consumer: the package has to find Kokkos (and Kokkos Kernels)
# by itself.
foreach(var BUILD_DIR SOURCE_DIR WORK_DIR CXX GENERATOR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "EmbedTest.cmake: ${var} is not set")
  endif()
endforeach()

function(run_step name)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "embed: ${name} failed (${rc}):\n${out}")
  endif()
  message(STATUS "embed: ${name}: ok")
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(prefix "${WORK_DIR}/prefix")
run_step("install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${prefix}")
if(NOT EXISTS "${prefix}/include/kfmm/kfmm.hpp")
  message(FATAL_ERROR "embed: ${prefix}/include/kfmm/kfmm.hpp was not installed")
endif()
run_step("configure" ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/build" -G "${GENERATOR}"
         -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DCMAKE_PREFIX_PATH=${prefix}
         -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
string(REGEX MATCH "embed: kfmm [^\n]*" found "${step_output}")
message(STATUS "${found}")
run_step("build" ${CMAKE_COMMAND} --build "${WORK_DIR}/build")
set(app "${WORK_DIR}/build/app")
run_step("run" "${app}")
message(STATUS "${step_output}")
file(REMOVE_RECURSE "${WORK_DIR}")
