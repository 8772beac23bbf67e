# Warnings for the project's own targets (never forced on consumers of kfmm::kfmm).
add_library(kfmm_warnings INTERFACE)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(kfmm_warnings INTERFACE -Wall -Wextra)
  # Lets the compiler vectorise loops with sqrt (g++ otherwise keeps the scalar errno path).
  target_compile_options(kfmm_warnings INTERFACE -fno-math-errno)
endif()
option(KFMM_WARNINGS_AS_ERRORS "Treat warnings as errors" OFF)
if(KFMM_WARNINGS_AS_ERRORS AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(kfmm_warnings INTERFACE -Werror)
endif()
