"""Serving a trained team to tenants: ``Deployment`` (``deployment``: ``answer`` and ``stream``), what a request
asks (``chat_requests``), the answer it gets (``answers``), checked against a requested format or call
(``formats``, ``answer_checks``), sent as it is generated (``streaming``), kept with its ratings
(``responses``), rated (``feedback``; ``rating`` for an app that got an answer over HTTP), a tenant's memory
without a team (``tenant_memory``), the operator's defences (``operator``), and what a server did: its answers'
work timed (``timing``), counted for ``/metrics`` (``metrics``) and traced (``tracing``). The protocols that put
these on the wire, and the keys that name tenants, are in ``protocols/``."""
