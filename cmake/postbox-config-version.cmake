# Version check of find_package(postbox VERSION): the version is the installed header's
# (POSTBOX_VERSION_MAJOR/MINOR/PATCH in postbox.h, which the C tests hold equal to the
# library's), so it is declared once. Compatible as Cargo reads versions: the same major,
# and below 1.0 the same minor too; and at least the version asked for.
include("${CMAKE_CURRENT_LIST_DIR}/postbox-dirs.cmake")
set(PACKAGE_VERSION "")
if(POSTBOX_INCLUDE_DIR)
  file(STRINGS "${POSTBOX_INCLUDE_DIR}/postbox.h" _postbox_defines
    REGEX "^#define POSTBOX_VERSION_(MAJOR|MINOR|PATCH) [0-9]+$")
  foreach(_part MAJOR MINOR PATCH)
    string(REGEX REPLACE ".*#define POSTBOX_VERSION_${_part} ([0-9]+).*" "\\1"
      _postbox_${_part} "${_postbox_defines}")
  endforeach()
  set(PACKAGE_VERSION "${_postbox_MAJOR}.${_postbox_MINOR}.${_postbox_PATCH}")
endif()

if(NOT PACKAGE_VERSION)
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
elseif(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(NOT PACKAGE_FIND_VERSION_MAJOR EQUAL _postbox_MAJOR)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
elseif(_postbox_MAJOR EQUAL 0 AND NOT PACKAGE_FIND_VERSION_MINOR EQUAL _postbox_MINOR)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()

unset(_postbox_defines)
unset(_postbox_libdir)
