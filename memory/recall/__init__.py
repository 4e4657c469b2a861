"""Recalling: the maths of phase A and B (``scoring``), planning a recall on the mirrors (``planning``), the Q a
context earned (``context_q``), a recall through the store (``retrieving``), the recall log (``log``) and its
retention (``expiry``)."""
