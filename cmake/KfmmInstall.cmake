# Installs the headers and a package config so host codes use find_package(kfmm) and kfmm::kfmm,
# with the same include spelling (<kfmm/...>) as the in-tree build.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

foreach(layer core tree operators drivers)
  install(DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${layer}/kfmm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.hpp")
endforeach()
install(TARGETS kfmm EXPORT kfmmTargets)
install(EXPORT kfmmTargets NAMESPACE kfmm:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kfmm)
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/kfmmConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/kfmmConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kfmm)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/kfmmConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/kfmmConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/kfmmConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/kfmm)
