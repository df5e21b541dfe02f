# SPDX-License-Identifier: Apache-2.0
# pip: `pip install .` (pyproject.toml, scikit-build-core from PyPI) into a fresh virtual
# environment builds libkljit into the package, and `import kljit` then loads it with no
# KLJIT_LIBRARY. It rebuilds the library and needs PyPI, so it runs only where
# KLJIT_TEST_PIP=1 (CI's .ci/run sets it); elsewhere it skips (77).
add_test(NAME unit.pip.a_fresh_venv_installs_the_package_with_the_library_inside
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/pip_install.sh)
set_tests_properties(unit.pip.a_fresh_venv_installs_the_package_with_the_library_inside
                     PROPERTIES LABELS unit SKIP_RETURN_CODE 77 TIMEOUT 1200)
