"""The versioned prompts of a team (``PromptGraph``) and the loop that evolves them (``PromptEvolution``)."""
