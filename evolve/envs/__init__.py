"""Task environments: task sets, answer checkers (rules, text and maths matchers), TextWorld, HumanEval, CHAMP.

They depend only on ``connectors``: an environment knows nothing of agents, memory or the loop.
"""
