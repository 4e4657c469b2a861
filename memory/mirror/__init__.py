"""The in-process side of the store: NumPy mirrors, the vector index (FAISS or NumPy, or pgvector on
PostgreSQL) and the sync that keeps them equal to SQL across processes."""
