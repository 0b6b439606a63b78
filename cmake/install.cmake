# cmake --install: the library with its SONAME link, the header, pkg-config and a CMake package.
include(CMakePackageConfigHelpers)

install(TARGETS volt8 EXPORT volt8Targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS volt8_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/volt8.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(EXPORT volt8Targets NAMESPACE volt8:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/volt8)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/volt8Config.cmake.in
  ${CMAKE_BINARY_DIR}/volt8Config.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/volt8)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/volt8ConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/volt8Config.cmake ${CMAKE_BINARY_DIR}/volt8ConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/volt8)

configure_file(${CMAKE_SOURCE_DIR}/cmake/volt8.pc.in ${CMAKE_BINARY_DIR}/volt8.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/volt8.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
