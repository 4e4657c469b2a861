"""Weight updates: the MARFT training switch, escalation when prompts plateau, and the adapter registry."""
