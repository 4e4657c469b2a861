"""What the tests and the benchmarks share: fake servers and models, and starters for real ones.

``fake_openai`` (an OpenAI-compatible server on 127.0.0.1 with scripted faults), ``fake_vllm`` (a
stand-in ``vllm`` module), ``copying_model`` (a model that copies revealed answers), ``postgres`` (a
PostgreSQL + pgvector test server), ``vllm_serve`` (vLLM's own server), ``extras`` (imports with an
optional package missing), ``marft_gpu`` (what a MARFT team costs on a GPU) and ``isolation`` (the
autouse fixture every test runs under). Nothing here imports ``bench``; ``bench`` may import these.
"""
