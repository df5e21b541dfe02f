/* SPDX-License-Identifier: Apache-2.0 */
/* host_dtype.h — the tests' view of the library's host fp16/bf16 conversions (src/host_dtype.h,
 * compiled into kljit_testsupport too): one implementation, without exposing the rest of src/. */
#include "../src/host_dtype.h"
