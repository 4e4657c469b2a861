"""Teams beyond a chain: parallel members with a vote or a judge (``parallel``), how different their
answers are (``diversity``: K*), a diagnosis of a team or a pool on sample tasks (``diagnose``), and the
choice of a team from a pool of candidates (``compose``)."""
