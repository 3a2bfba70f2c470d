# CMake package config for an installed libpostbox: find_package(postbox) then
#   target_link_libraries(app PRIVATE postbox::postbox)
# Installed by .ci/package.sh (after `cargo cinstall`) to PREFIX/lib/cmake/postbox/, so the
# library and headers are found relative to this file.
get_filename_component(_postbox_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)

find_library(POSTBOX_LIBRARY NAMES postbox PATHS "${_postbox_prefix}/lib" NO_DEFAULT_PATH)
find_path(POSTBOX_INCLUDE_DIR postbox.h PATHS "${_postbox_prefix}/include" NO_DEFAULT_PATH)

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(postbox REQUIRED_VARS POSTBOX_LIBRARY POSTBOX_INCLUDE_DIR)

if(postbox_FOUND AND NOT TARGET postbox::postbox)
  find_package(Threads REQUIRED)
  add_library(postbox::postbox SHARED IMPORTED)
  set_target_properties(postbox::postbox PROPERTIES
    IMPORTED_LOCATION "${POSTBOX_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${POSTBOX_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS};m")
endif()
unset(_postbox_prefix)
