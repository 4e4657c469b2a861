"""Writing: the checks at the store's edges (``checks``), turning an attempt into an experience (``writer``), the
rows about to be stored (``batch``), intent grouping (``grouping``), the inserts (``inserts``) and the store's
write paths (``adding``)."""
