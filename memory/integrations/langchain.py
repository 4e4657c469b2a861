"""LangChain retriever over the Q-valued memory: two-phase recall as ``Document``s.

``MemoryRetriever`` is a ``langchain_core`` ``BaseRetriever``: a chain or an agent recalls with it
like with any other retriever, and each returned ``Document`` carries the recall id in its metadata,
so the reward that follows can reinforce exactly the memories that were used — directly with
``MemoryStore.reinforce(recall_id, reward, namespace=...)`` (the document's ``namespace`` metadata), or by
run id through ``memory.integrations.langchain_tracker``.

Needs the ``langchain`` extra (``pip install -e '.[langchain]'``); ``import memory`` does not load it.

Example:
    >>> from connectors import HashEmbedder
    >>> from memory import MemoryStore
    >>> store = MemoryStore("sqlite://", embedder=HashEmbedder())
    >>> _ = store.add("sort a list of numbers", "use sorted(xs)")
    >>> docs = MemoryRetriever(store=store, k=1).invoke("sort numbers")
    >>> docs[0].page_content, docs[0].metadata["recall_id"] == store.explain(docs[0].metadata["recall_id"])["id"]
    ('use sorted(xs)', True)
    >>> store.close()
"""

from __future__ import annotations

from typing import Any

from connectors.errors import ConfigError
from connectors.install import extra_hint
from memory.config import RetrievalConfig, recall_config
from memory.storage.records import Recall
from memory.store import MemoryStore
from memory.write.checks import check_k, check_namespace

INSTALL_HINT = extra_hint("langchain")

try:
    from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables.config import run_in_executor
except ImportError as e:  # the optional extra is missing: say which one
    raise ConfigError(
        f"memory.integrations.langchain needs langchain-core from the 'langchain' extra: {INSTALL_HINT}"
    ) from e

__all__ = ["MemoryRetriever", "recall_config", "to_documents"]


def to_documents(recall: Recall) -> list[Document]:
    """One ``Document`` per recalled memory, best first: the experience as page content; id, intent,
    Q, visits, similarity, score and the recall id in metadata."""
    return [
        Document(
            id=d.item.id,
            page_content=d.item.experience,
            metadata={
                "memory_id": d.item.id,
                "namespace": d.item.namespace,
                "intent": d.item.intent,
                "q": d.item.q,
                "visits": d.item.visits,
                "similarity": d.sim,
                "score": d.score,
                "rank": rank,
                "recall_id": recall.id,
            },
        )
        for rank, d in enumerate(recall.details)
    ]


class MemoryRetriever(BaseRetriever):
    """Two-phase Q-ranked recall from a ``MemoryStore`` namespace, as a LangChain retriever.

    Every call is one logged recall (``store.explain(recall_id, namespace=...)`` shows why each memory was
    chosen).

    Args:
        store: the memory store to recall from.
        namespace: the store namespace (tenant or agent) to recall from.
        k: how many memories to return (the recall's ``k2``); None keeps the store's default.
            ``invoke(query, k=3)`` overrides it for one call.
        config: retrieval settings for this retriever (default: the store's); ``k`` replaces its ``k2``.
        **kwargs: ``BaseRetriever`` fields (``tags``, ``metadata``).

    Example:
        >>> from connectors import HashEmbedder
        >>> store = MemoryStore("sqlite://", embedder=HashEmbedder())
        >>> _ = store.add_many([("book a flight", "search by date"), ("book a hotel", "filter by price")])
        >>> retriever = MemoryRetriever(store=store, k=2)
        >>> len(retriever.invoke("book a trip")), len(retriever.invoke("book a trip", k=1))
        (2, 1)
        >>> store.close()
    """

    store: MemoryStore
    namespace: str = "default"
    k: int | None = None
    config: RetrievalConfig | None = None

    def __init__(
        self,
        *,
        store: MemoryStore,
        namespace: str = "default",
        k: int | None = None,
        config: RetrievalConfig | None = None,
        **kwargs: Any,
    ) -> None:
        # Checked here so that a wrong argument is our ConfigError, not a pydantic ValidationError.
        if not isinstance(store, MemoryStore):
            raise ConfigError(f"MemoryRetriever store must be a MemoryStore, got {type(store).__name__}")
        if config is not None and not isinstance(config, RetrievalConfig):
            raise ConfigError(f"MemoryRetriever config must be a RetrievalConfig or None, got {type(config).__name__}")
        check_namespace(namespace)
        if k is not None:
            check_k(k, "MemoryRetriever")
        super().__init__(store=store, namespace=namespace, k=k, config=config, **kwargs)

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        k = None if k is None else check_k(k, "MemoryRetriever.invoke")
        base = self.config if self.config is not None else self.store.config.retrieval
        cfg = recall_config(base, k if k is not None else self.k)
        return to_documents(self.store.retrieve(query, namespace=self.namespace, config=cfg))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun, k: int | None = None
    ) -> list[Document]:
        # The store is synchronous (docs/design/decisions.md, "One synchronous core"); the default executor keeps the
        # event loop free.
        return await run_in_executor(None, self._get_relevant_documents, query, run_manager=run_manager.get_sync(), k=k)
