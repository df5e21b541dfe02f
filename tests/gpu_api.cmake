# SPDX-License-Identifier: Apache-2.0
# gpu_api: execute-argument validation on a real plan (nothing written on rejection) and one
# plan shared by two threads. Skips (77) where there is no GPU.
add_executable(gpu_api gpu_api.c)
target_link_libraries(gpu_api PRIVATE kljit kljit_gpusupport Threads::Threads)
kljit_test_cases(EXE gpu_api SOURCE gpu_api.c PREFIX gpu.api LABELS gpu)
