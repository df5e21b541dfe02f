# The installed package as a user sees it: `cmake --install` into a temporary prefix, then a
# consumer built with find_package(kljit) and with pkg-config, and the exported symbol list.
# Needs no GPU. tests/install/ is a standalone project, built only by tests/install/run.sh.
set(kljit_dep_dirs ${CUDAToolkit_LIBRARY_DIR})
foreach(lib ${LUA_LIBRARIES})
  if(IS_ABSOLUTE "${lib}")
    get_filename_component(dir "${lib}" DIRECTORY)
    list(APPEND kljit_dep_dirs "${dir}")
  endif()
endforeach()
list(REMOVE_DUPLICATES kljit_dep_dirs)
string(REPLACE ";" ":" kljit_dep_path "${kljit_dep_dirs}")

add_test(NAME unit.install.find_package_and_pkg_config_consumers_link
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/install/run.sh consumers ${CMAKE_BINARY_DIR}
                 ${CMAKE_SOURCE_DIR} ${kljit_dep_path})
add_test(NAME unit.install.shared_library_exports_only_kljit_symbols
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/install/run.sh exports ${CMAKE_BINARY_DIR}
                 ${CMAKE_SOURCE_DIR})
set_tests_properties(unit.install.find_package_and_pkg_config_consumers_link
                     unit.install.shared_library_exports_only_kljit_symbols
                     PROPERTIES LABELS unit TIMEOUT 300)
