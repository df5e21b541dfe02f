# SPDX-License-Identifier: Apache-2.0
# The installed package as a user sees it: `cmake --install` into a temporary prefix, then
# consumers built with find_package(kljit) (shared and static targets) and with pkg-config
# (--libs and --static), the exported symbol lists and load-time dependencies, the installed
# CLI run from the prefix; plus a parent project that add_subdirectory()s the source tree.
# Needs no GPU. tests/install/ and tests/embed/ are standalone projects, built only by
# tests/install/run.sh.
set(kljit_dep_dirs ${CUDAToolkit_LIBRARY_DIR})
foreach(lib ${LUA_LIBRARIES})
  if(IS_ABSOLUTE "${lib}")
    get_filename_component(dir "${lib}" DIRECTORY)
    list(APPEND kljit_dep_dirs "${dir}")
  endif()
endforeach()
list(REMOVE_DUPLICATES kljit_dep_dirs)
string(REPLACE ";" ":" kljit_dep_path "${kljit_dep_dirs}")

set(kljit_run_sh ${PROJECT_SOURCE_DIR}/tests/install/run.sh)
add_test(NAME unit.install.find_package_and_pkg_config_consumers_link
         COMMAND bash ${kljit_run_sh} consumers ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}
                 ${kljit_dep_path})
add_test(NAME unit.install.static_consumers_link_libkljit_a_by_find_package_and_pkg_config
         COMMAND bash ${kljit_run_sh} static ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR}
                 ${kljit_dep_path})
add_test(NAME unit.install.libraries_define_only_kljit_global_symbols
         COMMAND bash ${kljit_run_sh} exports ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
add_test(NAME unit.install.installed_kljit_runs_from_its_prefix
         COMMAND bash ${kljit_run_sh} cli ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
add_test(NAME unit.install.add_subdirectory_consumer_builds_the_library_alone
         COMMAND bash ${kljit_run_sh} embed ${PROJECT_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(unit.install.find_package_and_pkg_config_consumers_link
                     unit.install.static_consumers_link_libkljit_a_by_find_package_and_pkg_config
                     unit.install.libraries_define_only_kljit_global_symbols
                     unit.install.installed_kljit_runs_from_its_prefix
                     unit.install.add_subdirectory_consumer_builds_the_library_alone
                     PROPERTIES LABELS unit TIMEOUT 600)
