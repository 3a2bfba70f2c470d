# Where an installed libpostbox is, relative to this file (LIBDIR/cmake/postbox/): the library
# directory, and the include directory of its prefix, which sits one level above LIBDIR (lib,
# lib64) or two (lib/x86_64-linux-gnu). Shared by postbox-config.cmake and
# postbox-config-version.cmake.
get_filename_component(_postbox_libdir "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
find_path(POSTBOX_INCLUDE_DIR postbox.h
  PATHS "${_postbox_libdir}/../include" "${_postbox_libdir}/../../include"
  NO_DEFAULT_PATH)
