# SPDX-License-Identifier: Apache-2.0
# unit_kiface: kernel interfaces (src/kiface.c, templates/iface.cu.lua): manifests against the
# rendered signatures, marshalling by role, stale cached manifests refused. No GPU needed.
kljit_test_exe(unit_kiface unit_kiface.c)
kljit_test_cases(EXE unit_kiface SOURCE unit_kiface.c PREFIX unit.kiface LABELS unit)
