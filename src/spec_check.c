/* SPDX-License-Identifier: Apache-2.0 */
/* spec_check.c — kspec_check: the family template's verdict on a spec, memoized (spec_memo.h). */
#include "spec_check.h"

#include "spec_memo.h"
#include "validator.h"

kljit_status kspec_check(const kspec *k) {
  kspec_key key;
  const int memo = spec_memo_enabled() && kspec_key_of(k, &key) == 0;
  if (memo && spec_memo_accepted(&key)) return KLJIT_SUCCESS;
  render_param params[KSPEC_MAX_PARAMS];
  const size_t n = kspec_params(k, params);
  const kljit_status st = validator_check(kspec_template(k), params, n);
  if (st == KLJIT_SUCCESS && memo) spec_memo_accept(&key);
  return st;
}
