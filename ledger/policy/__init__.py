"""The guard's policy and judgement (pure): :mod:`~evidence_ledger.policy.model` parses a
policy file, :mod:`~evidence_ledger.policy.judge` decides from the evidence whether a
call's tool may run. The recorder's guard and the verifier both use them."""
