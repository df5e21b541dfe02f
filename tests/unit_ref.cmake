# unit_ref: the double-precision CPU reference (tests/ref.c) and host_dtype conversions.
kljit_test_exe(unit_ref unit_ref.c)
foreach(case
    one_hot_teacher_with_uniform_logits_costs_log_v
    uniform_teacher_with_uniform_logits_costs_zero
    two_class_problem_matches_hand_values_at_t1_and_t2
    dense_teacher_logits_use_the_teacher_temperature_or_t
    all_rows_ignored_gives_zero_loss_and_gradients
    zero_teacher_probabilities_contribute_zero_log_zero
    teacher_probabilities_below_eps_are_floored_inside_the_log
    reductions_agree_up_to_their_scale
    results_do_not_depend_on_the_block_size
    t_squared_flag_scales_loss_and_gradients
    gradients_match_finite_differences_dense_probs
    gradients_match_finite_differences_dense_logprobs
    gradients_match_finite_differences_dense_logits
    gradients_match_finite_differences_sparse_tail_none
    gradients_match_finite_differences_sparse_tail_renorm
    gradients_match_finite_differences_sparse_tail_bucket
    gradients_match_finite_differences_sparse_logprob_values
    dense_probs_logprobs_and_logits_agree
    sparse_tail_none_with_full_support_equals_dense_probs
    sparse_tail_none_equals_dense_probs_padded_with_zeros
    sparse_tail_renorm_with_full_support_equals_tail_none_at_mass_one
    sparse_tail_renorm_equals_dense_probs_of_the_renormalized_teacher
    sparse_tail_bucket_with_full_support_equals_dense
    sparse_tail_bucket_is_the_kl_of_the_coarsened_distributions
    sparse_duplicate_ids_count_each_occurrence
    renorm_row_with_zero_mass_contributes_nothing
    ref_rejects_invalid_inputs
    host_bf16_and_fp16_round_trip_every_representable_value
    host_bf16_and_fp16_round_ties_to_even
    host_nan_stays_nan_and_fp16_overflows_to_infinity
    host_store_and_load_round_trip_every_dtype
    host_rng_is_deterministic_and_well_spread)
  kljit_test(NAME unit.ref.${case} EXE unit_ref CASE ${case} LABELS unit)
endforeach()
