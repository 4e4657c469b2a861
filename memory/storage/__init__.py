"""The store's SQL side: the tables (``schema``), the hot statements (``statements``), the database and what an
open store holds (``database``), the values the store hands out (``records``), reading memories back by id
(``items``), and export/import files (``jsonl``)."""
