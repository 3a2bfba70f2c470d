# CMake package config for an installed libpostbox: find_package(postbox) then
#   target_link_libraries(app PRIVATE postbox::postbox)
# Installed to LIBDIR/cmake/postbox/ (after `cargo cinstall`), with postbox-config-version.cmake
# beside it, so the library is found two levels up whatever LIBDIR is (lib, lib64,
# lib/x86_64-linux-gnu) and the headers in PREFIX/include above it.
include("${CMAKE_CURRENT_LIST_DIR}/postbox-dirs.cmake")

find_library(POSTBOX_LIBRARY NAMES postbox PATHS "${_postbox_libdir}" NO_DEFAULT_PATH)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(postbox
  REQUIRED_VARS POSTBOX_LIBRARY POSTBOX_INCLUDE_DIR
  VERSION_VAR postbox_VERSION)

if(postbox_FOUND AND NOT TARGET postbox::postbox)
  find_package(Threads REQUIRED)
  add_library(postbox::postbox SHARED IMPORTED)
  set_target_properties(postbox::postbox PROPERTIES
    IMPORTED_LOCATION "${POSTBOX_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${POSTBOX_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS};m")
endif()
unset(_postbox_libdir)
