"""Learning from reward: the TD rule (``rule``), what a reward names (``targets``), the Q update in SQL
(``rewards``), provenance edges (``provenance``) and credit along them (``credit``)."""
