"""The protocols a deployment speaks, each an optional extra imported only when its server is built: the
OpenAI-compatible HTTP API (``openai_http``; its bodies and errors in ``openai_requests``, the operator's routes
in ``openai_admin``), MCP (``mcp``, ``mcp_operator``, over HTTP ``mcp_http``), A2A (``a2a``, ``a2a_tasks``) and
a LangChain ``Runnable`` (``langchain``); the bearer keys of tenants and the operator in ``keys``."""
