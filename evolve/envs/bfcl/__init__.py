"""BFCL (the Berkeley Function Calling Leaderboard v4) as environments: its questions, functions and
possible answers from the ``bfcl-eval`` package, checked by BFCL's own rules."""
