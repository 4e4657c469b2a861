"""The lifecycle between rounds (docs/design/decisions.md, "A memory that matures"): supersession
(``supersession``), consolidation into strategies (``consolidation``, ``strategies``), forgetting under a budget
(``forgetting``, ``pruning``), the removal log (``removals``) and restoring from it (``restoring``)."""
