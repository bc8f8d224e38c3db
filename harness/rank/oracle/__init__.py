"""The oracle: what verl's step and update must compute, from the definitions, in plain torch and transformers fp32,
one sample at a time. Nothing here imports verl or anything of harness.rank.verl_side or harness.rank.measures, at
module level or inside a function (tests/unit/test_oracle_independence.py reads every file of this package)."""
