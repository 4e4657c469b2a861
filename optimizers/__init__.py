"""Learning algorithms over an agent team's prompts and weights: textual gradients, Training-Free GRPO, MARFT.

May import ``memory`` and ``connectors``; imported by ``evolve``.
"""
