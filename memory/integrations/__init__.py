"""Memory in other ecosystems: a LangChain retriever and run tracker, and a LangGraph ``BaseStore``.

Each imports its framework lazily, with an error that names the extra to install.
"""
