# Install rules: the library, its public headers (with the generated version macros), the CLI
# when it is built, and a find_package(mxlinear CONFIG) package exporting mxlinear::mxlinear.
include(CMakePackageConfigHelpers)

set(MXLINEAR_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/mxlinear
    CACHE STRING "Where the mxlinear CMake package config is installed, under the prefix")

install(TARGETS mxlinear EXPORT mxlinearTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/mxlinear ${PROJECT_BINARY_DIR}/include/mxlinear
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp")
if(MXLINEAR_BUILD_TOOLS)
  install(TARGETS mxlinear_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

install(EXPORT mxlinearTargets NAMESPACE mxlinear:: DESTINATION ${MXLINEAR_INSTALL_CMAKEDIR})

# A static mxlinear carries fmt's library into the consumer's link (a shared one does not).
get_target_property(mxl_library_type mxlinear TYPE)
if(mxl_library_type STREQUAL "STATIC_LIBRARY")
  set(MXLINEAR_NEEDS_FMT ON)
else()
  set(MXLINEAR_NEEDS_FMT OFF)
endif()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/mxlinearConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/mxlinearConfig.cmake
                              INSTALL_DESTINATION ${MXLINEAR_INSTALL_CMAKEDIR})
# 0.x releases may break the API in any minor release; from 1.0 on, the same major is compatible.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(mxl_compatibility SameMinorVersion)
else()
  set(mxl_compatibility SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/mxlinearConfigVersion.cmake
                                 COMPATIBILITY ${mxl_compatibility})
install(FILES ${PROJECT_BINARY_DIR}/mxlinearConfig.cmake
              ${PROJECT_BINARY_DIR}/mxlinearConfigVersion.cmake
        DESTINATION ${MXLINEAR_INSTALL_CMAKEDIR})
